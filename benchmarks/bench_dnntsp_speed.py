"""DNNTSP speed on a published split: one training epoch with a per-part time split, and the
time to score every test user by the model alone.

    .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng [--epochs 3]
    .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng --epochs 3 --engine
    # another checkout's package instead of this one (old against new: run both, alternating)
    PYTHONPATH=OLD_CHECKOUT .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng --epochs 3 --engine
    # the tensor path instead of the compiled training kernels; rows to another results file
    .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng --engine --tensor-path --results NAME --label L

With ``--engine`` the epochs are run by the training engine itself (``basketgnn train``'s code
path: batching, loss, optimiser, validation; no fusion), and its per-epoch ``train_s`` is
recorded. The package is the one ``import basketgnn`` finds (PYTHONPATH first); older layouts
(the engine before the core redesign, e.g. 00639e7, and ``train.trainer`` before the engine)
are imported by fallbacks, and the row records the package's commit.
The scoring time with the neighbour add-on in the ranking is no longer measured (the add-on is gone).

Parts: graph batching (collate), GCN, attention + readout (``forward_nodes``), scorer, loss +
backward + optimiser step. The per-part loop takes the loss on the dense [B, I] scores and
steps torch's Adam (the reference form of a step); ``--engine`` times what ``basketgnn train``
runs (the shared-form loss and the compiled Adam step on the CPU). Forward parts are timed around the
model's own submodules; backward cannot be split per part, so it is reported as one figure.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from common import append_result, peak_rss_mb, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig


def no_sync() -> None:
    """The CPU's operations finish before they return: nothing to wait for."""


def timed_forward(model: DNNTSP, batch, parts: dict[str, float], sync=no_sync) -> torch.Tensor:
    """The model's forward, timed per part. With attention and a learned or last readout (the
    default), the "attention+readout" part is ``forward_nodes`` (the path training takes: the
    compiled kernels on the CPU unless switched off); else attention over the sequences, then
    the aggregation. ``sync`` waits for the device's queued work before each clock reading."""
    t = time.perf_counter()
    x = model.row_features(batch)
    sync()
    parts["gcn"] += time.perf_counter() - t
    t = time.perf_counter()
    if model.attention is not None and model.aggregate.mode in ("learned", "last"):
        z = model.attention.forward_nodes(x, batch, model.aggregate.w_agg)
        sync()
        parts["attention+readout"] += time.perf_counter() - t
        t = time.perf_counter()
    else:
        if model.attention is not None:
            seq = model.attention.forward_rows(x, batch.attention, len(batch.node_item), batch.max_len)
        else:
            seq = model.expand_sequences(batch, x)
        parts["attention"] += time.perf_counter() - t
        t = time.perf_counter()
        z = model.aggregate(seq, batch.node_len)
    scores = model.score_nodes(batch, z)
    sync()
    parts["scorer"] += time.perf_counter() - t
    return scores


def use_tensor_path() -> None:
    """Switch the compiled kernels off in every attention and graph convolution (their class
    attribute ``compiled``): training and scoring run the tensor path."""
    from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention
    from basketgnn.nn.weighted_gcn import WeightedGraphConv

    MaskedTemporalSelfAttention.compiled = False
    WeightedGraphConv.compiled = False


def dataset_path(name: str) -> Path:
    """A published split by name (``../shared``), or a DNNTSP JSON file given by its path."""
    return Path(name) if Path(name).is_file() else shared_dataset(name)


def first(instances, n: int):
    """The first ``n`` instances (all when ``n`` is 0)."""
    from basketgnn.data.split import Instances

    return instances if not n else Instances(instances.users[:n], instances.n_history[:n])


