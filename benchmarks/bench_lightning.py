"""PyTorch Lightning's Trainer against basketgnn's plain training loop on DNNTSP (issue 9, item 1:
"Prefer Lightning's Trainer if it keeps DNNTSP's epoch time within 5% and resume exact").

    # the timed runs (under the shared machine's timing lock), then the resume checks (untimed)
    PYTHONPATH=$PWD:/tmp/lightning-site flock /tmp/basketgnn-timing.lock .venv/bin/python \
        benchmarks/bench_lightning.py --data TaFeng --epochs 3 --pairs 3 --threads 1 --part timing
    PYTHONPATH=$PWD:/tmp/lightning-site nice -n 10 .venv/bin/python \
        benchmarks/bench_lightning.py --data TaFeng --epochs 4 --threads 1 --part resume
    # Lightning's own cost per batch, with a one-layer model (under the timing lock)
    PYTHONPATH=$PWD:/tmp/lightning-site flock /tmp/basketgnn-timing.lock .venv/bin/python \
        benchmarks/bench_lightning.py --part overhead --threads 1

Lightning is not a dependency of basketgnn; install it beside the venv, e.g.
``pip install --no-deps --target /tmp/lightning-site "lightning==2.2.*" lightning-utilities
"torchmetrics==1.3.*"``, and put that folder on PYTHONPATH.

Arms, same data, default DNNTSPConfig (training only: the fusion with TIFU-KNN acts after
training and is in neither arm), same seed:

plain      the training engine itself, today's loop: ``engine.trainer.train_model`` with
           ``registry.get_spec("dnntsp")`` (what ``basketgnn train`` runs). Its per-epoch
           ``train_s`` covers the training batches and the scheduler step, not validation.
lightning  DNNTSP in a LightningModule fitted by ``lightning.Trainer`` on CPU, no logger, no
           checkpointing, no progress bar, no validation. The batches are the plain loop's
           (``length_batches`` with the rng (seed, epoch)), fed by a DataLoader over those
           precomputed index arrays; dropout is reseeded per epoch as in the plain loop. An
           epoch's time runs from one ``on_train_epoch_start`` to the next (to ``on_train_end``
           for the last), so all of Lightning's per-epoch bookkeeping is counted.

The arms alternate plain/lightning ``--pairs`` times in one process; epoch 1 of each run is
warm-up and not counted. Each epoch's wall time and this process's CPU time are recorded; on a
shared, loaded CPU wall times swing by 20% or more, so the CPU-time overhead decides (with
``--threads 1`` no CPU time is spent spinning in OpenMP waits). Exactness (bitwise, after ``--epochs`` epochs): weights and buffers,
Adam's state, the scheduler's state, per-epoch losses; between the arms, between repeats of the
same arm, and for resume: (a) the plain loop resumed from its resume.pt written after epoch 2,
(b) Lightning resumed from the ModelCheckpoint file written after epoch 2 of a run that saves
every epoch (what a killed run leaves), (c) Lightning resumed from ``trainer.save_checkpoint``
after a fit that stopped at epoch 2, (d) as (b) with the scheduler stepped and saved by the
module itself. Appends to benchmarks/results/lightning.jsonl one JSON line per timed run
("lightning_run"), the timing summary ("lightning_timing") and the resume checks
("lightning_resume"); ``--part all`` (the default) also prints the decision.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import append_result, shared_dataset

from basketgnn import registry
from basketgnn.data.dataset import BasketData
from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.data.split import Instances, make_split
from basketgnn.engine import batching as batching_module
from basketgnn.engine import trainer as trainer_module
from basketgnn.engine.batching import length_batches
from basketgnn.engine.trainer import setup_torch, train_model
from basketgnn.graph.cooccurrence import GraphBatch, UserGraphs, build_user_graphs
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig
from basketgnn.nn.losses import compute_loss, multi_hot

try:
    import lightning as L
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
except ImportError as e:  # not a dependency of the package
    sys.exit(f"bench_lightning: cannot import lightning ({e}); install it into a separate folder "
             "and put it on PYTHONPATH (see this file's docstring)")

State = dict[str, Any]  # {"model": state_dict, "optimizer": state_dict, "scheduler": state_dict}


# --- the Lightning arm --------------------------------------------------------------------------

class EpochBatches(torch.utils.data.Sampler):
    """The plain loop's batches of one epoch: ``length_batches`` with rng (seed, epoch).

    Lightning calls ``set_epoch`` with its 0-based epoch before each epoch (and after a resume),
    so epoch e here is the plain loop's epoch e + 1.
    """

    def __init__(self, n_history: np.ndarray, batch_size: int, seed: int) -> None:
        self.n_history, self.batch_size, self.seed = n_history, batch_size, seed
        self.epoch = 1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch + 1

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        return iter(length_batches(self.n_history, self.batch_size, rng))

    def __len__(self) -> int:
        return -(-len(self.n_history) // self.batch_size)


class CollatedGraphs(torch.utils.data.Dataset):
    """Index array of one batch -> that batch's GraphBatch (UserGraphs.collate)."""

    def __init__(self, graphs: UserGraphs) -> None:
        self.graphs = graphs

    def __getitem__(self, idx: np.ndarray) -> GraphBatch:
        return self.graphs.collate(idx)

    def __len__(self) -> int:
        return len(self.graphs)


