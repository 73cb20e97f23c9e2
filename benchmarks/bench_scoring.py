"""Scoring throughput of `recommend` with the default model (DNNTSP + the TIFU-KNN fusion):
customers per second, end to end and by stage, model alone and fused, one and two threads.

    # 1. A fused checkpoint to time: a trained one, its fusion weight forced into (0, 1) when
    #    validation chose an end point (recorded as forced), torch threads left to the machine.
    python benchmarks/bench_scoring.py --checkpoint runs/tafeng/best.pt --force-weight 0.3 \\
        --save-checkpoint /tmp/scoring/tafeng.pt
    # 2. Time it (under flock /tmp/basketgnn-timing.lock):
    python benchmarks/bench_scoring.py --checkpoint /tmp/scoring/tafeng.pt --threads 1 2
    # 3. Old against new `basketgnn recommend`, alternating, in the same run:
    python benchmarks/bench_scoring.py --checkpoint /tmp/scoring/tafeng.pt --compare-old /tmp/scoring-old

Every customer of the checkpoint's data (or ``--data``) is scored from their full history, as
`basketgnn recommend` does, after ``--warmup`` customers ranked untimed (one-time costs: loading
the compiled kernels, torch's first calls; a nightly job pays them once). For each thread count and each arm (``model``: the module alone;
``fused``: the checkpoint's TIFU fusion) it measures

- ``end_to_end``: :func:`basketgnn.workflow.recommendations.write_recommendation_parts` into a temporary folder,
  the code path of `recommend` (threads 2: the fusion's search in parts of 256 customers on a
  helper thread beside the one-thread forward, which then takes the parts left);
- ``stages`` (with ``--stages``): the same work one stage after another on one thread, in
  chunks of 2048 customers as `recommend` ranks them: graph building, the module's forward
  (one shared row + each customer's own items), TIFU search, candidate top-k, rows, writing.
  ``dense`` stages time the plain path as well (the [n, I] matrix: forward, fusion, top-k).

``--compare-old DIR`` runs `basketgnn recommend --checkpoint ... --out X.parquet` as
subprocesses, alternately with PYTHONPATH=DIR (old code, e.g. ``git archive COMMIT basketgnn``)
and with this checkout, ``--rounds`` times each, records wall and CPU seconds (children's
rusage), and checks that both files hold the same rows.

One JSON line per measurement goes to benchmarks/results/scoring.jsonl (``load_1m`` beside
it). Time it under ``flock /tmp/basketgnn-timing.lock``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from basketgnn.data.split import Instances  # noqa: E402
from basketgnn.engine.batching import length_batches, score_source  # noqa: E402
from basketgnn.engine.trainer import setup_torch  # noqa: E402
from basketgnn.io_utils import write_table_stream  # noqa: E402
from basketgnn.metrics import top_k  # noqa: E402
from basketgnn.recommenders.neural import SCORE_BATCH, NeuralRecommender  # noqa: E402
from basketgnn.scoring.candidates import SharedScores, fused_top_k  # noqa: E402
from basketgnn.workflow.recommendations import (  # noqa: E402
    SCHEMA,
    recommendation_table,
    write_recommendation_parts,
)
from benchmarks.common import PROJECT, append_result, peak_rss_mb  # noqa: E402

CHUNK = 2048  # customers ranked together (evaluate.rank_items' chunk)


def _now() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds over all its threads)."""
    return time.perf_counter(), time.process_time()


def load(checkpoint: Path, data_path: Path | None) -> tuple[NeuralRecommender, object, Path]:
    from basketgnn.cli import _checkpoint_and_data

    rec, data, path = _checkpoint_and_data(checkpoint, data_path, None)
    return rec, data, path


def save_forced(src: Path, dst: Path, weight: float | None) -> None:
    """``src`` with its fusion weight set to ``weight`` (recorded in the extras as forced) and
    ``threads`` 0 (torch's default), so the scoring threads are the machine's, not training's."""
    import torch

    from basketgnn.engine.checkpoint import read_state
    from basketgnn.io_utils import atomic_path

    state = read_state(src)
    state["config"]["threads"] = 0
    if weight is not None:
        if not state.get("addon") or state["addon"].get("kind") != "tifu-fusion/1" or state["addon"]["scorer"] is None:
            sys.exit(f"{src}: no TIFU fusion to force (its add-on: {state.get('addon', {}) and state['addon'].get('kind')})")
        was = state["addon"]["weight"]
        state["addon"]["weight"] = weight
        state["extras"]["forced_fusion_weight"] = {"weight": weight, "validation_chose": was}
    with atomic_path(dst) as tmp:
        torch.save(state, tmp)
    print(f"wrote {dst} (fusion weight {weight}, threads 0)")


