"""rollout-proxy: one fast, safe front that makes N vLLM replicas look like one server to TRL."""

__version__ = "0.1.0"
