"""Benchmarks: the fabric (``net``: latency and bandwidth per path), collectives and the
tensor-parallel replay (``driver``, ``rank``, ``allreduce``), serving load (``serve_load``),
and their versioned results (``results``)."""