def _as_is(batch: GraphBatch) -> GraphBatch:
    return batch


def batch_loader(graphs: UserGraphs, config: DNNTSPConfig) -> torch.utils.data.DataLoader:
    # batch_size=None: each sampled element is a whole batch's index array. The DataLoader's own
    # generator keeps its base-seed draw off the global torch RNG that dropout uses.
    return torch.utils.data.DataLoader(
        CollatedGraphs(graphs),
        sampler=EpochBatches(graphs.n_history, config.batch_size, config.seed),
        batch_size=None,
        collate_fn=_as_is,
        num_workers=0,
        generator=torch.Generator(),
    )


class LitDNNTSP(L.LightningModule):
    """DNNTSP's training step (MODEL.md §4) as a LightningModule: the plain loop's batch step,
    Adam, and ReduceLROnPlateau stepped on the epoch's mean training loss.

    ``own_scheduler=False`` hands the scheduler to Lightning (``configure_optimizers`` with a
    monitor), the documented way. ``own_scheduler=True`` steps it in this module's
    ``on_train_epoch_end`` and keeps its state in the checkpoint itself, so that a checkpoint
    written at the end of an epoch already holds that epoch's scheduler step.
    """

    def __init__(self, model: DNNTSP, config: DNNTSPConfig, own_scheduler: bool = False) -> None:
        super().__init__()
        self.model = model
        self.config = config
        self.own_scheduler = own_scheduler
        self.scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau | None = None
        self._scheduler_state: dict[str, Any] | None = None  # from a checkpoint, until created
        self.losses: list[float] = []
        self.epoch_loss = float("nan")
        self.epoch_losses: list[float] = []

    def on_train_epoch_start(self) -> None:
        torch.manual_seed(self.config.seed * 100_003 + self.current_epoch + 1)  # as the plain loop
        self.losses = []

    def transfer_batch_to_device(self, batch: GraphBatch, device: torch.device, dataloader_idx: int) -> GraphBatch:
        return batch.to(device)

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor | None:
        if float(batch.row_weight.sum()) < 2:
            return None  # train-mode BatchNorm needs two rows; the plain loop skips these too
        scores = self.model(batch)  # [B, I]
        y = multi_hot(batch.target_items, batch.target_offsets, self.model.num_items)
        loss = compute_loss(self.config.loss, scores, y)
        self.losses.append(loss.item())
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_loss = float(np.mean(self.losses))
        self.epoch_losses.append(self.epoch_loss)
        if self.own_scheduler:
            assert self.scheduler is not None
            self.scheduler.step(self.epoch_loss)
        else:
            # ReduceLROnPlateau needs a logged monitor value; lr_scheduler_step uses the exact mean.
            self.log("train_loss", self.epoch_loss)

    def lr_scheduler_step(self, scheduler, metric) -> None:
        scheduler.step(self.epoch_loss)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["epoch_loss"] = self.epoch_loss
        if self.scheduler is not None:
            checkpoint["own_scheduler"] = self.scheduler.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Called before configure_optimizers when resuming.
        self.epoch_loss = checkpoint["epoch_loss"]
        self._scheduler_state = checkpoint.get("own_scheduler")

    def configure_optimizers(self):
        c = self.config
        optimizer = torch.optim.Adam(self.model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=c.lr_patience)
        if self.own_scheduler:
            if self._scheduler_state is not None:
                scheduler.load_state_dict(self._scheduler_state)
            self.scheduler = scheduler
            return optimizer
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss", "interval": "epoch"}}


