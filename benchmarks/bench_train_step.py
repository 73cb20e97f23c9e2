"""Paired A/B of a DNNTSP training epoch in one process, variants alternating, fits of 2 epochs
each, the engine's own ``train_s`` per epoch. Variants (``--variants``, default serial and new):

- "old": the dense [B, I] loss, torch's Adam, everything on the training thread;
- "loss": the loss from the scores in shared form, torch's Adam, on the training thread;
- "serial": the shared-form loss and the compiled Adam step, on the training thread;
- "new" (the engine's default): as "serial", and on two or more threads the next batch is
  collated on a background thread and the attention kernel runs node ranges side by side.

    flock /tmp/basketgnn-timing.lock env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train_step.py --threads 1
    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_train_step.py --threads 2

One process keeps the compiled kernels and the data warm for every variant, so the pairs differ
only in the step; the VM's speed drifts by more than the difference, which is why the variants
alternate. The epoch losses are printed beside the times (they agree to float rounding).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics

import torch
from common import append_result, shared_dataset

from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import make_split
from basketgnn.engine import batching, trainer
from basketgnn.engine.compiled_adam import CompiledAdam
from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
from basketgnn.nn import attention_train_kernel
from basketgnn.recommenders.neural import NeuralRecommender

NODE_RANGES = attention_train_kernel.node_ranges
#: name: (spec, optimiser class, whether the threads beside the step are used)
VARIANTS = {
    "old": (dataclasses.replace(SPEC, sparse_loss=None), torch.optim.Adam, False),
    "loss": (SPEC, torch.optim.Adam, False),
    "serial": (SPEC, CompiledAdam, False),
    "new": (SPEC, CompiledAdam, True),
}


@contextlib.contextmanager
def variant(adam: type, side_threads: bool):
    """The engine as the variant runs it (patched module attributes, restored after)."""
    trainer.CompiledAdam = adam  # the optimiser class the engine builds
    if not side_threads:
        trainer.collated = lambda source, batches, ahead: batching.collated(source, batches, False)
        attention_train_kernel.node_ranges = lambda a_off, lengths, parts: NODE_RANGES(a_off, lengths, 1)
    try:
        yield
    finally:
        trainer.CompiledAdam, trainer.collated = CompiledAdam, batching.collated
        attention_train_kernel.node_ranges = NODE_RANGES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="TaFeng")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", nargs="+", default=["serial", "new"], choices=sorted(VARIANTS))
    ap.add_argument("--results", default="train_shared_loss", help="results file: benchmarks/results/NAME.jsonl")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    times: dict[str, list[float]] = {k: [] for k in args.variants}
    for r in range(args.rounds):
        for name in args.variants:
            spec, adam, side = VARIANTS[name]
            with variant(adam, side):
                rec = NeuralRecommender(spec, DNNTSPConfig(threads=args.threads, epochs=2, patience=2))
                rec.fit(data, split["train"], split["validate"])
            epochs = [h["train_s"] for h in rec.result.history]
            # the first fit's first epoch compiles the kernels: left out of the summary
            times[name] += epochs[1:] if r == 0 and name == args.variants[0] else epochs
            print(r, name, [round(t, 3) for t in epochs], [h["train_loss"] for h in rec.result.history], flush=True)
    summary = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3), "n": len(v)}
               for k, v in times.items()}  # fmt: skip
    print(summary)
    if not args.no_record:
        append_result(args.results, {"kind": "bench_train_step", "data": args.data, "threads": args.threads,
                                     "epochs_s": times, "summary": summary})  # fmt: skip


if __name__ == "__main__":
    main()
