"""Scoring throughput of `recommend`: customers per second, end to end and by stage.

    python benchmarks/bench_scoring.py --data TaFeng                      # published split
    python benchmarks/bench_scoring.py --synth 100000 --items 2000        # a larger synthetic log

Every customer of the data is scored from their full history, as `basketgnn recommend` does.
The model is the default DNNTSP configuration, untrained: scoring cost does not depend on the
weights, and this keeps the script to seconds of setup. It runs twice: the model alone, and with
the engine's neighbour add-on (``fusion: neighbours``, :class:`basketgnn.engine.addons.NeighbourAddOn`:
the pool of the split's training customers, k = 300, the larger of the validation choices,
weight 0.1: what such a model does when validation picks a weight > 0). The engine's default
add-on is now the TIFU-KNN fusion (``fusion: tifu``); this script does not time that one.

For each it measures
- ``end_to_end``: :func:`basketgnn.recommend.write_recommendation_parts` into a temporary
  folder: the real code path (the neighbour search runs beside the model in a thread);
- ``stages``: the same work done one stage at a time on the same batches, so each stage has its
  own time: graph building, model forward, neighbour search, fusion, top-k, writing the rows.

One JSON line per (data, fusion) goes to benchmarks/results/scoring.jsonl. Time it under
``flock /tmp/basketgnn-timing.lock`` and note the machine's load (recorded as ``load_1m``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from basketgnn.data.dataset import BasketData  # noqa: E402
from basketgnn.data.split import Instances, make_split  # noqa: E402
from basketgnn.engine.addons import AddOnChoice, NeighbourAddOn  # noqa: E402
from basketgnn.engine.checkpoint import save_checkpoint  # noqa: E402
from basketgnn.engine.recommender import NeuralRecommender  # noqa: E402
from basketgnn.engine.trainer import score_source, setup_torch  # noqa: E402
from basketgnn.graph.cooccurrence import build_user_graphs  # noqa: E402
from basketgnn.io_utils import write_table_stream  # noqa: E402
from basketgnn.metrics import top_k  # noqa: E402
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig  # noqa: E402
from basketgnn.models.neighbours import NeighbourPool  # noqa: E402
from basketgnn.recommend import SCHEMA, recommendation_table, write_recommendation_parts  # noqa: E402
from benchmarks.common import append_result, peak_rss_mb, shared_dataset  # noqa: E402

BATCH = 2048  # customers scored together (evaluate.rank_items' chunk)


def load(args: argparse.Namespace) -> tuple[str, BasketData]:
    if args.synth:
        from basketgnn.data.ingest import prepare_log
        from basketgnn.data.synth import generate_log, write_log

        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "log.parquet"
            write_log(generate_log(n_customers=args.synth, n_items=args.items, mean_baskets=8, seed=0), log)
            return f"synth-{args.synth}x{args.items}", prepare_log(log)
    from basketgnn.data.ingest import read_dnntsp_json

    return args.data, read_dnntsp_json(shared_dataset(args.data))


def by_stage(
    rec: NeuralRecommender, data: BasketData, k: int, folder: Path
) -> tuple[dict[str, float], dict[str, float]]:
    """Wall and CPU seconds of each stage, one after another, over every customer in batches of
    BATCH. CPU seconds are less sensitive to other processes' load on a shared machine."""
    model = rec.model
    assert model is not None
    device = setup_torch(rec.config)
    addon = rec.addon  # NeighbourAddOn (fusion on) or None
    n_history = data.n_baskets_per_user.astype(np.int64)
    user_ids, item_ids = pa.array(data.user_ids.astype(str)), pa.array(data.item_ids.astype(str))
    names = ("graphs", "forward", "neighbour_search", "fuse", "top_k", "rows", "write")
    t, cpu = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    tables = []
    for start in range(0, data.n_users, BATCH):
        users = np.arange(start, min(start + BATCH, data.n_users), dtype=np.int64)
        inst = Instances(users, n_history[users])
        marks = [_now()]
        graphs = build_user_graphs(data, inst, with_targets=False)
        marks.append(_now())
        scores = score_source(model, graphs, data.n_items, device)
        marks.append(_now())
        nbrs = addon.search(data, inst) if addon is not None else None
        marks.append(_now())
        if addon is not None:
            scores = addon.fuse(scores, nbrs)
        marks.append(_now())
        idx = top_k(scores, k)
        vals = np.take_along_axis(scores, idx, axis=1)
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
    return {name: round(v, 3) for name, v in t.items()}, {name: round(v, 3) for name, v in cpu.items()}


