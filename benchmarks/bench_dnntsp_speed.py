"""DNNTSP speed on a published split: one training epoch with a per-part time split, and the
time to score every test user (with and without neighbour scores).

    .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng [--epochs 3]
    .venv/bin/python benchmarks/bench_dnntsp_speed.py --data TaFeng --epochs 3 --engine

With ``--engine`` the epochs are run by the training engine itself (``basketgnn train``'s code
path: batching, loss, optimiser, validation), and its per-epoch ``train_s`` is recorded; it also
runs against a checkout from before the engine (``train.trainer``), to compare the two.

Parts: graph batching (collate), GCN, attention (incl. scatter to padded sequences),
aggregation + scorer, loss + backward + optimiser step. Forward parts are timed around the
model's own submodules; backward cannot be split per part, so it is reported as one figure.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from basketgnn.models.neighbours import NeighbourPool
from common import append_result, peak_rss_mb, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig


def timed_forward(model: DNNTSP, batch, parts: dict[str, float]) -> torch.Tensor:
    t = time.perf_counter()
    x = model.row_features(batch)
    parts["gcn"] += time.perf_counter() - t
    t = time.perf_counter()
    if model.attention is not None:
        seq = model.attention.forward_rows(x, batch.attention, len(batch.node_item), batch.max_len)
    else:
        seq = model.expand_sequences(batch, x)
    parts["attention"] += time.perf_counter() - t
    t = time.perf_counter()
    z = model.aggregate(seq, batch.node_len)
    scores = model.score_nodes(batch, z)
    parts["aggregate+scorer"] += time.perf_counter() - t
    return scores


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="TaFeng")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--engine", action="store_true", help="time the training engine's own epochs")
    args = ap.parse_args()
    if args.engine:
        engine_epochs(args)
        return
    from basketgnn.engine.batching import length_batches
    from basketgnn.engine.trainer import setup_torch
    from basketgnn.nn.losses import compute_loss, multi_hot

    config = DNNTSPConfig(threads=args.threads)
    device = setup_torch(config)
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    t = time.perf_counter()
    graphs = build_user_graphs(data, split["train"])
    build_s = time.perf_counter() - t
    torch.manual_seed(0)
    model = DNNTSP.from_config(data.n_items, config)
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
            parts["graph batching"] += time.perf_counter() - t
            scores = timed_forward(model, batch, parts)
            t = time.perf_counter()
            loss = compute_loss(config.loss, scores, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            parts["loss+backward+step"] += time.perf_counter() - t
        epoch_times.append(time.perf_counter() - t_epoch)
        all_parts.append(dict(parts))
        print(f"epoch {epoch + 1}: {epoch_times[-1]:.2f}s  " + "  ".join(f"{k} {v:.2f}s" for k, v in parts.items()))

    test = split["test"]
    from basketgnn.engine.addons import NeighbourAddOn

    from basketgnn.models.dnntsp import SPEC
    from basketgnn.recommenders.neural import NeuralRecommender

    rec = NeuralRecommender(SPEC, config)
    rec.model = model
    score_t = time.perf_counter()
    rec.score(data, test)
    score_s = time.perf_counter() - score_t
    # The same with neighbour scores in the ranking (what a model whose validation chose a
    # weight > 0 does): the neighbour search over the training customers is included.
    rec.addon = NeighbourAddOn(NeighbourPool.build(data, split["train"], k=300), 0.1)
    score_t = time.perf_counter()
    rec.score(data, test)
    score_nbr_s = time.perf_counter() - score_t
    best = int(np.argmin(epoch_times))
    record = {
        "bench": "dnntsp_speed",
        "data": args.data,
        "threads": torch.get_num_threads(),
        "train_users": len(split["train"]),
        "graph_build_s": round(build_s, 3),
        "epoch_s": [round(x, 2) for x in epoch_times],
        "best_epoch_parts_s": {k: round(v, 2) for k, v in all_parts[best].items()},
        "score_test_users": len(test),
        "score_test_s": round(score_s, 3),
        "score_test_with_neighbours_s": round(score_nbr_s, 3),
        "peak_rss_mb": round(peak_rss_mb()),
    }
    print(record)
    append_result("dnntsp_speed", record)


def engine_epochs(args: argparse.Namespace) -> None:
    """Epochs timed by the engine (its ``train_s``), neighbour choice off."""
    import subprocess

    config = DNNTSPConfig(threads=args.threads, epochs=args.epochs, patience=args.epochs,
                          neighbour_weight=0)
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    try:
        from basketgnn.registry import make_recommender

        rec = make_recommender("dnntsp", config)
        code = "engine"
    except ImportError:  # a checkout from before the engine
        from basketgnn.recommenders.dnntsp import DNNTSPRecommender

        rec = DNNTSPRecommender(config)
        code = "train.trainer"
    rec.fit(data, split["train"], split["validate"])
    history = rec.result.history
    import basketgnn

    package_dir = str(Path(basketgnn.__file__).resolve().parent)
    commit = subprocess.run(["git", "-C", package_dir, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    record = {
        "bench": "dnntsp_engine_epochs",
        "code": code,
        "commit": commit.stdout.strip() or None,
        "data": args.data,
        "threads": torch.get_num_threads(),
        "train_users": len(split["train"]),
        "epoch_train_s": [r["train_s"] for r in history],
        "epoch_validate_s": [r["validate_s"] for r in history],
        "train_loss": [r["train_loss"] for r in history],
        "peak_rss_mb": round(peak_rss_mb()),
    }
    print(record)
    append_result("dnntsp_speed", record)


if __name__ == "__main__":
    main()
