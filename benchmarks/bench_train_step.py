"""Paired A/B of a DNNTSP training epoch in one process: the dense [B, I] loss with torch's Adam
("old"), the loss from the scores in shared form with torch's Adam ("loss"), and the shared-form
loss with the compiled Adam step ("new", the engine's default), alternating fits of 2 epochs
each, the engine's own ``train_s`` per epoch.

    flock /tmp/basketgnn-timing.lock env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train_step.py --threads 1
    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_train_step.py --threads 2

One process keeps the compiled kernels and the data warm for every variant, so the pairs differ
only in the step; the VM's speed drifts by more than the difference, which is why the variants
alternate. The epoch losses are printed beside the times (they agree to float rounding).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from common import append_result, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.engine import trainer
from basketgnn.engine.compiled_adam import CompiledAdam
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.recommenders.neural import NeuralRecommender


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="TaFeng")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    variants = {
        "old": (dataclasses.replace(SPEC, sparse_loss=None), torch.optim.Adam),
        "loss": (SPEC, torch.optim.Adam),
        "new": (SPEC, CompiledAdam),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for r in range(args.rounds):
            for name, (spec, adam) in variants.items():
                trainer.CompiledAdam = adam  # the optimiser class the engine builds
                rec = NeuralRecommender(spec, DNNTSPConfig(threads=args.threads, epochs=2, patience=2))
                rec.fit(data, split["train"], split["validate"])
                epochs = [h["train_s"] for h in rec.result.history]
                # the first fit's first epoch compiles the kernels: left out of the summary
                times[name] += epochs[1:] if r == 0 and name == "old" else epochs
                print(r, name, [round(t, 3) for t in epochs], [h["train_loss"] for h in rec.result.history], flush=True)
    finally:
        trainer.CompiledAdam = CompiledAdam
    summary = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3), "n": len(v)}
               for k, v in times.items()}  # fmt: skip
    print(summary)
    if not args.no_record:
        append_result("train_shared_loss", {"kind": "bench_train_step", "data": args.data, "threads": args.threads,
                                            "epochs_s": times, "summary": summary})  # fmt: skip


if __name__ == "__main__":
    main()
