"""The engines halo serves with, one module each behind one protocol (``engines.protocol``):
vLLM (``engines.vllm``) and llama.cpp over RPC (``engines.llama_cpp``). ``engine_registry``
names them; the CLI's choices, config validation, ``plan``, ``status`` and rendering read it."""