class EpochClock(Callback):
    """Epoch wall and CPU (this process) times: from one on_train_epoch_start to the next
    (on_train_end for the last)."""

    def __init__(self) -> None:
        self.starts: list[tuple[float, float]] = []
        self.end = (0.0, 0.0)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.starts.append((time.perf_counter(), time.process_time()))

    def on_train_end(self, trainer, pl_module) -> None:
        self.end = (time.perf_counter(), time.process_time())

    @property
    def epoch_s(self) -> list[float]:
        return list(np.diff([t for t, _ in [*self.starts, self.end]]))

    @property
    def epoch_cpu_s(self) -> list[float]:
        return list(np.diff([c for _, c in [*self.starts, self.end]]))


def lightning_trainer(epochs: int, callbacks: list[Callback]) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, callbacks=callbacks,
        logger=False, enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, num_sanity_val_steps=0,
    )


def lightning_fit(
    n_items: int, graphs: UserGraphs, config: DNNTSPConfig, epochs: int,
    checkpoint_dir: Path | None = None, ckpt_path: Path | None = None, init_seed: int | None = None,
    own_scheduler: bool = False,
) -> tuple[State, EpochClock, LitDNNTSP, L.Trainer]:
    """Fit DNNTSP with Lightning for ``epochs`` epochs (resuming from ``ckpt_path`` if given)."""
    torch.manual_seed(config.seed if init_seed is None else init_seed)  # as train_model
    module = LitDNNTSP(DNNTSP.from_config(n_items, config), config, own_scheduler)
    clock = EpochClock()
    callbacks: list[Callback] = [clock]
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, filename="{epoch}", save_top_k=-1,
                                         every_n_epochs=1))
    trainer = lightning_trainer(epochs, callbacks)
    trainer.fit(module, train_dataloaders=batch_loader(graphs, config),
                ckpt_path=str(ckpt_path) if ckpt_path is not None else None)
    state = {
        "model": module.model.state_dict(),
        "optimizer": trainer.optimizers[0].state_dict(),
        "scheduler": (module.scheduler if own_scheduler else trainer.lr_scheduler_configs[0].scheduler).state_dict(),
    }
    return state, clock, module, trainer


# --- the plain arm ------------------------------------------------------------------------------

@contextmanager
def plain_cpu_clock():
    """CPU time of each of the engine's training epochs: from its call of ``length_batches``
    with an rng (the epoch's first step, through ``BatchPlan.epoch``) to its call of
    ``validation_metrics`` (right after the scheduler step), the span its ``train_s`` covers.
    Wraps ``engine.batching.length_batches`` (the name ``BatchPlan.epoch`` calls; scoring calls
    it without an rng) and ``engine.trainer.validation_metrics`` (called once per epoch) for the
    duration only. Yields the list of per-epoch CPU seconds, filled as it runs."""
    cpu: list[float] = []
    start = [0.0]
    batches_fn, validate_fn = batching_module.length_batches, trainer_module.validation_metrics

    def timed_batches(lengths, batch_size, rng, *args, **kwargs):
        if rng is not None:
            start[0] = time.process_time()
        return batches_fn(lengths, batch_size, rng, *args, **kwargs)

    def timed_validation(*a, **k):
        cpu.append(time.process_time() - start[0])
        return validate_fn(*a, **k)

    batching_module.length_batches, trainer_module.validation_metrics = timed_batches, timed_validation
    try:
        yield cpu
    finally:
        batching_module.length_batches, trainer_module.validation_metrics = batches_fn, validate_fn


def plain_fit(
    data: BasketData, train: Instances, validate: Instances, config: DNNTSPConfig, out_dir: Path
) -> tuple[State, list[dict[str, Any]], list[float]]:
    """Today's loop; the state after the last epoch is the one it saves for resuming.
    Returns (state, per-epoch records, per-epoch training CPU seconds)."""
    with plain_cpu_clock() as cpu:
        _, result = train_model(registry.get_spec("dnntsp"), data, train, validate, config,
                                   out_dir=out_dir, progress=False)
    resume = torch.load(out_dir / "resume.pt", map_location="cpu", weights_only=False)
    return {k: resume[k] for k in ("model", "optimizer", "scheduler")}, result.history, cpu


# --- comparison ---------------------------------------------------------------------------------

