"""The one training loop for every neural model (MODEL.md, training), with early stopping and
crash-safe resume. The model supplies a :class:`basketgnn.models.spec.ModelSpec`; nothing here
names a model.

Each epoch: batches of instances with similar history length (little padding) in a seeded
random order (or, ``batch_order``, the instances shuffled or in their own order, cut into
batches as a plain DataLoader does); Adam; ReduceLROnPlateau on the mean training loss, or a cosine schedule
(``lr_schedule``); mean validation NDCG over K in {10, 20, 30, 40} decides the best checkpoint
and early stopping. After training the best weights are restored. What happens around the epochs (early
stopping, best.pt, resume.pt, train_log.jsonl) is :mod:`basketgnn.engine.callbacks`; the
batch plan is :mod:`basketgnn.engine.batching`.

Randomness is derived from (seed, epoch) at the start of every epoch, so an interrupted run
resumed from ``resume.pt`` follows exactly the same path as an uninterrupted one.

Distributed training: started by torchrun (``WORLD_SIZE`` > 1), the engine opens the process
group (:mod:`basketgnn.engine.distributed`: gloo on CPU, NCCL on CUDA), wraps the module in
DistributedDataParallel and closes the group at the end. Per rank:

* Batches: every rank draws the same seeded plan of ``batch_size`` batches and runs its own
  1/N slice of each (:class:`BatchPlan`), so every rank does the same number of steps, one
  step of N ranks sees exactly the batch one process would, and DDP's gradient average over
  the ranks is (up to slices differing by one row) that batch's gradient. ``lr`` and
  ``batch_size`` therefore mean the same with any number of processes; an epoch has the same
  steps and the per-process work of a step is 1/N.
* A batch the model skips (``ModelSpec.skip_batch``) is skipped by every rank when any rank's
  slice must be.
* The epoch loss (for ReduceLROnPlateau and the log) is the mean over every rank's steps
  (all-reduced); BatchNorm-style buffers are copied from rank 0 after each epoch.
* Validation: each rank scores its 1/N of the validation customers and the metrics are
  all-reduced (weighted by customers), so validation costs 1/N per rank and every rank sees
  the same numbers, hence the same best epoch and early-stopping decision. (Scoring on rank 0
  and broadcasting would leave N - 1 ranks idle for the whole validation.)
* Files and output: only rank 0 writes best.pt / resume.pt / train_log.jsonl, draws the bar
  and calls ``on_epoch``. Resume: rank 0 reads resume.pt and broadcasts it, so every rank
  continues from the same state (and other machines need no copy of the run folder).
* Warm start (``warm_start``: an earlier run's best.pt of the same model,
  :mod:`basketgnn.engine.warm_start`): rank 0 reads it into the freshly built module (DDP then
  gives every rank rank 0's weights), and the warm-started module is validated as epoch 0, so
  training keeps it unless an epoch validates better; best.pt and the result record what was
  reused (``warm_start``: checkpoint, items kept / new / dropped).
* After training every rank restores the best weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances, prefix_instances
from basketgnn.engine import distributed
from basketgnn.engine.batching import SCORE_BATCH, BatchPlan, score_source, score_work, source_sizes
from basketgnn.engine.callbacks import Best, EarlyStopping, RunFiles
from basketgnn.engine.compiled_adam import CompiledAdam
from basketgnn.engine.progress import progress_bar
from basketgnn.engine.threads import torch_thread_count
from basketgnn.engine.warm_start import WarmStartReport, apply_warm_start, read_previous
from basketgnn.fingerprint import data_fingerprint
from basketgnn.metrics import KS, ranking_metrics, top_k, usable_ks
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import BatchSource, ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot


@dataclass
class TrainResult:
    best_epoch: int
    best_validation: dict[str, float]
    epochs_run: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    warm_start: WarmStartReport | None = None  # what a warm start reused (rank 0; else None)
    # History baskets the model's data left out (a history cap such as DNNTSP's max_history),
    # per part: {"train": n, "validate": n}; empty when nothing was left out.
    left_out_baskets: dict[str, int] = field(default_factory=dict)
    rank: int = 0  # this process's rank (a torchrun's; 0 for one process): rank 0 writes


def describe_left_out(left_out_baskets: dict[str, int]) -> str:
    """One line on what a history cap left out, e.g. {"train": 3168, "validate": 3340}."""
    return (
        "history cap: the model left out "
        + ", ".join(f"{n:,} {part} history baskets" for part, n in left_out_baskets.items())
        + " (max_history, train_history_items; the TIFU-KNN fusion reads whole histories)"
    )


def setup_torch(config: TrainOptions, threads: bool = True) -> torch.device:
    """Threads (unless not ``threads``) and float behaviour for training and scoring; returns
    the device. The threads are the config's, or with 0 torch's own count as set outside a
    job's narrowing (:func:`~basketgnn.engine.threads.torch_thread_count`): a dense forward
    after a ranking call that narrowed them runs on the job's count again."""
    if threads:
        want = config.threads or torch_thread_count()
        if torch.get_num_threads() != want:  # setting it costs ms
            torch.set_num_threads(want)
    # Denormal floats (tiny gradients of saturated sigmoids) are ~40x slower on x86 CPUs.
    # numpy works out its float limits once, on first use, and warns when denormals are
    # flushed then (the smallest subnormal reads as 0): they are worked out before.
    np.finfo(np.float32), np.finfo(np.float64)
    torch.set_flush_denormal(True)
    return torch.device(config.device)


