"""Run an ablation grid described in a YAML file, then write its table and chart.

    .venv/bin/python pipelines/ablate.py pipelines/ablation.yaml
    .venv/bin/python pipelines/ablate.py pipelines/ablation.yaml --datasets DC
    .venv/bin/python pipelines/ablate.py pipelines/ablation.yaml --table-only

Finished runs (one line each in <out>/results.jsonl) are skipped, so rerunning resumes an
interrupted grid. The work is done by basketgnn.experiments.ablation; this only reads argv.
"""

from __future__ import annotations

import argparse
import sys

from basketgnn.errors import UserError
from basketgnn.experiments.ablation import ablate, describe_event


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python pipelines/ablate.py pipelines/ablation.yaml --datasets DC",
    )
    ap.add_argument("spec", help="the ablation YAML (see pipelines/ablation.yaml)")
    ap.add_argument(
        "--datasets", nargs="+", metavar="NAME", help="run only these datasets of the spec"
    )
    ap.add_argument(
        "--table-only",
        action="store_true",
        help="train nothing; remake table.md and chart.png from results.jsonl",
    )
    args = ap.parse_args(argv)
    try:
        outputs = ablate(
            args.spec,
            only_datasets=args.datasets,
            table_only=args.table_only,
            progress=lambda event: print(describe_event(event), flush=True),
        )
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(outputs.results)} results -> {outputs.table}, {outputs.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
