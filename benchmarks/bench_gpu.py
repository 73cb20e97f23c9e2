"""DNNTSP on a GPU against the CPU of the same machine, in one run: training epochs on TaFeng
and on a real-shaped export, and `recommend`'s scoring of a checkpoint's customers, with the
rows of `cuda` compared to the rows of the CPU.

    python benchmarks/bench_gpu.py --train TaFeng=PATH.json --train realistic=DATA_DIR \\
        --score realistic=CHECKPOINT.pt,DATA_DIR --out results.jsonl [--epochs 3] [--zoo TaFeng]

Sections, each in its own try (a failure is recorded as a row with its error and the next
section runs), in this order:

- ``env``: torch, the card, the CPU cores.
- ``score``: for each ``--score NAME=CHECKPOINT,DATA``, the checkpoint loaded on each device
  (``cuda``, then the CPU at ``--cpu-threads``), ``--warmup`` customers ranked untimed, then every
  customer's top ``--k`` written by :func:`basketgnn.workflow.recommendations.write_recommendation_parts`
  (what `recommend` runs), wall seconds timed. Then the CPU's rows against cuda's: the share of
  identical (customer, item, rank) rows, the share of customers with the same set of top-k
  items, and the largest score difference among identical rows.
- ``train``: for each ``--train NAME=DATA`` and each device, a DNNTSP with the default options,
  seed 0, trained ``--epochs`` epochs by the engine (the path ``basketgnn train`` takes, with
  validation, no fusion): the engine's per-epoch ``train_s`` and ``validate_s`` and the losses.
  The first epoch holds one-time costs (kernel compilation, CUDA's start); the later ones are
  the steady figure.
- ``loss`` (``--loss NAME``, a ``--train`` data set): on ``cuda`` in float64, DNNTSP's
  training loss from the scores in shared form (what ``train`` runs) against the dense
  soft-margin loss of the [B, I] scores, and every parameter's gradient, on the first training
  batches of that data at the default options (the same dropout masks on both paths).
- ``zoo`` (``--zoo NAME``): SASRec, BERT4Rec and DIN, one epoch each on that data on ``cuda``:
  the CUDA path of the other neural models runs and its time.

The CPU figures are this machine's CPU, not the 2-core development machine's: compare devices
only within one run. DGL is not needed (the factored graph form never calls it).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch


def named(values: list[str]) -> list[tuple[str, str]]:
    """``NAME=VALUE`` arguments as pairs."""
    pairs = []
    for v in values:
        name, _, value = v.partition("=")
        if not value:
            raise SystemExit(f"expected NAME=VALUE, got {v!r}")
        pairs.append((name, value))
    return pairs


def devices(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(device, CPU threads) pairs: cuda (when present), then the CPU at each ``--cpu-threads``."""
    out = [("cuda", args.cpu_threads[0])] if torch.cuda.is_available() else []
    return out + [("cpu", t) for t in args.cpu_threads]


def env() -> dict:
    row = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(), "cpu_cores": os.cpu_count(),
           "numpy": np.__version__}  # fmt: skip
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        row.update(card=p.name, card_memory_gib=round(p.total_memory / 2**30, 1), sms=p.multi_processor_count,
                   cuda=torch.version.cuda)  # fmt: skip
    return row


