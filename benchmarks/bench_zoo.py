"""Preview of SASRec, BERT4Rec and DIN on a published split, with a minimal loop of its own.

    nice -n 10 .venv/bin/python benchmarks/bench_zoo.py --data DC --models sasrec bert4rec din --seeds 0

Until the one training engine lands, this trains each model's ModelSpec directly: Adam, batches
of similar history length, every prefix of the training users' histories as instances, early
stopping on validation mean NDCG@{10,20} (the best epoch's weights are kept), then test metrics
@10/@20. Each run appends one JSON line to benchmarks/results/zoo.jsonl (model, config, seed,
data, test metrics, best epoch, mean epoch time). Final figures come through the engine.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
import yaml
from common import append_result, peak_rss_mb, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split, prefix_instances
from basketgnn.engine.batching import length_batches
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.models import bert4rec, din, sasrec
from basketgnn.nn.losses import compute_loss, multi_hot

SPECS = {m.SPEC.name: m.SPEC for m in (sasrec, bert4rec, din)}
KS = (10, 20)


@torch.no_grad()
def evaluate(model, source, n_items: int) -> dict[str, float]:
    model.eval()
    scores = np.zeros((len(source), n_items), dtype=np.float32)
    targets = source.collate(np.arange(len(source)), with_targets=True)
    for idx in length_batches(source.lengths, 256, None):
        scores[idx] = model(source.collate(idx, with_targets=False)).numpy()
    m = ranking_metrics(top_k(scores, max(KS)), targets.target_items.numpy(), targets.target_offsets.numpy(), n_items, ks=KS)
    m["mean_ndcg"] = float(np.mean([m[f"ndcg@{k}"] for k in KS]))
    return m


def train(spec, config, data, split, max_epochs: int) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = spec.build(data.n_items, config)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    source = spec.batches(data, prefix_instances(split["train"]), config, True)
    val = spec.batches(data, split["validate"], config, True)
    best, best_state, best_epoch, epoch_s, bad = -1.0, None, 0, [], 0
    for epoch in range(1, max_epochs + 1):
        start = time.perf_counter()
        model.train()
        for idx in length_batches(source.lengths, config.batch_size, rng):
            batch = source.collate(idx, with_targets=True)
            scores = model(batch)
            if spec.loss is not None:
                loss = spec.loss(model, batch, scores, config)
            else:
                y = multi_hot(batch.target_items, batch.target_offsets, data.n_items)
                loss = compute_loss(config.loss, scores, y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        epoch_s.append(time.perf_counter() - start)
        m = evaluate(model, val, data.n_items)
        print(f"  epoch {epoch}: {epoch_s[-1]:.1f}s loss {loss.item():.4f} val mean NDCG {m['mean_ndcg']:.4f}", flush=True)
        if m["mean_ndcg"] > best:
            best, best_state, best_epoch, bad = m["mean_ndcg"], copy.deepcopy(model.state_dict()), epoch, 0
        else:
            bad += 1
            if bad >= config.patience:
                break
    model.load_state_dict(best_state)
    return model, {"best_epoch": best_epoch, "epochs": epoch, "val_mean_ndcg": best,
                   "epoch_s": round(float(np.mean(epoch_s)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="DC", help="DC or TaFeng")
    ap.add_argument("--models", nargs="*", default=list(SPECS))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--patience", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides key=value (YAML values), every model")
    ap.add_argument("--tag", default="preview")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    overrides = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    for name in args.models:
        spec = SPECS[name]
        for seed in args.seeds:
            config = spec.config_cls(**{**overrides, "seed": seed, "patience": args.patience})
            print(f"{name} seed {seed} on {args.data}", flush=True)
            start = time.perf_counter()
            model, fit = train(spec, config, data, split, args.epochs)
            metrics = evaluate(model, spec.batches(data, split["test"], config, True), data.n_items)
            row = {"model": name, "tag": args.tag, "config": config.model_dump(), "seed": seed, "data": args.data,
                   "split": split.name, "metrics": metrics, **fit, "train_s": round(time.perf_counter() - start, 1),
                   "threads": args.threads, "peak_rss_mb": round(peak_rss_mb())}
            print(name, {k: round(v, 4) for k, v in metrics.items()}, fit, flush=True)
            append_result("zoo", row)


if __name__ == "__main__":
    main()