#: ``rank(module, source, device, work, k)``: every validation instance's top k items, best
#: first, ties to the lower item (``metrics.top_k`` of the module's dense scores), or None to
#: have them ranked from the dense scores. Shapes: -> [n, k] int64.
ValidationRank = Callable[[nn.Module, BatchSource, torch.device, int, int], "np.ndarray | None"]


def dense_ranking(
    module: nn.Module, source: BatchSource, n_items: int, device: torch.device, work: int, k: int
) -> np.ndarray:
    """Every instance's top k items by the module's dense scores, best first, ties to the lower
    item: the engine's own validation ranking. Shapes: -> [len(source), k] int64."""
    return top_k(score_source(module, source, n_items, device, SCORE_BATCH, work), k)


def validation_metrics(
    module: nn.Module,
    source: BatchSource,
    data: BasketData,
    validate: Instances,
    device: torch.device,
    work: int = 0,
    rank: ValidationRank | None = None,
) -> dict[str, float]:
    """Ranking metrics of the module's own scores on the validation instances plus
    ``mean_ndcg`` (the model-selection criterion). ``work``: the scoring batches' work bound
    (:func:`basketgnn.engine.batching.score_source`). The ranking is ``rank``'s when given and
    not None (the caller's faster way to the same top k), else the dense scores' top k."""
    ks = usable_ks(KS, data.n_items)
    ranked = rank(module, source, device, work, max(ks)) if rank is not None else None
    if ranked is None:
        ranked = dense_ranking(module, source, data.n_items, device, work, max(ks))
    targets = data.targets(validate.users, validate.n_history)
    m = ranking_metrics(ranked, targets.values, targets.offsets, data.n_items, ks=ks)
    m["mean_ndcg"] = float(np.mean([m[f"ndcg@{k}"] for k in ks]))
    return m


def _default_loss(n_items: int, config: TrainOptions) -> Callable[..., torch.Tensor]:
    def loss(module: nn.Module, batch: Any, scores: torch.Tensor, cfg: Any) -> torch.Tensor:
        assert batch.target_items is not None and batch.target_offsets is not None
        y = multi_hot(batch.target_items, batch.target_offsets, n_items)
        return compute_loss(config.loss, scores, y)

    return loss


def train_model(
    spec: ModelSpec,
    data: BasketData,
    train: Instances,
    validate: Instances,
    config: TrainOptions,
    out_dir: str | Path | None = None,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    plan: BatchPlan | None = None,
    warm_start: str | Path | None = None,
    extras: dict[str, Any] | None = None,
    validation_rank: ValidationRank | None = None,
) -> tuple[nn.Module, TrainResult]:
    """Train ``spec``'s model; returns the best module (by validation mean NDCG) and a summary.

    With ``out_dir``, writes best.pt / resume.pt / train_log.jsonl there (``extras`` stored in
    best.pt) and resumes from resume.pt when it exists for the same model, config and data.
    ``plan`` is the batch plan (default: ``config.batch_size`` over this run's processes).
    ``warm_start``: an earlier run's checkpoint of the same model to start from (module
    docstring). ``validation_rank``: how each epoch's validation ranks (default: the dense
    scores' top k; :func:`validation_metrics`).

    Under torchrun (``WORLD_SIZE`` > 1) or inside a process group opened by the caller, this is
    one rank of a DistributedDataParallel run (module docstring); ``on_epoch`` is called on
    rank 0 only.
    """
    t_start = time.perf_counter()
    ctx, device = distributed.start(setup_torch(config))
    try:
        run = _Run(spec, data, train, validate, config, ctx, device, plan, warm_start, validation_rank)
        files = RunFiles(Path(out_dir) if out_dir is not None else None, run.writes, spec.name,
                         config, data.item_ids, dict(extras or {}))  # fmt: skip
        result = run.fit(files, progress and run.writes, on_epoch if run.writes else None)
    except BaseException:
        distributed.finish(ctx, clean=False)
        raise
    distributed.finish(ctx)
    result.seconds = time.perf_counter() - t_start
    return run.module, result


