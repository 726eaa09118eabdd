"""The trainer side: TRL's AsyncGRPOTrainer with a LoRA, pointed at the proxy (``cli``), plus
a tiny local model (``tiny_model``) and a generated math dataset (``math_data``) for tests."""