def _tensors(state: State) -> dict[str, torch.Tensor]:
    """Every tensor of a training state under a stable name (Adam's state is keyed by the
    parameter's position, the same in both arms)."""
    out = {f"model.{k}": v for k, v in state["model"].items()}
    for i, s in state["optimizer"]["state"].items():
        out.update({f"adam.{i}.{k}": torch.as_tensor(v) for k, v in s.items()})
    return out


def compare(a: State, b: State) -> dict[str, Any]:
    """Bitwise comparison of two training states, with the largest difference where they differ."""
    ta, tb = _tensors(a), _tensors(b)
    if ta.keys() != tb.keys():
        return {"identical": False, "note": f"different tensors: {sorted(ta.keys() ^ tb.keys())[:5]}"}
    differ = [k for k in ta if not torch.equal(ta[k], tb[k])]
    max_diff = max((float((ta[k].double() - tb[k].double()).abs().max()) for k in differ), default=0.0)
    sched_a = {k: v for k, v in a["scheduler"].items()}
    sched_b = {k: v for k, v in b["scheduler"].items()}
    sched_differ = sorted(k for k in sched_a.keys() | sched_b.keys() if sched_a.get(k) != sched_b.get(k))
    return {
        "identical": not differ and not sched_differ,
        "tensors": len(ta),
        "tensors_differ": len(differ),
        "max_abs_diff": max_diff,
        "first_differ": differ[:3],
        "scheduler_differ": {k: [sched_a.get(k), sched_b.get(k)] for k in sched_differ},
    }


def _stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"mean": round(float(a.mean()), 3), "std": round(float(a.std(ddof=1)), 3) if len(a) > 1 else 0.0,
            "min": round(float(a.min()), 3), "max": round(float(a.max()), 3), "n": len(a)}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def timed_pairs(
    data: BasketData, train: Instances, validate: Instances, graphs: UserGraphs,
    config: DNNTSPConfig, pairs: int, tmp: Path, common_fields: dict[str, Any],
) -> dict[str, Any]:
    """The alternated timed runs (one JSON line each), their summary and the arms' exactness."""
    batches = common_fields["batches_per_epoch"]
    # Timed runs, alternated.
    plain_epochs: list[float] = []
    lit_epochs: list[float] = []
    plain_cpu: list[float] = []
    lit_cpu: list[float] = []
    plain_states: list[State] = []
    lit_states: list[State] = []
    plain_losses: list[list[float]] = []
    lit_losses: list[list[float]] = []
    pair_overheads: list[float] = []
    pair_cpu_overheads: list[float] = []
    for pair in range(pairs):
        state, history, p_cpu = plain_fit(data, train, validate, config, tmp / f"plain{pair}")
        p_s = [r["train_s"] for r in history]
        plain_states.append(state)
        plain_losses.append([r["train_loss"] for r in history])
        t_fit = time.perf_counter()
        l_state, clock, module, _ = lightning_fit(data.n_items, graphs, config, config.epochs)
        l_fit = time.perf_counter() - t_fit
        l_s, l_cpu = clock.epoch_s, clock.epoch_cpu_s
        lit_states.append(l_state)
        lit_losses.append(module.epoch_losses)
        plain_epochs += p_s[1:]
        lit_epochs += l_s[1:]
        plain_cpu += p_cpu[1:]
        lit_cpu += l_cpu[1:]
        pair_overheads.append(100 * (np.mean(l_s[1:]) / np.mean(p_s[1:]) - 1))
        pair_cpu_overheads.append(100 * (np.mean(l_cpu[1:]) / np.mean(p_cpu[1:]) - 1))
        for arm, secs, cpu, extra in (
            ("plain", p_s, p_cpu, {}),
            ("lightning", l_s, l_cpu, {"fit_s": round(l_fit, 3), "setup_s": round(clock.starts[0][0] - t_fit, 3)}),
        ):
            rec = {"bench": "lightning_run", **common_fields, "arm": arm, "pair": pair,
                   "epoch_s": [round(x, 3) for x in secs], "epoch_cpu_s": [round(x, 3) for x in cpu],
                   **extra, "load": _load()}
            print(rec, flush=True)
            append_result("lightning", rec)

    # Exactness between the arms and between repeats of one arm.
    exact = {
        "plain_vs_lightning": compare(plain_states[0], lit_states[0]),
        "plain_repeat": compare(plain_states[0], plain_states[-1]),
        "lightning_repeat": compare(lit_states[0], lit_states[-1]),
        "losses_plain": plain_losses[0],
        "losses_lightning_rounded": [round(x, 6) for x in lit_losses[0]],
        "losses_equal_to_6dp": plain_losses[0] == [round(x, 6) for x in lit_losses[0]],
    }
    plain, lit = _stats(plain_epochs), _stats(lit_epochs)
    plain_c, lit_c = _stats(plain_cpu), _stats(lit_cpu)
    return {
        "pairs": len(pair_overheads),
        "measured_epochs": f"2-{config.epochs} of each run",
        "plain_epoch_s": plain, "lightning_epoch_s": lit,
        "overhead_pct": round(100 * (lit["mean"] / plain["mean"] - 1), 2),
        "pair_overhead_pct": [round(x, 2) for x in pair_overheads],
        "overhead_ms_per_batch": round(1000 * (lit["mean"] - plain["mean"]) / batches, 3),
        "plain_epoch_cpu_s": plain_c, "lightning_epoch_cpu_s": lit_c,
        "cpu_overhead_pct": round(100 * (lit_c["mean"] / plain_c["mean"] - 1), 2),
        "pair_cpu_overhead_pct": [round(x, 2) for x in pair_cpu_overheads],
        "cpu_overhead_ms_per_batch": round(1000 * (lit_c["mean"] - plain_c["mean"]) / batches, 3),
        "exactness": exact,
    }


