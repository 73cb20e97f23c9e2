"""The one training engine for every neural model (see spec.py for the model contract)."""
