"""halo: one tensor-parallel LLM inference cluster from a few RDMA-linked machines."""

__version__ = "0.1.0"