def score(name: str, checkpoint: str, data_dir: str, args: argparse.Namespace, work: Path) -> list[dict]:
    """Each device's scoring time of every customer, then the rows of each CPU run against cuda's."""
    from basketgnn.cli.common import checkpoint_and_data
    from basketgnn.data.split import Instances
    from basketgnn.workflow.recommendations import write_recommendation_parts

    rows, outs = [], {}
    for device, threads in devices(args):
        torch.set_num_threads(threads)
        rec, data, _ = checkpoint_and_data(Path(checkpoint), Path(data_dir), device)
        rec.with_threads(threads)
        n_warm = min(args.warmup, data.n_users)
        rec.rank(data, Instances(np.arange(n_warm), data.n_baskets_per_user[:n_warm].astype(np.int64)), args.k)
        out = work / f"score-{name}-{device}-{threads}"
        for rep in range(args.score_rounds):
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            done = write_recommendation_parts(rec, data, args.k, out / f"r{rep}", chunk=100_000)
            wall = time.perf_counter() - t
            rows.append({"section": "score", "data": name, "device": device, "threads": threads, "round": rep,
                         "customers": int(data.n_users), "rows": int(done.rows), "wall_s": round(wall, 3),
                         "customers_per_s": round(data.n_users / wall)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        outs[(device, threads)] = out / "r0"
    if ("cuda", args.cpu_threads[0]) in outs:
        for (device, threads), folder in outs.items():
            if device == "cpu":
                rows.append({"section": "score_rows", "data": name, "pair": f"cuda-cpu{threads}",
                             **agreement(outs[("cuda", args.cpu_threads[0])], folder)})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    return rows


def agreement(a: Path, b: Path) -> dict:
    """How far two outputs agree: the share of identical (customer, item, rank) rows, of
    customers whose top-k item sets are equal, and the largest score difference among the
    identical rows (rank swaps between near-equal scores are what float rounding can move)."""
    import pyarrow.dataset as ds

    def table(folder: Path):
        t = ds.dataset(folder, format="parquet").to_table()
        return t.sort_by([("customer_id", "ascending"), ("rank", "ascending")])

    x, y = table(a), table(b)
    if x.num_rows != y.num_rows:
        return {"same_row_count": False, "rows_a": x.num_rows, "rows_b": y.num_rows}
    col = {c: (x.column(c).to_numpy(zero_copy_only=False), y.column(c).to_numpy(zero_copy_only=False))
           for c in ("customer_id", "item_id", "rank", "score")}  # fmt: skip
    same = np.ones(x.num_rows, bool)
    for c in ("customer_id", "item_id", "rank"):
        same &= col[c][0] == col[c][1]
    diff = np.abs(col["score"][0].astype(np.float64) - col["score"][1].astype(np.float64))
    # Same item set per customer: sort the items within each customer's rows.
    cust = col["customer_id"][0]
    order_a = np.lexsort((col["item_id"][0], cust))
    order_b = np.lexsort((col["item_id"][1], col["customer_id"][1]))
    same_item = col["item_id"][0][order_a] == col["item_id"][1][order_b]
    _, first = np.unique(cust[order_a], return_index=True)
    per_customer = np.logical_and.reduceat(same_item, first)
    return {"rows": x.num_rows, "identical_row_share": round(float(same.mean()), 6),
            "same_topk_set_share": round(float(per_customer.mean()), 6),
            "max_score_diff_where_identical": float(diff[same].max()) if same.any() else None,
            "max_score": float(np.abs(col["score"][0]).max())}  # fmt: skip


def train(name: str, data_path: str, args: argparse.Namespace) -> list[dict]:
    """DNNTSP's default options, seed 0, ``--epochs`` epochs on each device by the engine."""
    from basketgnn.data.ingest import load_data
    from basketgnn.data.split import make_split
    from basketgnn.models.dnntsp import DNNTSPConfig
    from basketgnn.recommenders.neural import NeuralRecommender
    from basketgnn.registry import get_spec

    data = load_data(Path(data_path))
    split = make_split(data)
    rows = []
    for device, threads in devices(args):
        torch.set_num_threads(threads)
        config = DNNTSPConfig(device=device, threads=threads, epochs=args.epochs, patience=args.epochs, seed=0)
        rec = NeuralRecommender(get_spec("dnntsp"), config)
        t = time.perf_counter()
        rec.fit(data, split["train"], split["validate"])
        history = rec.result.history
        rows.append({"section": "train", "model": "dnntsp", "data": name, "device": device, "threads": threads,
                     "train_users": len(split["train"]), "wall_s": round(time.perf_counter() - t, 2),
                     "epoch_train_s": [round(r["train_s"], 3) for r in history],
                     "epoch_validate_s": [round(r["validate_s"], 3) for r in history],
                     "train_loss": [round(r["train_loss"], 6) for r in history],
                     "val_recall@10": [round(r.get("val_recall@10", float("nan")), 4) for r in history]})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def loss(name: str, data_path: str, args: argparse.Namespace) -> list[dict]:
    """The shared-form loss and gradients against the dense ones on ``--loss-batches`` batches
    of 64 training instances, float64, on the first device (cuda where present)."""
    from basketgnn.data.ingest import load_data
    from basketgnn.data.split import make_split
    from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
    from basketgnn.nn.losses import compute_loss, multi_hot

    data = load_data(Path(data_path))
    split = make_split(data)
    device = devices(args)[0][0]
    config = DNNTSPConfig(device=device, seed=0)
    torch.manual_seed(0)
    module = SPEC.build(data.n_items, config)
    if SPEC.init is not None:
        SPEC.init(module, data, split["train"], config)
    module.double().to(device).train()
    source = SPEC.batches(data, split["train"], config, True)
    sparse_loss = SPEC.sparse_loss(config)

    def loss_and_grads(batch, sparse: bool):
        module.zero_grad()
        torch.manual_seed(1)  # the same dropout masks on both paths
        if sparse:
            value = sparse_loss(module, batch, module(batch, sparse=True), config)
        else:
            y = multi_hot(batch.target_items, batch.target_offsets, data.n_items).double().to(device)
            value = compute_loss(config.loss, module(batch), y)
        value.backward()
        return value.item(), {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}

    rows = []
    order = np.random.default_rng(0).permutation(len(split["train"]))
    for b in range(args.loss_batches):
        batch = source.collate(order[64 * b: 64 * (b + 1)]).to(device)
        loss_s, grads_s = loss_and_grads(batch, True)
        loss_d, grads_d = loss_and_grads(batch, False)
        # BatchNorm cancels the GCN's linear bias: its gradient is 0 up to rounding (~1e-21), so
        # each parameter is compared as the tests do, |shared - dense| <= 1e-9 |dense| + 1e-15.
        close = all(torch.allclose(grads_s[n], g, rtol=1e-9, atol=1e-15) for n, g in grads_d.items())
        worst = max((g - grads_s[n]).abs().max().item() for n, g in grads_d.items())
        rows.append({"section": "loss", "data": name, "device": device, "batch": b, "loss_shared": loss_s,
                     "loss_dense": loss_d, "loss_rel_diff": abs(loss_s - loss_d) / abs(loss_d),
                     "same_parameters": grads_s.keys() == grads_d.keys(), "parameters": len(grads_d),
                     "grads_allclose": close, "max_grad_abs_diff": worst})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def zoo(name: str, data_path: str, args: argparse.Namespace) -> list[dict]:
    """SASRec, BERT4Rec and DIN: one epoch each on cuda (the CPU where there is none), their
    defaults, seed 0."""
    from basketgnn.data.ingest import load_data
    from basketgnn.data.split import make_split
    from basketgnn.recommenders.neural import NeuralRecommender
    from basketgnn.registry import get_spec

    data = load_data(Path(data_path))
    split = make_split(data)
    device, threads = devices(args)[0]
    torch.set_num_threads(threads)
    rows = []
    for model in ("sasrec", "bert4rec", "din"):
        try:
            spec = get_spec(model)
            config = spec.config_cls(device=device, threads=threads, epochs=1, patience=1, seed=0)
            rec = NeuralRecommender(spec, config)
            t = time.perf_counter()
            rec.fit(data, split["train"], split["validate"])
            h = rec.result.history
            rows.append({"section": "zoo", "model": model, "data": name, "device": device,
                         "wall_s": round(time.perf_counter() - t, 2), "epoch_train_s": [round(r["train_s"], 3) for r in h],
                         "epoch_validate_s": [round(r["validate_s"], 3) for r in h],
                         "train_loss": [round(r["train_loss"], 6) for r in h]})  # fmt: skip
        except Exception as e:  # noqa: BLE001 - recorded, the next model runs
            rows.append({"section": "zoo", "model": model, "data": name, "error": repr(e),
                         "traceback": traceback.format_exc()[-2000:]})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="append", default=[], help="NAME=DATA (a prepared folder or DNNTSP JSON)")
    ap.add_argument("--score", action="append", default=[], help="NAME=CHECKPOINT,DATA")
    ap.add_argument("--zoo", default="", help="NAME of a --train data set: SASRec, BERT4Rec, DIN on cuda")
    ap.add_argument("--loss", default="", help="NAME of a --train data set: the shared-form loss against the dense one")
    ap.add_argument("--loss-batches", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cpu-threads", type=int, nargs="+", default=[2, os.cpu_count() or 1],
                    help="CPU thread counts to time (the first is also cuda's host threads)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=256)
    ap.add_argument("--score-rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, one per measurement")
    args = ap.parse_args()
    args.cpu_threads = list(dict.fromkeys(args.cpu_threads))
    trains = dict(named(args.train))
    sections = [("env", env)]
    for name, value in named(args.score):
        checkpoint, _, data_dir = value.partition(",")
        sections.append((f"score {name}", lambda n=name, c=checkpoint, d=data_dir: score(n, c, d, args, work)))
    for name, data_path in trains.items():
        sections.append((f"train {name}", lambda n=name, d=data_path: train(n, d, args)))
    if args.loss:
        sections.append((f"loss {args.loss}", lambda: loss(args.loss, trains[args.loss], args)))
    if args.zoo:
        sections.append((f"zoo {args.zoo}", lambda: zoo(args.zoo, trains[args.zoo], args)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        work = Path(tmp)
        for label, run in sections:
            t = time.perf_counter()
            try:
                got = run()
                rows = got if isinstance(got, list) else [{"section": label, **got}]
            except Exception as e:  # noqa: BLE001 - recorded, the next section runs
                rows = [{"section": label, "error": repr(e), "traceback": traceback.format_exc()[-3000:]}]
                print(rows[0]["traceback"], flush=True)
            with open(args.out, "a") as f:
                for row in rows:
                    f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **row}) + "\n")
            print(f"== {label}: {time.perf_counter() - t:.1f}s", flush=True)


if __name__ == "__main__":
    main()
