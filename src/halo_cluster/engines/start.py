"""An engine's start plan (pure): which processes it starts, on which nodes, with which
environment and argv, in which order. An engine's ``start_plan`` returns it and starts
nothing; ``engines.process.run_plan`` is the one executor that runs it at a bring-up, and the
supervisor replays the same steps after a restart (``start_steps``: the plan as the scripts
the executor runs, in its order).

A plan is a list of stages: every launch of a stage starts at once, and a launch with
``ready`` is waited for (a TCP connection from the head to ``address:port``) before the next
stage starts, as llama-server needs every rpc-server listening. The environment may hold
the API key or a token: ``repr`` leaves it out and ``to_dict`` gives secret values as
``(secret)``."""

from __future__ import annotations

from dataclasses import dataclass, field

from halo_cluster.engines.scripts import background_script, reach_script
from halo_cluster.jsonout import JsonObject
from halo_cluster.runner.quote import RAY_TOKEN_ENV, SCRIPT_ARGV, WORKER_KEY_ENV
from halo_cluster.wire.supervise import Step

START_TIMEOUT_S = 60.0  # the start script itself: it backgrounds the process and returns
# names whose values never leave the start script (API keys, Hugging Face and Ray tokens)
SECRET_ENV = frozenset({"VLLM_API_KEY", "LLAMA_API_KEY", "HF_TOKEN", RAY_TOKEN_ENV, WORKER_KEY_ENV})


@dataclass(frozen=True)
class Ready:
    """A launch is ready when the head reaches ``address:port`` (within ``timeout_s``)."""

    address: str
    port: int
    timeout_s: int

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Launch:
    """One process of the engine on one node."""

    node: str
    role: str  # what it is, in messages: "vllm serve", "rpc-server", "llama-server"
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = field(repr=False)  # may hold the API key
    title: str = ""  # the progress line at its start ("starting rpc-server on node2 at ...")
    ready: Ready | None = None

    def script(self, cluster: str) -> str:
        """The script that starts it detached on its node (``engines.scripts``)."""
        return background_script(dict(self.env), list(self.argv), cluster)

    def to_dict(self) -> JsonObject:
        return {
            "node": self.node,
            "role": self.role,
            "argv": list(self.argv),
            "env": {k: "(secret)" if k in SECRET_ENV else v for k, v in self.env},
            "ready": None if self.ready is None else self.ready.endpoint,
        }


@dataclass(frozen=True)
class StartPlan:
    stages: tuple[tuple[Launch, ...], ...]

    def to_dict(self) -> JsonObject:
        return {"stages": [[launch.to_dict() for launch in stage] for stage in self.stages]}


def launch(
    node: str, role: str, argv: list[str], env: dict[str, str], title: str = "",
    ready: Ready | None = None,
) -> Launch:  # fmt: skip
    """A ``Launch`` from the lists and mappings an engine builds (the environment sorted)."""
    return Launch(node, role, tuple(argv), tuple(sorted(env.items())), title, ready)


def start_step(launch: Launch, cluster: str) -> Step:
    """The step that starts ``launch`` on its node."""
    return Step(launch.node, SCRIPT_ARGV, launch.script(cluster), START_TIMEOUT_S)


def ready_step(ready: Ready, head: str) -> Step:
    """The step that waits on the head until ``ready``'s endpoint answers."""
    script = reach_script(ready.address, ready.port, ready.timeout_s)
    return Step(head, SCRIPT_ARGV, script, float(ready.timeout_s + 10))


def start_steps(plan: StartPlan, cluster: str, head: str) -> list[Step]:
    """The plan as steps, in the executor's order: what the supervisor runs again."""
    steps = []
    for stage in plan.stages:
        for one in stage:
            steps.append(start_step(one, cluster))
            if one.ready is not None:
                steps.append(ready_step(one.ready, head))
    return steps