def by_stage(rec: NeuralRecommender, data, k: int, folder: Path, dense: bool) -> tuple[dict, dict]:
    """Wall and CPU seconds of each stage, one after another on one thread."""
    import torch

    device = setup_torch(rec.config)
    torch.set_num_threads(1)
    addon = rec.addon
    fusion = getattr(addon, "fusion", None)
    n_history = data.n_baskets_per_user.astype(np.int64)
    user_ids, item_ids = pa.array(data.user_ids.astype(str)), pa.array(data.item_ids.astype(str))
    names = ["graphs", "forward", "search", "top_k", "rows"]
    if dense:
        names = ["graphs", "dense_forward", "search", "dense_fuse", "dense_top_k", "rows"]
    t, cpu = dict.fromkeys([*names, "write"], 0.0), dict.fromkeys([*names, "write"], 0.0)
    tables = []
    for start in range(0, data.n_users, CHUNK):
        users = np.arange(start, min(start + CHUNK, data.n_users), dtype=np.int64)
        inst = Instances(users, n_history[users])
        marks = [_now()]
        source = rec.spec.batches(data, inst, rec.config, False)
        marks.append(_now())
        if dense:
            with torch.inference_mode():
                logits = score_source(rec.model, source, data.n_items, device, SCORE_BATCH)
        else:
            scores = shared_from(rec, source, len(inst), device)
        marks.append(_now())
        found = addon.search(data, inst) if addon is not None else None
        marks.append(_now())
        if dense:
            fused = addon.fuse(logits, found) if addon is not None else logits
            marks.append(_now())
            idx = top_k(fused, k)
            vals = np.take_along_axis(fused, idx, axis=1)
        else:
            idx, vals = fusion.top_k_shared(scores, k, found) if fusion is not None else fused_top_k(scores, k)
        marks.append(_now())
        tables.append(recommendation_table(users, idx, vals, user_ids, item_ids))
        marks.append(_now())
        for name, a, b in zip(names, marks, marks[1:]):
            t[name] += b[0] - a[0]
            cpu[name] += b[1] - a[1]
    a = _now()
    write_table_stream(folder / "stages.parquet", tables, SCHEMA)
    b = _now()
    t["write"], cpu["write"] = b[0] - a[0], b[1] - a[1]
    return {n: round(v, 3) for n, v in t.items()}, {n: round(v, 3) for n, v in cpu.items()}


def shared_from(rec: NeuralRecommender, source, n: int, device) -> SharedScores:
    """NeuralRecommender._shared_scores on a built source (so graph building is its own stage)."""
    import torch

    from basketgnn.data.dataset import _offsets

    rows, items, values, base = [], [], [], None
    with torch.inference_mode():
        for idx in length_batches(source.lengths, SCORE_BATCH, None):
            batch = source.collate(idx, with_targets=False).to(device)
            b, node = rec.model.forward_sparse(batch)
            base = b.numpy() if base is None else base
            rows.append(idx[batch.node_user.numpy()])
            items.append(batch.node_item.numpy())
            values.append(node.numpy())
    row = np.concatenate(rows).astype(np.int64)
    order = np.argsort(row, kind="stable")
    return SharedScores(base, _offsets(np.bincount(row, minlength=n)), np.concatenate(items)[order],
                        np.concatenate(values)[order])  # fmt: skip


def compare_old(args: argparse.Namespace, base: dict) -> None:
    """`basketgnn recommend` with the old and this code, alternating, ``--rounds`` times."""
    exe = Path(sys.executable).with_name("basketgnn")
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for r in range(args.rounds):
            for label, path in (("old", args.compare_old), ("new", PROJECT)):
                out = Path(tmp) / f"{label}.parquet"
                cmd = [str(exe), "recommend", "--checkpoint", str(args.checkpoint), "--out", str(out), "--k", str(args.k)]
                if args.data:
                    cmd += ["--data", str(args.data)]
                env = {**os.environ, "PYTHONPATH": str(path)}
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                load = os.getloadavg()[0]
                a = time.perf_counter()
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - a
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode != 0:
                    sys.exit(f"{label}: {' '.join(cmd)} failed:\n{done.stderr}")
                said = done.stdout.strip().splitlines()[-1]
                scoring_s = float(said.rsplit("(", 1)[1].rstrip("s)"))  # "... (12.3s)": after start-up
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                record = {**base, "kind": "compare_old", "code": label, "code_path": str(path), "round": r,
                          "wall_s": round(wall, 3), "command_s": scoring_s, "cpu_s": round(cpu, 3),
                          "customers_per_s": round(base["customers"] / scoring_s), "peak_rss_mb": round(after.ru_maxrss / 1024),
                          "load_1m": round(load, 2), "load_1m_end": round(os.getloadavg()[0], 2)}  # fmt: skip
                print(record)
                if not args.no_record:
                    append_result("scoring", record)
                outs[label] = _rows(out)
            agree = _agreement(outs["old"], outs["new"])
            print(f"round {r}: old against new: {agree}")
            if not args.no_record:
                append_result("scoring", {**base, "kind": "compare_old_rows", "round": r, **agree})


