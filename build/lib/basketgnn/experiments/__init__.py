"""Experiments made of many runs, each run recorded as one JSON line. The ablation grid:

- :mod:`~basketgnn.experiments.ablation_spec`: the YAML spec, validated into a grid of runs.
- :mod:`~basketgnn.experiments.ablation`: running the grid, resumably (``ablate``, ``run_grid``).
- :mod:`~basketgnn.experiments.ablation_results`: the results line and ``results.jsonl``.
- :mod:`~basketgnn.experiments.ablation_table`: the table and chart made from those lines.
"""
