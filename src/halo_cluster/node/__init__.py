"""halo's node side: the commands the controller runs on a node (inventory, counters,
health and probe requests, Ray's node table, the benchmark driver and probe, setup, the
exporter), with the standard library only and on Python >= 3.9.

``main`` dispatches, ``handlers`` holds each command's short body, ``serve_api``,
``ray_nodes`` and ``net_probe`` do the work only node commands need, and ``wire`` defines
the commands, their argv and their answers once, for both sides (the GGUF header reader,
``modelstore.gguf_header``, is the controller's too and sits in the bottom layer).

halo sends this code to a node as a zipapp (``halo_cluster.nodecode``) when the node has no
``halo`` configured; a node with halo installed runs the same commands through ``halo``.
Contracts in pyproject.toml keep third-party packages and the controller's own layers out of
it (docs/architecture.md, "The node boundary").
"""
