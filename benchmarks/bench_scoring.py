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
    # A smoke run: the first 200 customers only, nothing recorded.
    python benchmarks/bench_scoring.py --checkpoint CKPT --customers 200 --no-record --compare-old OLD --rounds 1

Every customer of the checkpoint's data (or ``--data``; ``--customers N``: its first N) is scored
from their full history, as `basketgnn recommend` does, after ``--warmup`` customers ranked
untimed (one-time costs: loading the compiled kernels, torch's first calls; a nightly job pays
them once). For each thread count and each arm (``model``: the module alone; ``fused``: the
checkpoint's TIFU fusion, :class:`basketgnn.recommenders.fused.FusedRecommender`) it measures

- ``end_to_end``: :func:`basketgnn.workflow.recommendations.write_recommendation_parts` into a temporary folder,
  the code path of `recommend` (threads 2: the fusion's search in parts of 256 customers on a
  helper thread beside the one-thread forward, which then takes the parts left);
- ``stages`` (with ``--stages``): the same work one stage after another on one thread, in
  chunks of 2048 customers as `recommend` ranks them: graph building, the module's forward
  (one shared row + each customer's own items), TIFU search, candidate top-k, rows, writing.
  ``dense`` stages time the plain path as well (the [n, I] matrix: forward, fusion, top-k).

``--compare-old DIR`` (alias ``--code DIR``) runs `basketgnn recommend --checkpoint ... --out
X.parquet` as subprocesses, alternately with PYTHONPATH=DIR (old code, e.g. ``git archive COMMIT
basketgnn``) and with this checkout, ``--rounds`` times each, records wall and CPU seconds
(children's rusage), and checks that both files hold the same rows.

Each code reads one checkpoint format: this checkout ``basketgnn-checkpoint/3`` (the fusion in
the section "fusion"), older commits such as 00639e7 ``basketgnn-checkpoint/2`` (the fusion as
the state's "addon", its options in the config). A checkpoint of the other of these two formats
is rewritten into a temporary file for the code that reads it: the same weights, config, item
ids and fusion state, only laid out as that code reads them (``checkpoint_format`` in the rows).
A checkpoint whose stored ranking is the neighbour add-on has no counterpart here and stops.

One JSON line per measurement goes to benchmarks/results/scoring.jsonl (``load_1m`` beside
it). Time it under ``flock /tmp/basketgnn-timing.lock``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from basketgnn.data.split import Instances  # noqa: E402
from basketgnn.engine.batching import length_batches, score_source  # noqa: E402
from basketgnn.engine.checkpoint import CHECKPOINT_FORMAT  # noqa: E402
from basketgnn.engine.trainer import setup_torch  # noqa: E402
from basketgnn.io_utils import write_table_stream  # noqa: E402
from basketgnn.metrics import top_k  # noqa: E402
from basketgnn.recommenders.fused import FusedRecommender  # noqa: E402
from basketgnn.recommenders.neural import SCORE_BATCH, NeuralRecommender  # noqa: E402
from basketgnn.scoring.candidates import SharedScores, fused_top_k  # noqa: E402
from basketgnn.workflow.recommendations import (  # noqa: E402
    SCHEMA,
    recommendation_table,
    write_recommendation_parts,
)
from benchmarks.common import PROJECT, append_result, in_turn, peak_rss_mb  # noqa: E402

CHUNK = 2048  # customers ranked together (workflow.harness.rank_items' chunk)
#: The checkpoint layouts this script converts between (module docstring).
FORMAT_SECTIONS = "basketgnn-checkpoint/3"
FORMAT_ADDON = "basketgnn-checkpoint/2"
#: Config keys of the fusion: FusionOptions here, model config keys in FORMAT_ADDON.
FUSION_KEYS = ("fusion", "transitions", "neighbour_pool_cap")
#: Model config keys of the neighbour add-on in FORMAT_ADDON (no counterpart here).
NEIGHBOUR_KEYS = ("neighbour_weight", "neighbour_k", "neighbour_top")


def _now() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds over all its threads)."""
    return time.perf_counter(), time.process_time()


# --- checkpoints of either format -----------------------------------------------------------

def _read_raw(path: Path) -> dict[str, Any]:
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") not in (FORMAT_SECTIONS, FORMAT_ADDON):
        sys.exit(f"{path}: not a checkpoint of format {FORMAT_SECTIONS} or {FORMAT_ADDON}")
    return state


def _to_sections(state: dict[str, Any], where: Path) -> dict[str, Any]:
    """A FORMAT_ADDON state laid out as FORMAT_SECTIONS (the same weights and fusion)."""
    from basketgnn.registry import get_spec

    addon = state.get("addon")
    config = dict(state["config"])
    options = {k: config.pop(k) for k in FUSION_KEYS if k in config}
    for k in NEIGHBOUR_KEYS:
        config.pop(k, None)
    if options.get("fusion") == "neighbours" or (addon is not None and addon.get("kind") != "tifu-fusion/1"):
        sys.exit(f"{where}: ranks with the neighbour add-on, which this code does not have; "
                 "time a checkpoint with the TIFU fusion")
    missing = [k for k in get_spec(state["model"]).config_cls.model_fields if k not in config]
    if missing:  # the defaults would not be what it was trained with
        sys.exit(f"{where}: its config lacks {', '.join(missing)}; train it again with either code")
    extras = dict(state["extras"])
    choice = extras.pop("addon_choice", None)
    extras["fusion_options"] = options
    sections = {} if choice is None and addon is None else {"fusion": {"choice": choice, "state": addon}}
    core = ("model", "num_items", "state_dict", "item_ids")
    return {"format": FORMAT_SECTIONS, **{k: state[k] for k in core}, "config": config, "extras": extras,
            "sections": sections}  # fmt: skip


def _to_addon(state: dict[str, Any]) -> dict[str, Any]:
    """A FORMAT_SECTIONS state laid out as FORMAT_ADDON (the same weights and fusion)."""
    section = (state.get("sections") or {}).get("fusion") or {}
    extras = dict(state["extras"])
    options = extras.pop("fusion_options", None) or {"fusion": "tifu" if section.get("state") else "off"}
    if section.get("choice") is not None:
        extras["addon_choice"] = section["choice"]
    core = ("model", "num_items", "state_dict", "item_ids")
    return {"format": FORMAT_ADDON, **{k: state[k] for k in core}, "config": {**state["config"], **options},
            "addon": section.get("state"), "extras": extras}  # fmt: skip


def as_format(state: dict[str, Any], fmt: str, where: Path) -> dict[str, Any]:
    if state["format"] == fmt:
        return state
    if (state["format"], fmt) == (FORMAT_ADDON, FORMAT_SECTIONS):
        return _to_sections(state, where)
    if (state["format"], fmt) == (FORMAT_SECTIONS, FORMAT_ADDON):
        return _to_addon(state)
    sys.exit(f"{where}: no conversion from {state['format']} to {fmt}")


def checkpoint_for(path: Path, fmt: str, folder: Path) -> Path:
    """``path`` itself when it is of format ``fmt``, else a copy converted to it in ``folder``."""
    import torch

    state = _read_raw(path)
    if state["format"] == fmt:
        return path
    out = folder / f"{path.stem}.{fmt.rsplit('/', 1)[-1]}.pt"
    if not out.is_file():
        torch.save(as_format(state, fmt, path), out)
    return out


def code_format(code: Path) -> str:
    """The checkpoint format that the basketgnn package in folder ``code`` reads."""
    with tempfile.TemporaryDirectory() as cwd:  # not the project root: `-c` puts the cwd first
        done = subprocess.run(
            [sys.executable, "-c", "from basketgnn.engine.checkpoint import CHECKPOINT_FORMAT; print(CHECKPOINT_FORMAT)"],
            env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, text=True, cwd=cwd,
        )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"{code}: cannot read basketgnn.engine.checkpoint.CHECKPOINT_FORMAT:\n{done.stderr}")
    return done.stdout.strip()


def load(checkpoint: Path, data_path: Path | None) -> tuple[Any, Any, Path]:
    """The checkpoint's recommender (fused when it holds a fusion) and the data aligned to it."""
    from basketgnn.cli import _checkpoint_and_data

    rec, data, path = _checkpoint_and_data(checkpoint, data_path, None)
    return rec, data, path


def first_customers(data, n: int, folder: Path) -> Path:
    """The first ``n`` customers of ``data`` (aligned to the checkpoint) saved as a prepared
    dataset in ``folder``, for either code's ``--data``."""
    n = min(n, data.n_users)
    uo = data.user_offsets[: n + 1]
    bo = data.basket_offsets[: uo[-1] + 1]
    head = dataclasses.replace(
        data, items=data.items[: bo[-1]], basket_offsets=bo, user_offsets=uo, basket_times=data.basket_times[: uo[-1]],
        user_ids=data.user_ids[:n], user_part=data.user_part[:n], meta={},
    )  # fmt: skip
    head.save(folder)
    return folder


def save_forced(src: Path, dst: Path, weight: float | None) -> None:
    """``src`` (either format) in this code's format, with its fusion weight set to ``weight``
    (recorded in the extras as forced) and ``threads`` 0 (torch's default), so the scoring
    threads are the machine's, not training's."""
    from basketgnn.io_utils import atomic_path

    state = as_format(_read_raw(src), CHECKPOINT_FORMAT, src)
    state["config"]["threads"] = 0
    if weight is not None:
        fusion = (state["sections"].get("fusion") or {}).get("state")
        if not fusion or fusion.get("kind") != "tifu-fusion/1" or fusion["scorer"] is None:
            sys.exit(f"{src}: no TIFU fusion to force (its fusion section: {state['sections'].get('fusion')})")
        was = fusion["weight"]
        fusion["weight"] = weight
        state["extras"]["forced_fusion_weight"] = {"weight": weight, "validation_chose": was}
    import torch

    with atomic_path(dst) as tmp:
        torch.save(state, tmp)
    print(f"wrote {dst} (fusion weight {weight}, threads 0, format {CHECKPOINT_FORMAT})")


# --- in this process ------------------------------------------------------------------------

def by_stage(base: NeuralRecommender, fusion, data, k: int, folder: Path, dense: bool) -> tuple[dict, dict]:
    """Wall and CPU seconds of each stage, one after another on one thread (``fusion``: the
    ScoreFusion of the fused arm, None for the model alone)."""
    import torch

    device = setup_torch(base.config)
    torch.set_num_threads(1)
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
        source = base.spec.batches(data, inst, base.config, False)
        marks.append(_now())
        if dense:
            with torch.inference_mode():
                logits = score_source(base.model, source, data.n_items, device, SCORE_BATCH)
        else:
            scores = shared_from(base, source, len(inst), device)
        marks.append(_now())
        found = fusion.prepare(data, inst) if fusion is not None else None
        marks.append(_now())
        if dense:
            fused = fusion.apply(logits, data, inst, found) if fusion is not None else logits
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


def shared_from(base: NeuralRecommender, source, n: int, device) -> SharedScores:
    """NeuralRecommender.shared_scores on a built source (so graph building is its own stage)."""
    import torch

    from basketgnn.data.dataset import _offsets

    if base.spec.score_sparse is None:
        sys.exit(f"{base.name} has no shared scores: run --stages with --dense only")
    base.model.eval()
    rows, items, values, shared = [], [], [], None
    with torch.inference_mode():
        for idx in length_batches(source.lengths, SCORE_BATCH, None):
            out = base.spec.score_sparse(base.model, source.collate(idx, with_targets=False).to(device))
            if out is None:
                sys.exit("this model's configuration has no shared scores: run --stages with --dense only")
            shared = out.base.float().cpu().numpy() if shared is None else shared
            rows.append(idx[out.row.cpu().numpy()])
            items.append(out.item.cpu().numpy())
            values.append(out.value.float().cpu().numpy())
    row = np.concatenate(rows).astype(np.int64)
    order = np.argsort(row, kind="stable")
    return SharedScores(shared, _offsets(np.bincount(row, minlength=n)),
                        np.concatenate(items).astype(np.int64)[order], np.concatenate(values)[order])  # fmt: skip


# --- old against new, as subprocesses -------------------------------------------------------

def compare_old(args: argparse.Namespace, base: dict, folder: Path) -> None:
    """`basketgnn recommend` with the old and this code, alternating (the order flipped every
    round), ``--rounds`` times."""
    exe = Path(sys.executable).with_name("basketgnn")
    codes = (("old", args.compare_old.resolve()), ("new", PROJECT))
    checkpoints = {}
    for label, path in codes:
        fmt = code_format(path)
        checkpoints[label] = (checkpoint_for(args.checkpoint, fmt, folder), fmt)
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for r in range(args.rounds):
            for label, path in in_turn(codes, r):
                checkpoint, fmt = checkpoints[label]
                out = Path(tmp) / f"{label}.parquet"
                cmd = [str(exe), "recommend", "--checkpoint", str(checkpoint), "--out", str(out), "--k", str(args.k)]
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
                          "checkpoint_used": str(checkpoint), "checkpoint_format": fmt,
                          "wall_s": round(wall, 3), "command_s": scoring_s, "cpu_s": round(cpu, 3),
                          "customers_per_s": round(base["customers"] / max(scoring_s, 0.05)),
                          "peak_rss_mb": round(after.ru_maxrss / 1024),
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
    the largest score difference of those rows. The neighbour search's sums may run in another
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
    ap.add_argument("--checkpoint", type=Path, required=True,
                    help=f"a trained checkpoint (best.pt), of format {FORMAT_SECTIONS} or {FORMAT_ADDON}")
    ap.add_argument("--data", type=Path, help="customers to score (default: the checkpoint's data)")
    ap.add_argument("--customers", type=int, help="score only the first N customers of the data (a smoke run)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=100_000, help="customers per part")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="scoring threads to time")
    ap.add_argument("--arms", nargs="+", default=["model", "fused"], choices=["model", "fused"])
    ap.add_argument("--warmup", type=int, default=256,
                    help="rank this many customers untimed before each measurement (0: none; rows before 2026-11-25 18:00 had none)")
    ap.add_argument("--stages", action="store_true", help="also time each stage (one thread)")
    ap.add_argument("--dense", action="store_true", help="with --stages: also the dense path's stages")
    ap.add_argument("--force-weight", type=float, help="with --save-checkpoint: the fusion weight to force")
    ap.add_argument("--save-checkpoint", type=Path,
                    help="write --checkpoint in this code's format with --force-weight and threads 0, then stop")
    ap.add_argument("--compare-old", "--code", dest="compare_old", type=Path,
                    help="old code to time `recommend` against (a folder holding basketgnn/)")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare-old: alternations")
    ap.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    ap.add_argument("--tag", default="", help="free text recorded with the result (e.g. the commit)")
    args = ap.parse_args()

    if args.save_checkpoint is not None:
        save_forced(args.checkpoint, args.save_checkpoint, args.force_weight)
        return
    import torch

    with tempfile.TemporaryDirectory(prefix="bench-scoring-") as work:
        folder = Path(work)
        checkpoint = checkpoint_for(args.checkpoint, CHECKPOINT_FORMAT, folder)
        rec, data, data_path = load(checkpoint, args.data)
        if args.customers is not None:
            args.data = first_customers(data, args.customers, folder / "first-customers")
            rec, data, _ = load(checkpoint, args.data)
        fusion = rec.fusion if isinstance(rec, FusedRecommender) else None
        base = {
            "data": str(data_path), "checkpoint": str(args.checkpoint), "customers": data.n_users, "items": data.n_items,
            "pool": None if fusion is None else fusion.scorer.vectors.n_rows,
            "fusion_weight": None if fusion is None else fusion.weight,
            "forced_weight": rec.checkpoint.get("forced_fusion_weight"),
            "tifu": None if fusion is None else vars(fusion.scorer.params), "k": args.k, "tag": args.tag,
            **({"first_customers": args.customers} if args.customers is not None else {}),
        }  # fmt: skip
        print(base)
        if args.compare_old is not None:
            compare_old(args, base, folder)
            return
        model_alone = rec.base if isinstance(rec, FusedRecommender) else rec
        for threads in args.threads:
            for arm in args.arms:
                ranker = rec if arm == "fused" else model_alone
                ranker.with_threads(threads)
                torch.set_num_threads(threads)
                record = {**base, "kind": "recommend", "arm": arm, "threads": threads, "chunk": args.chunk,
                          "checkpoint_format": CHECKPOINT_FORMAT, "load_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
                if args.warmup:  # one-time costs (compiled kernels' cache, torch's first calls) first
                    n_warm = min(args.warmup, data.n_users)
                    ranker.rank(data, Instances(np.arange(n_warm), data.n_baskets_per_user[:n_warm].astype(np.int64)), args.k)
                    record["warmup"] = n_warm
                with tempfile.TemporaryDirectory() as tmp:
                    a = _now()
                    done = write_recommendation_parts(ranker, data, args.k, Path(tmp) / "recs", chunk=args.chunk)
                    b = _now()
                    record.update(end_to_end_s=round(b[0] - a[0], 3), end_to_end_cpu_s=round(b[1] - a[1], 3),
                                  customers_per_s=round(data.n_users / (b[0] - a[0])),
                                  customers_per_cpu_s=round(data.n_users / max(b[1] - a[1], 1e-3)), rows=done.rows)  # fmt: skip
                    if args.stages and threads == 1:
                        for dense in (False, True) if args.dense else (False,):
                            arm_fusion = fusion if arm == "fused" else None
                            stages, stages_cpu = by_stage(model_alone, arm_fusion, data, args.k, Path(tmp), dense)
                            key = "dense_" if dense else ""
                            record.update({f"{key}stages_s": stages, f"{key}stages_cpu_s": stages_cpu,
                                           f"{key}stages_customers_per_s": round(data.n_users / sum(stages.values()))})  # fmt: skip
                record.update(peak_rss_mb=round(peak_rss_mb()), load_1m_end=round(os.getloadavg()[0], 2))
                print(record)
                if not args.no_record:
                    append_result("scoring", record)


if __name__ == "__main__":
    main()