def record_row(args: argparse.Namespace, record: dict) -> None:
    if args.users:
        record["users_cap"] = args.users
    print(record)
    if args.label:
        record["label"] = args.label
    if not args.no_record:
        append_result(args.results, record)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="TaFeng", help="a published split's name, or a DNNTSP JSON file's path")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="torch device (parts timed with the device synchronised)")
    ap.add_argument("--batch-size", type=int, default=0, help="users per batch (0: the model's default)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--engine", action="store_true", help="time the training engine's own epochs")
    ap.add_argument("--users", type=int, default=0,
                    help="only the first N users of each part (0: all; a smoke run of the script, not a timing)")
    ap.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    ap.add_argument("--results", default="dnntsp_speed", help="results file: benchmarks/results/NAME.jsonl")
    ap.add_argument("--label", default="", help="a label for the row (e.g. old / new)")
    ap.add_argument("--tensor-path", action="store_true",
                    help="train through the tensor path (the compiled training kernels switched off)")
    args = ap.parse_args()
    if args.tensor_path:
        use_tensor_path()
    if args.engine:
        engine_epochs(args)
        return
    try:
        from basketgnn.engine.batching import length_batches
        from basketgnn.engine.trainer import setup_torch
        from basketgnn.nn.losses import compute_loss, multi_hot
    except ImportError:  # a checkout of the older engine layout
        from basketgnn.engine.losses import compute_loss, multi_hot

        from basketgnn.engine.trainer import length_batches, setup_torch

    sizes = {"batch_size": args.batch_size} if args.batch_size else {}
    config = DNNTSPConfig(threads=args.threads, device=args.device, **sizes)
    device = setup_torch(config)
    sync = torch.cuda.synchronize if device.type == "cuda" else no_sync
    data = read_dnntsp_json(dataset_path(args.data))
    split = make_split(data)
    train = first(split["train"], args.users)
    t = time.perf_counter()
    graphs = build_user_graphs(data, train)
    build_s = time.perf_counter() - t
    torch.manual_seed(0)
    model = DNNTSP.from_config(data.n_items, config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)

    epoch_times, all_parts = [], []
    for epoch in range(args.epochs):
        parts: dict[str, float] = defaultdict(float)
        model.train()
        t_epoch = time.perf_counter()
        for idx in length_batches(graphs.n_history, config.batch_size, np.random.default_rng(epoch)):
            t = time.perf_counter()
            batch = graphs.collate(idx).to(device)
            y = multi_hot(batch.target_items, batch.target_offsets, data.n_items)
            sync()
            parts["graph batching"] += time.perf_counter() - t
            scores = timed_forward(model, batch, parts, sync)
            t = time.perf_counter()
            loss = compute_loss(config.loss, scores, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sync()
            parts["loss+backward+step"] += time.perf_counter() - t
        epoch_times.append(time.perf_counter() - t_epoch)
        all_parts.append(dict(parts))
        print(f"epoch {epoch + 1}: {epoch_times[-1]:.2f}s  " + "  ".join(f"{k} {v:.2f}s" for k, v in parts.items()))

    test = first(split["test"], args.users)
    from basketgnn.models.dnntsp import SPEC

    try:
        from basketgnn.recommenders.neural import NeuralRecommender
    except ImportError:  # a checkout of the older engine layout
        from basketgnn.engine.recommender import NeuralRecommender

    rec = NeuralRecommender(SPEC, config)
    rec.model = model
    score_t = time.perf_counter()
    rec.score(data, test)
    score_s = time.perf_counter() - score_t
    best = int(np.argmin(epoch_times))
    record = {
        "bench": "dnntsp_speed",
        "data": args.data,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "batch_size": config.batch_size,
        "train_users": len(train),
        "graph_build_s": round(build_s, 3),
        "epoch_s": [round(x, 2) for x in epoch_times],
        "best_epoch_parts_s": {k: round(v, 2) for k, v in all_parts[best].items()},
        "score_test_users": len(test),
        "score_test_s": round(score_s, 3),
        "peak_rss_mb": round(peak_rss_mb()),
    }
    record_row(args, record)


def engine_epochs(args: argparse.Namespace) -> None:
    """Epochs timed by the engine (its ``train_s``); training only, no fusion step."""
    import subprocess

    options = {"threads": args.threads, "epochs": args.epochs, "patience": args.epochs, "device": args.device}
    data = read_dnntsp_json(dataset_path(args.data))
    split = make_split(data)
    try:
        from basketgnn.recommenders.neural import NeuralRecommender
        from basketgnn.registry import get_spec

        rec = NeuralRecommender(get_spec("dnntsp"), DNNTSPConfig(**options))  # fit trains only
        code = "engine"
    except ImportError:  # older checkouts: the ranking add-on switched off by neighbour_weight 0
        try:
            from basketgnn.registry import make_recommender

            rec = make_recommender("dnntsp", DNNTSPConfig(**options, neighbour_weight=0))
            code = "engine"
        except ImportError:  # from before the engine
            from basketgnn.recommenders.dnntsp import DNNTSPRecommender

            rec = DNNTSPRecommender(DNNTSPConfig(**options, neighbour_weight=0))
            code = "train.trainer"
    train = first(split["train"], args.users)
    rec.fit(data, train, first(split["validate"], args.users))
    history = rec.result.history
    import basketgnn

    package_dir = str(Path(basketgnn.__file__).resolve().parent)
    commit = subprocess.run(["git", "-C", package_dir, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    record = {
        "bench": "dnntsp_engine_epochs",
        "code": code,
        "commit": commit.stdout.strip() or None,
        "package": package_dir,
        "data": args.data,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "train_users": len(train),
        "tensor_path": args.tensor_path,
        "epoch_train_s": [r["train_s"] for r in history],
        "epoch_validate_s": [r["validate_s"] for r in history],
        "train_loss": [r["train_loss"] for r in history],
        "peak_rss_mb": round(peak_rss_mb()),
    }
    record_row(args, record)


if __name__ == "__main__":
    main()
