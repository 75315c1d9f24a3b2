"""The witnesses of where a served model's work went, as pure readers of what an engine and
a node leave: the engines' own logs (``engine_log``, ``nccl_log``, ``llama_log``, read
together by ``logs``), the interface counters per generated token (``traffic``), and the
served tokens against a one-node reference (``tokens``). Standard library only, Python 3.9:
the supervisor on the head reads them too."""
