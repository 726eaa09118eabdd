"""Entry point for a generation replica: the simulated vLLM (``--backend sim``)."""
