"""The gateway: one authenticated OpenAI endpoint on the head in front of every deployment's
replicas. The data path is ``vllm-router`` (routing by model, health checks, circuit breaker,
retries, its own Prometheus metrics); in front of it halo's key gate (``gate``: the API keys,
hashed, checked on every request, counted per key), since the router authenticates no client.
``keys`` is the key store, ``control`` starts, registers and stops them on the head."""