def _top_functions(profiler: cProfile.Profile, n: int) -> dict[str, float]:
    """Own (exclusive) seconds of the n functions with the most, in the profiled thread."""
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:n]
    return {f"{Path(f).name}:{line}({name})": round(v[2], 3) for (f, line, name), v in top}


def _now() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds over all its threads)."""
    return time.perf_counter(), time.process_time()


def save(model: DNNTSP, pool: NeighbourPool, config: DNNTSPConfig, data: BasketData, path: Path) -> None:
    """The benchmark's fused model as a checkpoint whose data (a prepared folder) lies beside it."""
    folder = path.with_suffix(".data")
    data.save(folder)
    choice = AddOnChoice("neighbours", 0.1, pool.k)
    save_checkpoint(path, SPEC.name, model, config, data.item_ids,
                    {"addon_choice": choice.as_dict(), "data": str(folder.resolve())},
                    addon=NeighbourAddOn(pool, 0.1))  # fmt: skip
    print(f"wrote {path} (data: {folder})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="TaFeng", help="a published split (TaFeng, DC)")
    ap.add_argument("--synth", type=int, default=0, help="customers of a synthetic log instead")
    ap.add_argument("--items", type=int, default=2000, help="catalogue of the synthetic log")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=100_000, help="customers per part")
    ap.add_argument("--fusion", choices=["both", "on", "off"], default="both")
    ap.add_argument("--no-stages", action="store_true", help="only the end-to-end run")
    ap.add_argument("--profile", action="store_true",
                    help="also profile the end-to-end run (cProfile): the 15 functions with the most own time")
    ap.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    ap.add_argument("--tag", default="", help="free text recorded with the result (e.g. the commit)")
    ap.add_argument("--save-checkpoint", type=Path, help="only write the fused model's checkpoint "
                    "(and its data, beside it) for timing `basketgnn recommend` itself, then stop")
    args = ap.parse_args()

    t0 = time.perf_counter()
    name, data = load(args)
    split = make_split(data, "auto")
    setup_s = time.perf_counter() - t0
    # The neighbour add-on (not the default TIFU fusion): this benchmark's fused arm is the
    # neighbour score, k = 300, weight 0.1 (module docstring).
    config = DNNTSPConfig(threads=args.threads, fusion="neighbours", neighbour_weight=0.1, neighbour_k=300)
    setup_torch(config)
    model = DNNTSP.from_config(data.n_items, config)
    t0 = time.perf_counter()
    pool = NeighbourPool.build(data, split["train"], k=300, top=config.neighbour_top)
    pool_s = time.perf_counter() - t0
    print(f"{name}: {data.n_users:,} customers, {data.n_items:,} items, pool {pool.vectors.n_rows:,} "
          f"(setup {setup_s:.1f}s, pool {pool_s:.1f}s)")  # fmt: skip
    if args.save_checkpoint is not None:
        save(model, pool, config, data, args.save_checkpoint)
        return
    for fusion in ("off", "on") if args.fusion == "both" else (args.fusion,):
        rec = NeuralRecommender(SPEC, config)
        rec.model, rec.item_ids = model, data.item_ids
        rec.addon = NeighbourAddOn(pool, 0.1) if fusion == "on" else None
        record = {
            "data": name, "customers": data.n_users, "items": data.n_items, "pool": pool.vectors.n_rows,
            "fusion": fusion, "k": args.k, "chunk": args.chunk, "threads": args.threads,
            "torch_threads": torch.get_num_threads(),
            "load_1m": round(os.getloadavg()[0], 2), "tag": args.tag,
        }  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            profiler = cProfile.Profile() if args.profile else None
            a = _now()
            if profiler is not None:
                profiler.enable()
            done = write_recommendation_parts(rec, data, args.k, Path(tmp) / "recs", chunk=args.chunk)
            if profiler is not None:
                profiler.disable()
            b = _now()
            if profiler is not None:
                record["profile_own_s"] = _top_functions(profiler, 15)
            record.update(end_to_end_s=round(b[0] - a[0], 3), end_to_end_cpu_s=round(b[1] - a[1], 3),
                          customers_per_s=round(data.n_users / (b[0] - a[0])),
                          customers_per_cpu_s=round(data.n_users / (b[1] - a[1])), rows=done.rows)  # fmt: skip
            if not args.no_stages:
                stages, stages_cpu = by_stage(rec, data, args.k, Path(tmp))
                record.update(stages_s=stages, stages_cpu_s=stages_cpu,
                              stages_customers_per_s=round(data.n_users / sum(stages.values())))  # fmt: skip
        record.update(peak_rss_mb=round(peak_rss_mb()), load_1m_end=round(os.getloadavg()[0], 2))
        print(record)
        if not args.no_record:
            append_result("scoring", record)


if __name__ == "__main__":
    main()
