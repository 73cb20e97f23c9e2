"""Paired A/B of DNNTSP training epochs with one compiled part switched on and off, in one
process: fits of 2 epochs alternate between the two settings (the order flipped every round),
the engine's own ``train_s`` per epoch, and the epoch losses printed beside the times.

    flock /tmp/basketgnn-timing.lock env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train_switch.py \\
        --switch batch_norm --data TaFeng --rounds 4

Switches (each a class attribute ``compiled`` that the tests and benchmarks set to False to run
the tensor path): ``batch_norm`` (the GCN's BatchNorm, ReLU and dropout in
``nn.batch_norm_kernel``), ``gcn_sum`` (the factored weighted sum in ``nn.gcn_kernel``),
``attention`` (the attention and readout in ``nn.attention_train_kernel``). The first fit's
first epoch (compilation) is left out of the summary.
"""

from __future__ import annotations

import argparse
import statistics

from common import append_result, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention
from basketgnn.nn.weighted_gcn import MultiplicityBatchNorm1d, WeightedGraphConv
from basketgnn.recommenders.neural import NeuralRecommender

SWITCHES = {"batch_norm": MultiplicityBatchNorm1d, "gcn_sum": WeightedGraphConv, "attention": MaskedTemporalSelfAttention}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switch", choices=sorted(SWITCHES), required=True)
    ap.add_argument("--data", default="TaFeng")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    owner = SWITCHES[args.switch]
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    times: dict[str, list[float]] = {"compiled": [], "tensor": []}
    losses: dict[str, set[tuple[float, ...]]] = {"compiled": set(), "tensor": set()}
    try:
        for r in range(args.rounds):
            for label in ("compiled", "tensor") if r % 2 == 0 else ("tensor", "compiled"):
                owner.compiled = label == "compiled"
                rec = NeuralRecommender(SPEC, DNNTSPConfig(threads=args.threads, epochs=2, patience=2))
                rec.fit(data, split["train"], split["validate"])
                epochs = [h["train_s"] for h in rec.result.history]
                losses[label].add(tuple(h["train_loss"] for h in rec.result.history))
                times[label] += epochs[1:] if r == 0 and not times["compiled"] + times["tensor"] else epochs
                print(r, label, epochs, flush=True)
    finally:
        owner.compiled = True
    summary = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3), "n": len(v)}
               for k, v in times.items()}  # fmt: skip
    print("epoch losses", {k: sorted(v) for k, v in losses.items()})
    print(args.switch, args.data, summary)
    if not args.no_record:
        append_result("train_switch", {"switch": args.switch, "data": args.data, "threads": args.threads,
                                       "epochs_s": times, "losses": {k: sorted(v) for k, v in losses.items()},
                                       "summary": summary})  # fmt: skip


if __name__ == "__main__":
    main()
