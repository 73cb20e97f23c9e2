"""Ablation specs for the tests of basketgnn.experiments: a small grid written as YAML, and the
lines of its results.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

TABLE_METRICS = ["recall@10", "ndcg@10", "phr@10", "recall@20"]


def write_spec(folder: Path, dataset: Path, **changes) -> Path:
    """``folder/ablation.yaml``: DNNTSP variants full and no-gcn (two epochs, seeds 0 and 1) and
    p-topfreq on ``dataset``, results under ``folder/out``; ``changes`` replace top-level keys."""
    spec = {
        "out": "out",  # relative: resolved against the spec's folder
        "datasets": {"synth": str(dataset)},
        "seeds": [0, 1],
        "base": {"epochs": 2, "embed_dim": 8, "threads": 1},
        "variants": {"full": {}, "no-gcn": {"gcn": False}},
        "baselines": ["p-topfreq"],
        "metrics_in_table": TABLE_METRICS,
    }
    spec.update(changes)
    path = folder / "ablation.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
