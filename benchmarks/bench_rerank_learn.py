"""Seconds to learn the re-ranking stage, two versions of the code on one trained run, alternating fresh processes, and whether they make the same choice.

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_rerank_learn.py \
        --data DATA --run RUN --old OLD [--split auto] [--rounds 2] [--label LABEL]

OLD: a folder holding the other version's basketgnn/ (``git worktree add`` or ``git archive``).
Each round runs, for each code (old first in even rounds, this checkout first in odd ones), a
fresh worker process with PYTHONPATH set to that code's folder and the working directory
outside the checkout (so the import is that code's; the worker records the path it imported),
with only PYTHONPATH and PATH in its environment (the same for both codes). The worker learns
the stage with :func:`basketgnn.recommenders.reranked.learn` over what RUN's checkpoint ships
(stage seed 0, the default criterion and item pairs) and prints the choice record (kept, epoch,
training targets, each one's validation criterion, the gain, whether the item pairs stay) and
the seconds. A code whose
numba kernels are not cached yet compiles them in its first round: run it once beforehand, or
leave that round out. One JSON line per (round, code) goes to
``benchmarks/results/rerank_learn.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import append_result

PROJECT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from bench_rerank import loaded
import basketgnn
from basketgnn.recommenders import reranked
data, sp, shipped, tifu = loaded(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
t0 = time.perf_counter()
stage, record = reranked.learn(shipped, data, sp["train"], sp["validate"], tifu)
row = {k: record[k] for k in ("kept", "epoch", "prefixes", "prefix_criteria", "validation_criterion", "gain")}
row["item_pairs_kept"] = record.get("item_pairs_kept")  # a code without the pairs' choice: None
row["learn_s"] = round(time.perf_counter() - t0, 2)
row["code_path"] = str(Path(basketgnn.__file__).parent.parent)
print(json.dumps(row))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--run", type=Path, required=True, help="a `basketgnn train` folder (its best.pt)")
    ap.add_argument("--old", type=Path, required=True, help="a folder holding the other version's basketgnn/")
    ap.add_argument("--split", default="auto")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--label", default="learn")
    args = ap.parse_args()
    codes = {"old": args.old.resolve(), "new": PROJECT}
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            cmd = [sys.executable, "-c", WORKER, args.data, args.split, str(args.run.resolve()), str(PROJECT / "benchmarks")]
            done = subprocess.run(cmd, env={"PYTHONPATH": str(codes[name]), "PATH": "/usr/bin:/bin"}, cwd="/",
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0 or not done.stdout.strip():
                sys.exit(f"{name} round {r} failed:\n{done.stderr[-3000:]}")
            row = {"label": args.label, "data": args.data, "run": str(args.run), "round": r, "code": name,
                   **json.loads(done.stdout.strip().splitlines()[-1])}  # fmt: skip
            append_result("rerank_learn", row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
