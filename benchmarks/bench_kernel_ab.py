"""Paired A/B of a compiled kernel module against an old copy of it, in one process: the
module's users are pointed at the old or the new module in turn, alternating rounds, so the
pairs differ only in the kernel while the VM's speed drifts.

    git show 47f13d0:basketgnn/nn/attention_train_kernel.py > /tmp/old_attention_train_kernel.py
    flock /tmp/basketgnn-timing.lock env OMP_NUM_THREADS=1 python benchmarks/bench_kernel_ab.py \\
        --old /tmp/old_attention_train_kernel.py --kernel attention_train_kernel --train TaFeng --rounds 6
    git show 47f13d0:basketgnn/nn/attention_kernel.py > /tmp/old_attention_kernel.py
    flock /tmp/basketgnn-timing.lock env OMP_NUM_THREADS=1 python benchmarks/bench_kernel_ab.py \\
        --old /tmp/old_attention_kernel.py --kernel attention_kernel --score RUN [RUN ...] --rounds 7

``--train NAME``: DNNTSP fits of 2 epochs on a published split (default options, ``--threads``),
the engine's ``train_s`` per epoch (each module's first epoch, which compiles, left out) and
the epoch losses, which must agree between old and new (as the engine logs them, to 6
decimals). ``--score RUN``: every customer of a
trained run folder scored from the full history on one thread, as `recommend` builds its
shared scores; the largest difference between old and new scores is printed (0.0: the same
bits). The kernel is looked up under ``basketgnn.nn.temporal_attention`` (``--owner``), where
the attention reads its kernel modules. The old copy is called as the new one is, so it must
take the same arguments: an ``attention_kernel`` whose ``aggregated`` has no value width ``d_v``
cannot stand in for the scoring path's folded values.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from bench_absent_rows import largest_difference
from bench_scoring import shared_from
from common import in_turn, load_run, shared_dataset


def load_old(path: str, name: str):
    """The old copy at ``path`` as its own module (its numba cache apart from the new one's)."""
    spec = importlib.util.spec_from_file_location(f"old_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # numba's cache finds the module by name when it loads
    spec.loader.exec_module(module)
    return module


def alternating(rounds: int, variants: dict, run) -> dict[str, list[float]]:
    """``run(label, module, round)`` -> seconds, for each variant in turn, the order flipped
    every round."""
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(rounds):
        for label, module in in_turn(list(variants.items()), r):
            seconds[label] += run(label, module, r)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="a copy of the kernel module's old source")
    ap.add_argument("--kernel", required=True, help="the kernel module's name under basketgnn.nn")
    ap.add_argument("--owner", default="basketgnn.nn.temporal_attention", help="the module that uses it")
    ap.add_argument("--train", help="a published split's name (../shared/datasets): time training epochs")
    ap.add_argument("--score", nargs="*", default=[], help="trained run folders: time the scoring forward")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    if not args.train and not args.score:
        ap.error("nothing to time: give --train NAME and/or --score RUN ...")
    owner = importlib.import_module(args.owner)
    variants = {"old": load_old(args.old, args.kernel), "new": importlib.import_module(f"basketgnn.nn.{args.kernel}")}
    if args.train:
        from basketgnn.data.ingest import read_dnntsp_json
        from basketgnn.data.split import make_split
        from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
        from basketgnn.recommenders.neural import NeuralRecommender

        data = read_dnntsp_json(shared_dataset(args.train))
        split = make_split(data)
        losses: dict[str, set] = {k: set() for k in variants}

        def fit(label, module, r):
            setattr(owner, args.kernel, module)
            rec = NeuralRecommender(SPEC, DNNTSPConfig(threads=args.threads, epochs=2, patience=2))
            rec.fit(data, split["train"], split["validate"])
            epochs = [h["train_s"] for h in rec.result.history]
            losses[label].add(tuple(h["train_loss"] for h in rec.result.history))
            print(r, label, [round(t, 3) for t in epochs], flush=True)
            return epochs[1:] if r == 0 else epochs  # each module compiles in its first fit

        seconds = alternating(args.rounds, variants, fit)
        print("epoch losses", {k: sorted(v) for k, v in losses.items()}, "same:", losses["old"] == losses["new"])
        print(args.train, {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3), "n": len(v)}
                           for k, v in seconds.items()})  # fmt: skip
    torch.set_num_threads(1)
    for run_dir in args.score:
        from basketgnn.data.split import Instances

        rec, data, _ = load_run(Path(run_dir), model_only=True)
        inst = Instances(np.arange(data.n_users, dtype=np.int64), data.n_baskets_per_user.astype(np.int64))
        source = rec.spec.batches(data, inst, rec.config, False)
        scores = {}
        for label, module in variants.items():
            setattr(owner, args.kernel, module)
            scores[label] = shared_from(rec, source, len(inst), torch.device("cpu"))

        def score(label, module, r, rec=rec, source=source, n=len(inst)):
            setattr(owner, args.kernel, module)
            t = time.perf_counter()
            shared_from(rec, source, n, torch.device("cpu"))
            return [time.perf_counter() - t]

        seconds = alternating(args.rounds, variants, score)
        print(run_dir, data.n_users, "customers; largest difference", largest_difference(scores["old"], scores["new"]),
              {k: {"median_s": round(statistics.median(v), 4), "min_s": round(min(v), 4)} for k, v in seconds.items()},
              file=sys.stdout, flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
