"""A generation replica for the proxy: ``python -m replica_entry --backend {vllm,sim}``.

- ``--backend vllm`` (``vllm_backend``): vLLM's OpenAI server with the flags and environment TRL's
  LoRA sync needs, run as a supervised child (``supervise``), with our adapter receiver
  (``receiver``) inside vLLM's API server as ASGI middleware, so the proxy can push adapters
  (unless ``--no-adapter-receiver``);
- ``--backend sim`` (``sim``): the simulated vLLM replica, vLLM's HTTP contract with a
  prefix-cache and latency model, for the tests, the benchmarks and the demo.

``cli`` is the command line for both (its help, ``--version`` and unit flags are every program's:
``proxy.config.programs``, ``proxy.config.units``).
"""
