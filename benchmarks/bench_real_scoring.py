"""Scoring throughput of two versions of the code on one checkpoint, alternating, and whether
they write the same ranked rows: customers/s of `recommend`'s code path on 1 and 2 threads.

    # under the exclusive timing lock; OLD: a folder holding the other version's basketgnn/
    flock /tmp/basketgnn-timing.lock python benchmarks/bench_real_scoring.py \\
        --checkpoint /work/serve-real/realistic/best.pt --old /work/main --rounds 3

Each round runs, for each code (old first in even rounds, this checkout first in odd ones:
the VM's drift within a round falls on each in turn), a fresh worker process with PYTHONPATH
set to that code's folder. The worker loads the checkpoint (and its data, or
``--data``), ranks ``--warmup`` customers untimed on each thread count (one-time costs: the
compiled kernels' cache, torch's first calls, the fusion's first search), then for each of
``--threads`` writes every customer's top ``--k`` with
:func:`basketgnn.workflow.recommendations.write_recommendation_parts` (what `recommend` runs)
``--passes`` times over, and records each pass's wall and CPU seconds (``pass`` 0, 1, ...).
The first pass still pays what a process pays once (memory first touched, the first full-size
batches); the later ones are what a job of many chunks runs at. The parent compares the parts each code wrote: the share of
identical (customer, item, rank) rows and the largest score difference among them, old against
new and one thread against two. One JSON line per measurement and per comparison goes to
benchmarks/results/real_scoring.jsonl (``--tag`` and the 1-minute load beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROJECT = Path(__file__).resolve().parent.parent


def worker(
    checkpoint: Path, data_path: Path | None, k: int, threads: list[int], warmup: int, out: Path, passes: int = 1
) -> list[dict]:
    """In the code on PYTHONPATH: each thread count's timed passes, the first one's parts written
    under out/threads{n}, the later ones' beside it."""
    import torch

    from basketgnn.cli import _checkpoint_and_data
    from basketgnn.data.split import Instances
    from basketgnn.workflow.recommendations import write_recommendation_parts

    rec, data, _ = _checkpoint_and_data(checkpoint, data_path, None)
    records = []
    for n_threads in threads:
        rec.with_threads(n_threads)
        torch.set_num_threads(n_threads)
        n_warm = min(warmup, data.n_users)
        rec.rank(data, Instances(np.arange(n_warm), data.n_baskets_per_user[:n_warm].astype(np.int64)), k)
        for p in range(passes):
            load = os.getloadavg()[0]
            folder = out / (f"threads{n_threads}" if p == 0 else f"threads{n_threads}-pass{p}")
            wall, cpu = time.perf_counter(), time.process_time()
            done = write_recommendation_parts(rec, data, k, folder, chunk=100_000)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            records.append({
                "threads": n_threads, "pass": p, "customers": int(data.n_users), "rows": int(done.rows),
                "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "customers_per_s": round(data.n_users / wall),
                "customers_per_cpu_s": round(data.n_users / max(cpu, 1e-3)), "load_1m": round(load, 2),
                "load_1m_end": round(os.getloadavg()[0], 2),
            })  # fmt: skip
    return records


def run_worker(
    code: Path, out: Path, checkpoint: Path, data_path: Path | None, k: int, threads: list[int], warmup: int,
    passes: int, label: str,
) -> list[dict]:
    """:func:`worker` in a fresh process with PYTHONPATH set to ``code`` and its working
    directory outside any checkout (so the import is that code's); its records. A failure exits
    with the worker's error, named by ``label``."""
    cmd = [sys.executable, __file__, "--worker", str(out), "--checkpoint", str(checkpoint), "--k", str(k),
           "--warmup", str(warmup), "--passes", str(passes), "--threads", *map(str, threads)]  # fmt: skip
    cmd += ["--data", str(data_path)] if data_path else []
    with tempfile.TemporaryDirectory() as cwd:  # not a project root: PYTHONPATH decides
        done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(code)}, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{label} ({code}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(folder: Path):
    import pyarrow.dataset as ds

    table = ds.dataset(folder, format="parquet").to_table()
    return table.sort_by([("customer_id", "ascending"), ("rank", "ascending")])


def agreement(a: Path, b: Path) -> dict:
    """How far two outputs agree: same number of rows, the share of identical (customer, item,
    rank) rows, the largest score difference among those."""
    x, y = rows(a), rows(b)
    if x.num_rows != y.num_rows:
        return {"same_row_count": False, "rows_a": x.num_rows, "rows_b": y.num_rows}
    same = np.ones(x.num_rows, bool)
    for c in ("customer_id", "item_id", "rank"):
        same &= x.column(c).to_numpy(zero_copy_only=False) == y.column(c).to_numpy(zero_copy_only=False)
    diff = np.abs(x.column("score").to_numpy() - y.column("score").to_numpy())[same]
    return {"rows": x.num_rows, "identical_row_share": round(float(same.mean()), 6),
            "max_score_diff_where_identical": float(diff.max()) if len(diff) else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--data", type=Path, help="customers to score (default: the checkpoint's data)")
    ap.add_argument("--old", type=Path, help="a folder holding the other version's basketgnn/ (required)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--warmup", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--passes", type=int, default=1, help="timed passes per thread count in each worker")
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        # The code on PYTHONPATH is measured: nothing of this checkout is put on the path.
        print(json.dumps(worker(args.checkpoint, args.data, args.k, args.threads, args.warmup, args.worker, args.passes)))
        return
    if args.old is None:
        ap.error("--old is required")
    sys.path.insert(0, str(PROJECT))
    from benchmarks.common import append_result, in_turn
    codes = (("old", args.old.resolve()), ("new", PROJECT))
    base = {"checkpoint": str(args.checkpoint), "data": str(args.data) if args.data else None, "k": args.k,
            "tag": args.tag, "old": str(args.old.resolve())}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-real-scoring-") as tmp:
        for r in range(args.rounds):
            outs = {}
            for label, code in in_turn(codes, r):
                out = Path(tmp) / f"r{r}-{label}"
                measured = run_worker(code, out, args.checkpoint, args.data, args.k, args.threads, args.warmup,
                                      args.passes, label)  # fmt: skip
                for record in measured:
                    record = {**base, "kind": "throughput", "code": label, "code_path": str(code), "round": r, **record}
                    print(json.dumps(record))
                    if not args.no_record:
                        append_result("real_scoring", record)
                outs[label] = out
            pairs = [(f"old-new threads{t}", outs["old"] / f"threads{t}", outs["new"] / f"threads{t}") for t in args.threads]
            pairs += [(f"new threads{args.threads[0]}-threads{t}", outs["new"] / f"threads{args.threads[0]}",
                       outs["new"] / f"threads{t}") for t in args.threads[1:]]  # fmt: skip
            for name, a, b in pairs:
                record = {**base, "kind": "rows", "round": r, "pair": name, **agreement(a, b)}
                print(json.dumps(record))
                if not args.no_record:
                    append_result("real_scoring", record)


if __name__ == "__main__":
    main()