def resume_checks(
    data: BasketData, train: Instances, validate: Instances, graphs: UserGraphs,
    config: DNNTSPConfig, tmp: Path,
) -> dict[str, Any]:
    """Resume after epoch 2, compared bitwise with uninterrupted runs of config.epochs epochs."""
    exact: dict[str, Any] = {}
    # (a) The plain loop: 2 epochs, then the same command with all epochs resumes from resume.pt.
    plain_full, _, _ = plain_fit(data, train, validate, config, tmp / "plain_full")
    resume_dir = tmp / "plain_resume"
    plain_fit(data, train, validate, config.model_copy(update={"epochs": 2}), resume_dir)
    resumed, _, _ = plain_fit(data, train, validate, config, resume_dir)
    exact["plain_resume_vs_uninterrupted"] = compare(plain_full, resumed)
    # (b) Lightning, from the ModelCheckpoint file of epoch 2 of a run that checkpoints every
    # epoch (what a killed run leaves); a fresh module (other init) and Trainer resume from it.
    # (d) The same with the scheduler stepped by the module itself (LitDNNTSP.own_scheduler).
    full_runs = {}
    for key, own in (("lightning_resume_modelcheckpoint", False),
                     ("lightning_resume_modelcheckpoint_own_scheduler", True)):
        ckpt_dir = tmp / f"{key}_full"
        full, _, _, _ = lightning_fit(data.n_items, graphs, config, config.epochs,
                                      checkpoint_dir=ckpt_dir, own_scheduler=own)
        full_runs[own] = full
        exact[f"{key}_uninterrupted_vs_plain"] = compare(plain_full, full)
        resumed, _, _, _ = lightning_fit(
            data.n_items, graphs, config, config.epochs, checkpoint_dir=tmp / f"{key}_resumed",
            ckpt_path=ckpt_dir / "epoch=1.ckpt",  # Lightning's epochs are 0-based
            init_seed=config.seed + 1, own_scheduler=own,
        )
        exact[f"{key}_vs_uninterrupted"] = compare(full, resumed)
    # (c) Lightning, from trainer.save_checkpoint after a fit that ended at epoch 2.
    _, _, _, trainer = lightning_fit(data.n_items, graphs, config, 2)
    saved = tmp / "after2.ckpt"
    trainer.save_checkpoint(saved)
    resumed, _, _, _ = lightning_fit(data.n_items, graphs, config, config.epochs, ckpt_path=saved,
                                     init_seed=config.seed + 1)
    exact["lightning_resume_save_checkpoint_vs_uninterrupted"] = compare(full_runs[False], resumed)
    # The decision's "resume exact": Lightning's own kill-safe checkpoint, used as documented.
    exact["lightning_resume_exact"] = exact["lightning_resume_modelcheckpoint_vs_uninterrupted"]["identical"]
    return exact


