"""Experiments made of many runs (e.g. the ablation grid), each run recorded as one JSON line."""
