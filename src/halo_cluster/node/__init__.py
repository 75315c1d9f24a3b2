"""halo's node side: the commands the controller runs on a node (inventory, counters,
health and probe requests, Ray's node table, the benchmark driver and probe, setup, the
exporter), with the standard library only and on Python >= 3.9.

halo sends this code to a node as a zipapp (``halo_cluster.nodecode``) when the node has no
``halo`` configured; a node with halo installed runs the same commands through ``halo``.
A contract in pyproject.toml keeps click, rich and the rest of the command line out of it.
"""
