"""What llama.cpp's RPC backend sends per decoded token (ggml/src/ggml-rpc/ggml-rpc.cpp).

With ``--rpc`` the remote servers come first in llama.cpp's device list, so a layer split
over N nodes runs the layers of the N-1 rpc-servers first and those of the host last; one
node computes at a time for a single stream. The host's ggml scheduler drives every remote
stage; data never flows from one rpc-server to another (copying between two servers goes
through the host). Per stage and token it sends, on one TCP (or RDMA) stream:

- ``SET_TENSOR`` for each input of the stage's graph split: the hidden state (F32, hidden
  values per token), the token positions (int32) and the attention mask (F16, one value
  per KV cell in use); each carries a serialised ``rpc_tensor`` header, a cache flag and an
  offset. No reply.
- ``GRAPH_RECOMPUTE`` (the server replays the graph it stored) while the graph is reused;
  llama.cpp rebuilds the graph when the KV cells in use grow past the next multiple of
  256, and then ``GRAPH_COMPUTE`` carries the whole serialised graph. No reply.
- ``GET_TENSOR`` for the stage's output hidden state: the only reply, so the host waits one
  round trip (after the remote compute, which is counted as compute, not network).

So a stage costs one round trip (2·α) plus all its bytes over β, and a fixed cost that
neither explains: the engine's per-stage cost (engines.Tuning.per_stage_us), measured as
the difference between one node and two.

Older builds cost more per stage (``graph_reuse`` false, ``round_trips`` > 1): before
PR #15405 (2025-11-28) the host serialised the whole graph every token and GRAPH_COMPUTE
waited for a reply; before PR #12943 (2025-04-25) each of the four SET_TENSORs of a token
waited for an empty reply too.

When the head has no device of its own (a CPU-only head, as in the lab), llama.cpp offloads
the last layers and the output to the workers: the last stage returns the logits (F32 per
vocabulary entry), not the hidden state.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RpcProtocol:
    frame_bytes: int  # command byte + 64-bit request size
    reply_frame_bytes: int  # 64-bit reply size
    rpc_tensor_bytes: int  # sizeof(rpc_tensor), the packed tensor description
    set_tensor_extra_bytes: int  # cache flag + offset after the rpc_tensor
    get_tensor_extra_bytes: int  # offset + size after the rpc_tensor
    recompute_bytes: int  # the device id of GRAPH_RECOMPUTE
    graph_header_bytes: int  # device, node count, tensor count of GRAPH_COMPUTE
    hidden_value_bytes: int  # the hidden state crosses stages in F32
    position_bytes: int  # int32 per token
    mask_value_bytes: int  # F16 per KV cell and token
    kv_cell_pad: int  # KV cells in use are rounded up to this; the graph is rebuilt per step
    graph_nodes_per_layer: int  # ops of one transformer layer in ggml's decode graph
    graph_tensors_per_layer: int  # nodes + weights + views the serialised graph lists
    source: str
    graph_reuse: bool = True  # the server replays its stored graph (PR #15405)
    round_trips: int = 1  # replies the host waits for, per stage and token

    def set_tensor(self, data_bytes: float) -> float:
        return self.frame_bytes + self.rpc_tensor_bytes + self.set_tensor_extra_bytes + data_bytes

    def graph_bytes(self, layers: float) -> float:
        """GRAPH_COMPUTE of a stage: node ids (8 bytes each) and every tensor serialised."""
        return (
            self.frame_bytes
            + self.graph_header_bytes
            + 8 * self.graph_nodes_per_layer * layers
            + self.rpc_tensor_bytes * self.graph_tensors_per_layer * layers
        )

    def kv_cells(self, context: int) -> int:
        return -(-max(1, context) // self.kv_cell_pad) * self.kv_cell_pad

    def stage_bytes(
        self, hidden: int, layers: float, batch: int, context: int, returned: int = 0
    ) -> float:
        """Bytes on the wire (both directions) for one remote stage and one decode step;
        ``returned``: values per token the stage sends back (default: the hidden state)."""
        state = hidden * self.hidden_value_bytes * batch
        back = (returned or hidden) * self.hidden_value_bytes * batch
        sends = (
            self.set_tensor(state)
            + self.set_tensor(self.position_bytes * batch)
            + self.set_tensor(self.mask_value_bytes * self.kv_cells(context) * batch)
        )
        # the graph is sent whole once per kv_cell_pad steps, replayed in between (or every
        # step by a build without graph reuse)
        graph = (
            (
                self.graph_bytes(layers)
                + (self.kv_cell_pad - 1) * (self.frame_bytes + self.recompute_bytes)
            )
            / self.kv_cell_pad
            if self.graph_reuse
            else self.graph_bytes(layers)
        )
        request = self.frame_bytes + self.rpc_tensor_bytes + self.get_tensor_extra_bytes
        reply = self.reply_frame_bytes + back
        return sends + graph + request + reply

    def stage_seconds(
        self,
        hidden: int,
        layers: float,
        batch: int,
        context: int,
        alpha_us: float,
        beta_gbps: float,
        returned: int = 0,
    ) -> float:
        """The round trips plus the stage's bytes at the link's bandwidth (without the
        engine's fixed cost per stage)."""
        data = self.stage_bytes(hidden, layers, batch, context, returned)
        wire = data * 8 / (beta_gbps * 1e9)
        return self.round_trips * 2 * alpha_us * 1e-6 + wire