def _agreement(old, new) -> dict:
    """How far two outputs agree: same shape, share of identical (customer, item, rank) rows,
    the largest score difference of those rows. The neighbour search's sums run in another
    order than the old code's, so scores may differ in the last bits and near-ties may swap."""
    if old.num_rows != new.num_rows:
        return {"same_rows": False, "old_rows": old.num_rows, "new_rows": new.num_rows}
    cols = ("customer_id", "item_id", "rank")
    same = np.ones(old.num_rows, bool)
    for c in cols:
        same &= old.column(c).to_numpy(zero_copy_only=False) == new.column(c).to_numpy(zero_copy_only=False)
    diff = np.abs(old.column("score").to_numpy() - new.column("score").to_numpy())[same]
    return {"rows": old.num_rows, "identical_row_share": round(float(same.mean()), 6),
            "max_score_diff_where_identical": float(diff.max()) if len(diff) else None}  # fmt: skip


def _rows(path: Path):
    import pyarrow.parquet as pq

    return pq.read_table(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True, help="a trained checkpoint (best.pt)")
    ap.add_argument("--data", type=Path, help="customers to score (default: the checkpoint's data)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=100_000, help="customers per part")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="scoring threads to time")
    ap.add_argument("--arms", nargs="+", default=["model", "fused"], choices=["model", "fused"])
    ap.add_argument("--warmup", type=int, default=256,
                    help="rank this many customers untimed before each measurement (0: none; rows before 2026-11-25 18:00 had none)")
    ap.add_argument("--stages", action="store_true", help="also time each stage (one thread)")
    ap.add_argument("--dense", action="store_true", help="with --stages: also the dense path's stages")
    ap.add_argument("--force-weight", type=float, help="with --save-checkpoint: the fusion weight to force")
    ap.add_argument("--save-checkpoint", type=Path, help="write --checkpoint with --force-weight and threads 0, then stop")
    ap.add_argument("--compare-old", type=Path, help="old code to time `recommend` against (a folder holding basketgnn/)")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare-old: alternations")
    ap.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    ap.add_argument("--tag", default="", help="free text recorded with the result (e.g. the commit)")
    args = ap.parse_args()

    if args.save_checkpoint is not None:
        save_forced(args.checkpoint, args.save_checkpoint, args.force_weight)
        return
    import torch

    rec, data, data_path = load(args.checkpoint, args.data)
    fusion = getattr(rec.addon, "fusion", None)
    choice = rec.checkpoint.get("forced_fusion_weight")
    base = {
        "data": str(data_path), "checkpoint": str(args.checkpoint), "customers": data.n_users, "items": data.n_items,
        "pool": None if fusion is None else fusion.scorer.vectors.n_rows,
        "fusion_weight": None if fusion is None else fusion.weight, "forced_weight": choice,
        "tifu": None if fusion is None else vars(fusion.scorer.params), "k": args.k, "tag": args.tag,
    }  # fmt: skip
    print(base)
    if args.compare_old is not None:
        compare_old(args, base)
        return
    addon = rec.addon
    for threads in args.threads:
        for arm in args.arms:
            rec.addon = addon if arm == "fused" else None
            rec.config = rec.config.model_copy(update={"threads": threads})
            torch.set_num_threads(threads)
            record = {**base, "kind": "recommend", "arm": arm, "threads": threads, "chunk": args.chunk,
                      "load_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
            if args.warmup:  # one-time costs (compiled kernels' cache, torch's first calls) first
                n_warm = min(args.warmup, data.n_users)
                rec.rank(data, Instances(np.arange(n_warm), data.n_baskets_per_user[:n_warm].astype(np.int64)), args.k)
                record["warmup"] = n_warm
            with tempfile.TemporaryDirectory() as tmp:
                a = _now()
                done = write_recommendation_parts(rec, data, args.k, Path(tmp) / "recs", chunk=args.chunk)
                b = _now()
                record.update(end_to_end_s=round(b[0] - a[0], 3), end_to_end_cpu_s=round(b[1] - a[1], 3),
                              customers_per_s=round(data.n_users / (b[0] - a[0])),
                              customers_per_cpu_s=round(data.n_users / (b[1] - a[1])), rows=done.rows)  # fmt: skip
                if args.stages and threads == 1:
                    for dense in (False, True) if args.dense else (False,):
                        stages, stages_cpu = by_stage(rec, data, args.k, Path(tmp), dense)
                        key = "dense_" if dense else ""
                        record.update({f"{key}stages_s": stages, f"{key}stages_cpu_s": stages_cpu,
                                       f"{key}stages_customers_per_s": round(data.n_users / sum(stages.values()))})  # fmt: skip
            record.update(peak_rss_mb=round(peak_rss_mb()), load_1m_end=round(os.getloadavg()[0], 2))
            print(record)
            if not args.no_record:
                append_result("scoring", record)
    rec.addon = addon


if __name__ == "__main__":
    main()
