"""Warm start and the training sample on a simulated pair of nights (issue 10 item 3).

Night 1 is a published split (DC by default) with every customer's last basket not yet bought;
night 2 is the whole split. A model is trained on night 1 from scratch, then night 2 is trained
on the same seeded sample of customers, by arm: ``scratch``; ``warm``, warm-started from night
1's best.pt; ``warm-short``, warm-started but at most ``--short-epochs`` epochs (a nightly
budget); ``yesterday``, night 1's model not trained again (warm start's epoch 0). All are
evaluated on every night-2 test customer (each customer's last basket, which
night 1 never saw), by the model's own scores (a NeuralRecommender, which only trains: no
fusion, so the model alone is compared).

    python benchmarks/bench_warm_start.py --data DC --sample 3000 --seeds 0 1 2

One JSON line per (seed, arm) in benchmarks/results/warm_start.jsonl: epochs run, best epoch,
training seconds, the warm start's items kept / new / dropped, test metrics.

    python benchmarks/bench_warm_start.py --overhead --items 50000 --customers 1000000

times what the nightly mode adds at scale, in this process: reading a DNNTSP checkpoint of
``--items`` items and mapping it onto a catalogue with 1% of the items new and 1% gone, and
drawing the sample of ``--sample`` of ``--customers`` customer ids (warm_start_overhead.jsonl).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import append_result, shared_dataset


def night_one(data):
    """The same customers and catalogue order without each customer's last basket (customers
    left with fewer than 2 baskets drop out; items bought only in last baskets are not yet in
    the catalogue)."""
    from basketgnn.data.dataset import from_sequences

    seqs, ids = [], []
    bo, uo = data.basket_offsets, data.user_offsets
    for u in range(data.n_users):
        baskets = [data.items[bo[b] : bo[b + 1]].tolist() for b in range(uo[u], uo[u + 1])]
        if len(baskets) - 1 >= 2:
            seqs.append(baskets[:-1])
            ids.append(data.user_ids[u])
    bought = np.unique(np.concatenate([np.concatenate([np.asarray(b) for b in s]) for s in seqs]))
    remap = np.full(data.n_items, -1)
    remap[bought] = np.arange(len(bought))
    night = from_sequences([[remap[np.asarray(b)].tolist() for b in s] for s in seqs], n_items=len(bought))
    return dataclasses.replace(night, item_ids=data.item_ids[bought], user_ids=np.asarray(ids))


def overhead(n_items: int, n_customers: int, sample: int) -> None:
    """Time warm start (read + map) and the customer sample at scale."""
    import torch

    from basketgnn.data.sample import sampled_customers
    from basketgnn.engine.checkpoint import save_checkpoint
    from basketgnn.engine.warm_start import apply_warm_start, read_previous
    from basketgnn.registry import get_spec

    spec = get_spec("dnntsp")
    config = spec.config_cls(threads=1)
    old_ids = np.array([f"I{i}" for i in range(n_items)])
    churn = n_items // 100
    new_ids = np.concatenate([old_ids[churn:], [f"N{i}" for i in range(churn)]])
    np.random.default_rng(0).shuffle(new_ids)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        save_checkpoint(Path(tmp) / "best.pt", "dnntsp", spec.build(n_items, config), config, old_ids, {})
        module = spec.build(len(new_ids), config)
        t0 = time.perf_counter()
        report = apply_warm_start(module, spec, config, read_previous(Path(tmp) / "best.pt", spec), new_ids)
        warm_s = time.perf_counter() - t0
    ids = np.array([f"C{i:08d}" for i in range(n_customers)])
    t0 = time.perf_counter()
    mask = sampled_customers(ids, sample, 0)
    sample_s = time.perf_counter() - t0
    record = {"items": n_items, "customers": n_customers, "sample": int(mask.sum()),
              "warm_start_s": round(warm_s, 3), "sample_s": round(sample_s, 3),
              "kept_new_dropped": [report.items_kept, report.items_new, report.items_dropped],
              "load_1min": round(os.getloadavg()[0], 2)}
    append_result("warm_start_overhead", record)
    print(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="DC")
    parser.add_argument("--sample", type=int, default=3000, help="customers trained on each night")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--patience", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--short-epochs", type=int, default=3, help="epochs of the warm-short arm")
    parser.add_argument("--arms", nargs="+", default=["scratch", "warm", "warm-short", "yesterday"])
    parser.add_argument("--overhead", action="store_true", help="time warm start and sampling at scale")
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--customers", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.overhead:
        overhead(args.items, args.customers, args.sample)
        return

    from basketgnn.data.ingest import read_dnntsp_json
    from basketgnn.data.sample import sample_split
    from basketgnn.data.split import make_split
    from basketgnn.engine.warm_start import apply_warm_start, read_previous
    from basketgnn.recommenders.neural import NeuralRecommender
    from basketgnn.registry import get_spec
    from basketgnn.workflow.harness import evaluate_model

    path = shared_dataset(args.data)
    night2 = read_dnntsp_json(path)
    night1 = night_one(night2)
    spec = get_spec("dnntsp")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            config = spec.config_cls(lr=args.lr, epochs=args.epochs, patience=args.patience, seed=seed, threads=1)
            sp1, s1 = sample_split(make_split(night1, "temporal"), night1, args.sample, seed)
            day1 = Path(tmp) / f"night1-{seed}"
            t0 = time.perf_counter()
            NeuralRecommender(spec, config, out_dir=day1).fit(night1, sp1["train"], sp1["validate"])
            print(f"seed {seed}: night 1 trained in {time.perf_counter() - t0:.0f}s ({s1.describe()})")
            sp2, s2 = sample_split(make_split(night2, "temporal"), night2, args.sample, seed)
            for arm in args.arms:
                warm = day1 / "best.pt" if arm.startswith("warm") else None
                arm_config = config.model_copy(update={"epochs": args.short_epochs}) if arm == "warm-short" else config
                rec = NeuralRecommender(spec, arm_config, out_dir=Path(tmp) / f"night2-{seed}-{arm}", warm_start=warm)
                t0 = time.perf_counter()
                if arm == "yesterday":
                    rec.model = spec.build(night2.n_items, config)
                    report = apply_warm_start(rec.model, spec, config, read_previous(day1 / "best.pt", spec),
                                              night2.item_ids)
                    rec.model.eval()
                    rec.item_ids = night2.item_ids
                else:
                    rec.fit(night2, sp2["train"], sp2["validate"])
                    report = rec.result.warm_start
                seconds = time.perf_counter() - t0
                result = rec.result
                metrics, _ = evaluate_model(rec, night2, sp2["test"], ks=(10, 20))
                record = {
                    "data": args.data, "seed": seed, "arm": arm, "sample": s2.as_dict(),
                    "night1_customers": night1.n_users, "night2_customers": night2.n_users,
                    "config": {"lr": args.lr, "epochs": args.epochs, "patience": args.patience},
                    "epochs_cap": arm_config.epochs,
                    "best_epoch": result.best_epoch if result else 0, "epochs_run": result.epochs_run if result else 0,
                    "train_s": round(seconds, 2), "load_1min": round(load, 2),
                    "warm_start": report.as_dict() if report else None,
                    "test_customers": len(sp2["test"]),
                    "metrics": {k: round(float(v), 5) for k, v in metrics.items()
                                if k in ("recall@10", "ndcg@10", "phr@10", "recall@20", "ndcg@20")},
                }
                append_result("warm_start", record)
                print(f"  {arm}: best epoch {result.best_epoch if result else 0} of "
                      f"{result.epochs_run if result else 0} ({seconds:.0f}s), test "
                      f"recall@10 {metrics['recall@10']:.4f} ndcg@10 {metrics['ndcg@10']:.4f}")


if __name__ == "__main__":
    main()