class _TinyModule(L.LightningModule):
    """A one-layer model, so that an epoch is almost only the training loop's own work."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self._last = loss.item()  # as the plain loop, which reads every batch's loss
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def loop_overhead(n_batches: int = 2000, epochs: int = 3) -> dict[str, Any]:
    """Per-batch cost of the loop itself, plain against Lightning, with a one-layer model on
    precomputed batches of 64 (CPU and wall ms per batch; epoch 1 not counted)."""
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(64, 32, generator=g), torch.randn(64, 1, generator=g)) for _ in range(n_batches)]
    out: dict[str, Any] = {"batches_per_epoch": n_batches}
    # plain
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    wall, cpu = [], []
    for _ in range(epochs):
        t, c = time.perf_counter(), time.process_time()
        for x, y in data:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    out["plain_ms_per_batch"] = {"wall": round(1000 * np.mean(wall[1:]) / n_batches, 4),
                                 "cpu": round(1000 * np.mean(cpu[1:]) / n_batches, 4)}
    # Lightning
    torch.manual_seed(0)
    clock = EpochClock()
    trainer = lightning_trainer(epochs, [clock])
    trainer.fit(_TinyModule(), train_dataloaders=torch.utils.data.DataLoader(
        data, batch_size=None, collate_fn=_as_is, generator=torch.Generator()))
    out["lightning_ms_per_batch"] = {"wall": round(1000 * np.mean(clock.epoch_s[1:]) / n_batches, 4),
                                     "cpu": round(1000 * np.mean(clock.epoch_cpu_s[1:]) / n_batches, 4)}
    out["overhead_ms_per_batch"] = {
        k: round(out["lightning_ms_per_batch"][k] - out["plain_ms_per_batch"][k], 4) for k in ("wall", "cpu")
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="TaFeng")
    ap.add_argument("--part", choices=("all", "timing", "resume", "overhead"), default="all",
                    help="timing: the alternated timed runs (run it under the timing lock); "
                    "resume: the resume checks only (no timing); overhead: the loops' own cost "
                    "per batch with a one-layer model (no data needed)")
    ap.add_argument("--epochs", type=int, default=4, help="epochs per run; epoch 1 is not timed")
    ap.add_argument("--pairs", type=int, default=3, help="plain/lightning runs, alternated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the config's default)")
    ap.add_argument("--users", type=int, default=0, help="train on the first N training users only "
                    "(0: all; for a quick check of the script)")
    args = ap.parse_args()
    if args.epochs < 3:
        sys.exit("--epochs must be at least 3 (resume is checked from epoch 2)")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")

    config = DNNTSPConfig(epochs=args.epochs, seed=args.seed, threads=args.threads)
    setup_torch(config)
    if args.part == "overhead":
        load_start = _load()
        record = {"bench": "lightning_loop_overhead", "threads": torch.get_num_threads(),
                  "lightning": L.__version__, "torch": torch.__version__, **loop_overhead(),
                  "load_start": load_start, "load_end": _load()}
        print(record)
        append_result("lightning", record)
        return
    data = read_dnntsp_json(shared_dataset(args.data))
    split = make_split(data)
    train = split["train"]
    if args.users:
        train = Instances(train.users[: args.users], train.n_history[: args.users])
    graphs = build_user_graphs(data, train)
    common_fields = {"data": args.data, "train_users": len(train),
                     "batches_per_epoch": -(-len(train) // config.batch_size), "epochs": args.epochs,
                     "threads": torch.get_num_threads(), "lightning": L.__version__,
                     "torch": torch.__version__}
    tmp = Path(tempfile.mkdtemp(prefix="bench_lightning_"))
    try:
        timing = resume = None
        if args.part in ("all", "timing"):
            load_start = _load()
            timing = timed_pairs(data, train, split["validate"], graphs, config, args.pairs, tmp,
                                 common_fields)
            record = {"bench": "lightning_timing", **common_fields, **timing,
                      "load_start": load_start, "load_end": _load()}
            print(record)
            append_result("lightning", record)
        if args.part in ("all", "resume"):
            resume = resume_checks(data, train, split["validate"], graphs, config, tmp)
            record = {"bench": "lightning_resume", **common_fields, "exactness": resume}
            print(record)
            append_result("lightning", record)
        if timing is not None and resume is not None:
            within = timing["cpu_overhead_pct"] <= 5
            decision = "lightning" if within and resume["lightning_resume_exact"] else "plain torch"
            print(f"decision: {decision} (CPU-time overhead {timing['cpu_overhead_pct']}%, "
                  f"resume exact: {resume['lightning_resume_exact']})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
