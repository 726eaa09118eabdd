"""Deploy a rollout fleet on Hugging Face Jobs: ``python -m deploy up|status|logs|down``.

``up`` launches N vLLM replica jobs, then the trainer (with the proxy beside it, topology
``sidecar``) or the proxy as its own job and the trainer pointed at it (topology ``job``). All jobs
mount one Storage Bucket at the same path; only the trainer writes to it. See ``deploy.cli``.
"""
