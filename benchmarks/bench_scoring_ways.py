"""`recommend`'s whole path for several (code, checkpoint) pairs in one run: customers/s of each, the order rotated every round.

    # under the exclusive timing lock; CODE: a folder holding a version's basketgnn/ (this
    # checkout, or a `git archive` of another commit)
    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_scoring_ways.py \\
        --way stage=/work/main=runs/a/best.pt --way fused=/work/main=runs/b/best.pt --rounds 8 --tag T

Where :mod:`bench_real_scoring` compares two codes on one checkpoint (and their rows), this
compares any ways of ranking the same customers: a model with and without its re-ranking stage,
two checkpoints of one code, the code before and after a change. Each way runs in a fresh worker
process (:func:`bench_real_scoring.run_worker`: it loads the checkpoint, warms up, then writes every
customer's top ``--k`` ``--passes`` times on ``--threads`` threads) with PYTHONPATH set to its
code and the working directory outside any checkout. Round r takes the ways starting at the
r-th (mod their number), reversed in odd rounds, so the VM's drift falls on each in turn. The
summary gives each way's median and best wall seconds of the later passes (the first pays a
process's one-time costs) and their median CPU seconds. One JSON line per pass goes to
``benchmarks/results/scoring_ways.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench_real_scoring import run_worker
from common import append_result


def parse_way(text: str) -> tuple[str, Path, Path]:
    """LABEL=CODE=CHECKPOINT -> (label, code folder, checkpoint)."""
    parts = text.split("=")
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: a way is LABEL=CODE=CHECKPOINT")
    return parts[0], Path(parts[1]).resolve(), Path(parts[2]).resolve()


def round_order(ways: list, r: int) -> list:
    """Round r's order: the ways from the r-th on, then the first ones, reversed in odd rounds."""
    start = r % len(ways)
    order = ways[start:] + ways[:start]
    return order[::-1] if r % 2 else order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--way", type=parse_way, action="append", required=True, help="LABEL=CODE=CHECKPOINT (repeat)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    later: dict[str, list[dict]] = {label: [] for label, _, _ in args.way}
    with tempfile.TemporaryDirectory(prefix="bench-scoring-ways-") as tmp:
        for r in range(args.rounds):
            for label, code, checkpoint in round_order(args.way, r):
                out = Path(tmp) / f"r{r}-{label}"
                measured = run_worker(code, out, checkpoint, None, args.k, [args.threads], args.warmup, args.passes,
                                      f"{label} ({checkpoint})")  # fmt: skip
                for record in measured:
                    record = {"tag": args.tag, "way": label, "code_path": str(code), "checkpoint": str(checkpoint),
                              "round": r, **record}  # fmt: skip
                    print(json.dumps(record), flush=True)
                    if not args.no_record:
                        append_result("scoring_ways", record)
                    if record["pass"] > 0:
                        later[label].append(record)
    for label, records in later.items():
        wall = [x["wall_s"] for x in records]
        if not wall:
            print(f"{label}: no later pass (--passes 1)")
            continue
        median = statistics.median(wall)
        cpu = statistics.median(x["cpu_s"] for x in records)
        print(f"{label}: median {median:.4f} s ({records[0]['customers'] / median:,.0f} customers/s), "
              f"CPU {cpu:.3f} s, best {min(wall):.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