class _Run:
    """One rank's training: the module, optimiser, schedule, batch plan and data sources."""

    def __init__(self, spec: ModelSpec, data: BasketData, train: Instances, validate: Instances,
                 config: TrainOptions, ctx: distributed.DistContext, device: torch.device,
                 plan: BatchPlan | None, warm_start: str | Path | None,
                 validation_rank: ValidationRank | None = None) -> None:  # fmt: skip
        self.spec, self.data, self.config, self.ctx, self.device = spec, data, config, ctx, device
        self.validation_rank = validation_rank
        self.writes = ctx.rank == 0  # only rank 0 writes files
        torch.manual_seed(config.seed)
        self.module = spec.build(data.n_items, config).to(device)
        if spec.init is not None:
            spec.init(self.module, data, train, config)
        self.warm_started = warm_start is not None  # on every rank
        self.warm: WarmStartReport | None = None
        if warm_start is not None and self.writes:  # DDP then gives every rank rank 0's weights
            self.warm = apply_warm_start(self.module, spec, config, read_previous(warm_start, spec), data.item_ids)
        # torch's Adam with its CPU step compiled (the same state and values to float rounding).
        self.optimizer = CompiledAdam(self.module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = make_scheduler(self.optimizer, config)
        self.plan = plan or BatchPlan(config.batch_size, ctx.world_size, ctx.rank, config.batch_work, config.batch_order)
        if (self.plan.world_size, self.plan.rank) != (ctx.world_size, ctx.rank):
            raise ValueError(f"{self.plan} does not match this process (rank {ctx.rank} of {ctx.world_size})")
        self.loss_fn = spec.loss or _default_loss(data.n_items, config)
        # The loss from the scores in shared form where the model offers one for this config.
        self.sparse_loss_fn = spec.sparse_loss(config) if spec.sparse_loss is not None else None
        if config.train_prefixes:
            train = prefix_instances(train)
        self.fingerprint = data_fingerprint(data, train, validate)
        self.train_source = spec.batches(data, train, config, True)
        val_source = spec.batches(data, validate, config, False)
        # Each rank validates its 1/N of the customers (all of them if there are fewer than N).
        self.val_part = validate
        if ctx.distributed and len(validate) >= ctx.world_size:
            self.val_part = Instances(validate.users[ctx.rank :: ctx.world_size],
                                      validate.n_history[ctx.rank :: ctx.world_size])  # fmt: skip
        self.split_validation = self.val_part is not validate
        self.val_source = spec.batches(data, self.val_part, config, False) if self.split_validation else val_source
        left_out = {part: int(getattr(src, "left_out_baskets", 0))
                    for part, src in (("train", self.train_source), ("validate", val_source))}  # fmt: skip
        self.left_out = {part: n for part, n in left_out.items() if n}
        self.score_work = score_work(config)

    def validate(self, work: int = 0) -> dict[str, float]:
        """Validation metrics, averaged over the ranks when each validates a part."""
        val = validation_metrics(self.module, self.val_source, self.data, self.val_part, self.device, work,
                                 self.validation_rank)  # fmt: skip
        return distributed.mean_over_ranks(val, len(self.val_part)) if self.split_validation else val

    def fit(self, files: RunFiles, progress: bool, on_epoch: Callable[[dict[str, Any]], None] | None) -> TrainResult:
        warm = self.warm
        files.extras.update({"left_out_baskets": self.left_out} if self.left_out else {})
        # resume.pt continues only the run that started from the same weights.
        key = self.fingerprint if warm is None else f"{self.fingerprint}|warm-start:{warm.sha256}"
        best, history, start_epoch = self._resume(files, key)
        net = nn.parallel.DistributedDataParallel(self.module) if self.ctx.distributed else self.module
        if self.warm_started and start_epoch == 1:
            best.take(0, self.validate(), self.module)  # epoch 0: the warm-started module, the one to beat
            files.save_best(self.module, 0, best.metrics, self.fingerprint)
        stop = EarlyStopping(self.config.patience, self.config.min_steps, start_epoch - 1 - best.epoch,
                             sum(int(r.get("steps", 0)) for r in history))  # fmt: skip
        epoch = start_epoch - 1
        for epoch in range(start_epoch, self.config.epochs + 1):
            if stop.should_stop():
                epoch -= 1
                break
            record, val = self._epoch(net, epoch, progress)
            record["best"] = improved = best.improves(val)
            history.append(record)
            if improved:
                best.take(epoch, val, self.module)
                files.save_best(self.module, epoch, val, self.fingerprint)
            stop.update(improved, record["steps"])
            files.end_epoch(record, self.module, self.optimizer, self.scheduler, best, history, key)
            if on_epoch is not None:
                on_epoch(record)
        if best.state is not None:
            self.module.load_state_dict(best.state)
        self.module.eval()
        if warm is not None:
            files.add_to_best(warm_start=warm.as_dict())  # where its weights came from
        return TrainResult(best.epoch, best.metrics, epoch, 0.0, history, warm, self.left_out, self.ctx.rank)

    def _resume(self, files: RunFiles, key: str) -> tuple[Best, list[dict[str, Any]], int]:
        """(best so far, the epochs' log, the first epoch to run) from resume.pt, or a fresh start."""
        files.start()
        resumed = files.load_resume(key) if files.out is not None else None
        if self.ctx.distributed and files.out is not None:  # rank 0's file, on every rank (and machine)
            resumed = distributed.broadcast_object(resumed)
        if resumed is None:
            if files.out is not None:
                files.clear()
            return Best(), [], 1
        self.module.load_state_dict(resumed["model"])
        self.optimizer.load_state_dict(resumed["optimizer"])
        self.scheduler.load_state_dict(resumed["scheduler"])
        files.rewrite_log(resumed["history"])
        return Best.from_dict(resumed["best"]), resumed["history"], resumed["epoch"] + 1

    def _epoch(self, net: nn.Module, epoch: int, progress: bool) -> tuple[dict[str, Any], dict[str, float]]:
        """One epoch of training, then validation; returns its log record and the metrics."""
        config, ctx = self.config, self.ctx
        t0 = time.perf_counter()
        torch.manual_seed(config.seed * 100_003 + epoch + 1_000_003 * ctx.rank)  # dropout differs per rank
        self.module.train()
        losses = []
        batches = self.plan.epoch(self.train_source.lengths, config.seed, epoch, source_sizes(self.train_source))
        bar = progress_bar(batches, desc=f"epoch {epoch}", enabled=progress, unit="batch")
        for idx in bar:
            batch = self.train_source.collate(idx).to(self.device)
            skip = self.spec.skip_batch is not None and self.spec.skip_batch(batch)
            if ctx.distributed and self.spec.skip_batch is not None:
                skip = distributed.any_rank(skip)  # a DDP step is all ranks or none
            if skip:
                continue
            if self.sparse_loss_fn is not None:
                loss = self.sparse_loss_fn(self.module, batch, net(batch, sparse=True), config)
            else:
                scores = net(batch)  # [B, I]
                loss = self.loss_fn(self.module, batch, scores, config)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{np.mean(losses):.4f}")
        if ctx.distributed:  # the mean over every rank's steps, the same on every rank
            total, steps = distributed.sum_over_ranks(np.array([sum(losses), len(losses)]))
            train_loss = float(total / steps)
            distributed.broadcast_buffers(self.module)
        else:
            train_loss = float(np.mean(losses))
        if config.lr_schedule == "cosine":
            self.scheduler.step()  # lr of the next epoch: lr * (1 + cos(pi * epoch / epochs)) / 2
        else:
            self.scheduler.step(train_loss)
        train_s = time.perf_counter() - t0
        val = self.validate(self.score_work)
        return {
            "epoch": epoch,
            "train_loss": round(train_loss, 6),
            "lr": self.optimizer.param_groups[0]["lr"],
            "steps": len(batches),
            "train_s": round(train_s, 3),
            "validate_s": round(time.perf_counter() - t0 - train_s, 3),
            **({"processes": ctx.world_size} if ctx.distributed else {}),
            **{f"val_{k}": round(v, 6) for k, v in val.items()},
        }, val


def make_scheduler(optimizer: torch.optim.Optimizer, config: TrainOptions):
    """The learning-rate schedule of ``config.lr_schedule``, stepped once per epoch:
    ReduceLROnPlateau on the epoch's training loss (plateau), or cosine annealing from ``lr`` to
    0 over ``config.epochs`` epochs (cosine)."""
    if config.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs)
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=config.lr_patience)
