"""Training cost on the realistic synthetic export (cleaned) against TaFeng, old code vs new.

    .venv/bin/python benchmarks/bench_realistic.py --data /tmp/clean_data TaFeng \
        [--code OLD_CHECKOUT_DIR] [--stride 3] [--variants batch_work=0 max_history=20 ...]

For every (code, dataset) a fresh worker process (``--worker``) builds the training and
validation graphs as the trainer does (the model's ``batches``), then runs one training pass
over every ``stride``-th batch of the length-sorted batches (all history lengths represented;
the engine's batching, bounded by ``batch_work`` where the code has it) with the default config,
on one torch thread. Each ``--variants`` entry (``option=value[,option=value]``) is one more
run of this checkout's code with those options changed.
It records, per trained customer: wall and CPU (user, sys) seconds of the pass, minor page
faults; and the process's peak RSS per customer of the dataset. ``--code`` is a folder holding
another version's ``basketgnn`` package (e.g. ``git archive OLD basketgnn | tar -x -C DIR``);
it is measured in the same run. Records go to benchmarks/results/realistic.jsonl.
Data: a prepared folder (``basketgnn prepare``) or a published split name (TaFeng, DC).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import PROJECT, SHARED, append_result


def worker(data_arg: str, stride: int, batch_size: int, options: dict) -> dict:
    import inspect

    import torch

    from basketgnn.data.dataset import BasketData
    from basketgnn.data.ingest import read_dnntsp_json
    from basketgnn.data.split import make_split

    try:
        from basketgnn.engine.batching import length_batches
        from basketgnn.engine.trainer import setup_torch
        from basketgnn.nn.losses import compute_loss, multi_hot
    except ImportError:  # a --code checkout of an older layout
        try:
            from basketgnn.engine.losses import compute_loss, multi_hot

            from basketgnn.engine.trainer import length_batches, setup_torch
        except ImportError:  # from before the training engine
            from basketgnn.train.losses import compute_loss, multi_hot
            from basketgnn.train.trainer import length_batches, setup_torch
    from basketgnn.graph.cooccurrence import build_user_graphs
    from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig

    r_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    path = Path(data_arg)
    data = BasketData.load(path) if path.is_dir() else read_dnntsp_json(SHARED / f"{data_arg}.json")
    split = make_split(data)
    # One thread: under a shared, overloaded CPU, OpenMP workers spin-wait for each other and
    # the spinning is counted as user time; one thread measures the work itself.
    config = DNNTSPConfig(threads=1, batch_size=batch_size, **options)
    device = setup_torch(config)
    try:
        from basketgnn.models.dnntsp import SPEC

        def build(instances):
            return SPEC.batches(data, instances, config, True)
    except ImportError:  # before the model registry
        def build(instances):
            return build_user_graphs(data, instances)
    t = time.perf_counter()
    graphs = build(split["train"])
    build_graphs_s = time.perf_counter() - t
    build(split["validate"])
    torch.manual_seed(0)
    model = DNNTSP.from_config(data.n_items, config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    model.train()
    if "sizes" in inspect.signature(length_batches).parameters:
        batches = length_batches(graphs.n_history, config.batch_size, None, graphs.sizes, config.batch_work)
    else:
        batches = length_batches(graphs.n_history, config.batch_size, None)
    batches = batches[::stride]
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()  # graphs built: RSS so far
    for idx in batches:
        batch = graphs.collate(idx).to(device)
        y = multi_hot(batch.target_items, batch.target_offsets, data.n_items)
        loss = compute_loss(config.loss, model(batch), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = int(sum(len(b) for b in batches))
    return {
        "customers": int(data.n_users),
        "train_instances": int(len(graphs)),
        "trained": n,
        "build_train_graphs_s": round(build_graphs_s, 2),
        "pass_wall_s": round(wall, 2),
        "user_s": round(r1.ru_utime - r0.ru_utime, 2),
        "sys_s": round(r1.ru_stime - r0.ru_stime, 2),
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        "ms_per_customer_wall": round(1000 * wall / n, 3),
        "ms_per_customer_cpu": round(1000 * (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n, 3),
        "peak_rss_mb": round(r1.ru_maxrss / 1024, 1),
        "peak_rss_kb_per_customer": round(r1.ru_maxrss / data.n_users, 2),
        "rss_after_imports_mb": round(r_imports / 1024, 1),
        "peak_rss_before_pass_mb": round(r0.ru_maxrss / 1024, 1),
        "peak_above_imports_kb_per_customer": round((r1.ru_maxrss - r_imports) / data.n_users, 2),
        "steps": len(batches),
        "left_out_baskets": int(getattr(graphs, "left_out_baskets", 0)),
        "options": options,
        "threads": torch.get_num_threads(),
        "batch_size": batch_size,
    }


def parse_options(text: str) -> dict:
    """``batch_work=0,max_history=20`` -> {"batch_work": 0, "max_history": 20} (ints, floats
    or strings)."""
    options: dict = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        options[key] = json.loads(value) if value.replace(".", "", 1).lstrip("-").isdigit() else value
    return options


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=[])
    ap.add_argument("--code", default=None, help="folder with another version's basketgnn package")
    ap.add_argument("--stride", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="customers per batch (default: 64)")
    ap.add_argument("--variants", nargs="*", default=[],
                    help="extra runs of this checkout: option=value[,option=value] (DNNTSP config)")
    ap.add_argument("--options", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.stride, args.batch_size, parse_options(args.options))))
        return
    if not args.data:
        ap.error("--data: name at least one prepared folder or published split")
    load = os.getloadavg()[0]
    runs = [("new", str(PROJECT), "")]
    runs += [("old", str(Path(args.code).resolve()), "")] if args.code else []
    runs += [(f"new {v}", str(PROJECT), v) for v in args.variants]
    for data in args.data:
        for name, root, options in runs:
            env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{PROJECT / 'benchmarks'}")
            out = subprocess.run(
                [sys.executable, __file__, "--worker", data, "--stride", str(args.stride),
                 "--batch-size", str(args.batch_size), "--options", options],
                env=env, capture_output=True, text=True, check=True, cwd=root,
            )  # fmt: skip
            record = {"data": data, "code": name, "code_root": root, "stride": args.stride,
                      "load_1min": round(load, 2), **json.loads(out.stdout.strip().splitlines()[-1])}  # fmt: skip
            print(json.dumps(record))
            append_result("realistic", record)


if __name__ == "__main__":
    main()
