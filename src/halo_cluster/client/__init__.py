"""The controller's handle on nodes: one ``NodeClient`` per node, and a bounded fan-out."""
