"""The one training loop for every neural model (MODEL.md §4), with early stopping and
crash-safe resume. The model supplies a :class:`basketgnn.engine.spec.ModelSpec`; nothing here
names a model.

Each epoch: batches of instances with similar history length (little padding) in a seeded
random order; Adam; ReduceLROnPlateau on the mean training loss, or a cosine schedule
(``lr_schedule``); mean validation NDCG over K in {10, 20, 30, 40} decides the best checkpoint
and early stopping. After training the best weights are restored and the ranking add-on step
runs (:mod:`basketgnn.engine.addons`).

Files in ``out_dir``:
    best.pt            the best checkpoint (engine.checkpoint: model name, config, weights,
                       item ids, extras: epoch, validation metrics, add-on)
    resume.pt          state after the last finished epoch (model, optimiser, scheduler, best)
    train_log.jsonl    one JSON object per finished epoch

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
* After training every rank restores the best weights; the ranking add-on step runs on rank 0
  alone, after the group is no longer used (other ranks return without an add-on), so no rank
  waits on it.
"""

from __future__ import annotations

import copy
import json
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
from basketgnn.engine.addons import (
    ADDON_OPTIONS,
    AddOnChoice,
    RankingAddOn,
    choose_addon,
    wants_addon,
)
from basketgnn.engine.checkpoint import add_extras, config_as_trained, save_checkpoint
from basketgnn.engine.losses import compute_loss, multi_hot
from basketgnn.engine.options import TrainOptions
from basketgnn.engine.progress import progress_bar
from basketgnn.engine.spec import BatchSource, ModelSpec
from basketgnn.engine.warm_start import WarmStartReport, apply_warm_start, read_previous
from basketgnn.errors import UserError
from basketgnn.evaluate import usable_ks
from basketgnn.fingerprint import data_fingerprint
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.metrics import KS, ranking_metrics, top_k


@dataclass
class TrainResult:
    best_epoch: int
    best_validation: dict[str, float]
    epochs_run: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    warm_start: WarmStartReport | None = None  # what a warm start reused (rank 0; else None)
    addon: AddOnChoice | None = None  # what the add-on step chose (engine.addons)
    # History baskets the model's data left out (a history cap such as DNNTSP's max_history),
    # per part: {"train": n, "validate": n}; empty when nothing was left out.
    left_out_baskets: dict[str, int] = field(default_factory=dict)


def describe_left_out(left_out_baskets: dict[str, int]) -> str:
    """One line on what a history cap left out, e.g. {"train": 3168, "validate": 3340}."""
    return (
        "history cap: the model left out "
        + ", ".join(f"{n:,} {part} history baskets" for part, n in left_out_baskets.items())
        + " (max_history, train_history_items; the TIFU-KNN fusion reads whole histories)"
    )


def setup_torch(config: TrainOptions) -> torch.device:
    """Threads and float behaviour for training and scoring; returns the device."""
    if config.threads:
        torch.set_num_threads(config.threads)
    # Denormal floats (tiny gradients of saturated sigmoids) are ~40x slower on x86 CPUs.
    torch.set_flush_denormal(True)
    return torch.device(config.device)


def length_batches(
    lengths: np.ndarray,
    batch_size: int,
    rng: np.random.Generator | None,
    sizes: np.ndarray | None = None,
    work: int = 0,
    min_rows: int = 1,
) -> list[np.ndarray]:
    """Split indices into batches of similar ``lengths``, in random order when ``rng`` is given.

    Sorting by (length, random key) keeps padding small while still mixing users between epochs.
    With ``sizes`` and ``work`` > 0 a batch also closes before its work, sum of ``sizes`` times
    its longest ``lengths``, would pass ``work`` (but holds at least ``min_rows`` rows, the
    plan's last one excepted): long histories get fewer customers per batch and the step's
    temporaries stay bounded. While no batch of ``batch_size`` reaches ``work``, the batches
    (and the random draws) are exactly those without the bound.

    Example: lengths [1, 1, 2, 2], sizes [3, 3, 5, 5], batch_size 4, work 20: in length order
    the work of the first e rows is 3, 6, 2 * 13 = 26, ... so the first batch closes after 2
    rows; the second, [5, 5] at length 2, has work 20 and holds both.

    Shapes: lengths [n], sizes [n] -> batches of indices into them.
    """
    tie = rng.random(len(lengths)) if rng is not None else np.arange(len(lengths))
    order = np.lexsort((tie, lengths))
    if sizes is None or work <= 0:
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        size_sum = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64)[order])])  # [n + 1]
        longest = np.asarray(lengths, dtype=np.int64)[order]  # rows are in length order
        batches, start = [], 0
        while start < len(order):
            end = min(start + batch_size, len(order))
            # Work of rows start .. e - 1 for e = start + 1 .. end: non-decreasing in e.
            batch_work = (size_sum[start + 1 : end + 1] - size_sum[start]) * longest[start:end]
            rows = max(int(np.searchsorted(batch_work, work, side="right")), min_rows, 1)
            batches.append(order[start : start + rows])
            start += rows
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@dataclass(frozen=True)
class BatchPlan:
    """Which batches of an epoch a process runs.

    Every rank draws the same seeded :func:`length_batches` plan of ``batch_size`` batches
    (bounded by ``work`` when the epoch is given the rows' ``sizes``; every batch then still
    holds at least ``world_size`` rows) and runs rows ``rank, rank + world_size, ...`` of each (rows are in length order, so every
    slice has the same mix of lengths and the ranks finish a step together). Every rank does
    one step per plan batch (a DDP step is collective: a rank with one step more would hang),
    and every row of the epoch is run exactly once by one rank. A plan batch with fewer rows
    than ranks (the plan's one short batch) is joined to the batch before it in plan order.
    ``world_size`` 1 is the single-process run: every batch, in plan order.

    Example, 2 ranks, plan batches [a b c d] [e f g]: rank 0 runs [a c] then [e g], rank 1
    [b d] then [f].
    """

    batch_size: int
    world_size: int = 1
    rank: int = 0
    work: int = 0

    def epoch(
        self, lengths: np.ndarray, seed: int, epoch: int, sizes: np.ndarray | None = None
    ) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, epoch])
        batches = length_batches(lengths, self.batch_size, rng, sizes, self.work, self.world_size)
        if self.world_size == 1:
            return batches
        if self.batch_size < self.world_size or len(lengths) < self.world_size:
            raise UserError(
                f"batch_size {self.batch_size} with {len(lengths)} training instances cannot be "
                f"split over {self.world_size} processes: both must be at least the number of "
                "processes. Raise batch_size or start fewer processes."
            )
        # Only the last chunk of the length order can be short; it joins its predecessor in
        # plan order (its successor when it comes first).
        short = [i for i, b in enumerate(batches) if len(b) < self.world_size]
        if short:
            i = short[0]
            j = i - 1 if i > 0 else 1
            batches[j] = np.concatenate([batches[j], batches[i]])
            del batches[i]
        return [b[self.rank :: self.world_size] for b in batches]


def source_sizes(source: BatchSource) -> np.ndarray | None:
    """The per-instance size by which a batch's work is bounded (``batch_work``), for sources
    that declare one (``sizes`` [n], e.g. DNNTSP's nodes per user); None otherwise."""
    sizes = getattr(source, "sizes", None)
    return None if sizes is None else np.asarray(sizes)


@torch.no_grad()
def score_source(
    module: nn.Module,
    source: BatchSource,
    n_items: int,
    device: torch.device,
    batch_size: int = 256,
    work: int = 0,
) -> np.ndarray:
    """The module's scores of every item for every instance of ``source`` (logits; a ranking
    add-on is applied on top of them by the recommender). ``work`` > 0 bounds each batch's
    work as in :func:`length_batches` (scores do not depend on the batching).

    Shapes: -> [len(source), n_items] float32.
    """
    module.eval()
    out = np.zeros((len(source), n_items), dtype=np.float32)
    for idx in length_batches(source.lengths, batch_size, None, source_sizes(source), work):
        batch = source.collate(idx, with_targets=False).to(device)
        out[idx] = module(batch).float().cpu().numpy()
    return out


def validation_metrics(
    module: nn.Module,
    source: BatchSource,
    data: BasketData,
    validate: Instances,
    device: torch.device,
    work: int = 0,
) -> tuple[dict[str, float], np.ndarray]:
    """Ranking metrics of the module's own scores on the validation instances plus
    ``mean_ndcg`` (the model-selection criterion); also returns the scores [n_val, I].
    ``work``: the scoring batches' work bound (:func:`score_source`)."""
    scores = score_source(module, source, data.n_items, device, work=work)
    targets = data.targets(validate.users, validate.n_history)
    ks = usable_ks(KS, data.n_items)
    m = ranking_metrics(top_k(scores, max(ks)), targets.values, targets.offsets, data.n_items, ks=ks)
    m["mean_ndcg"] = float(np.mean([m[f"ndcg@{k}"] for k in ks]))
    return m, scores


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
) -> tuple[nn.Module, RankingAddOn | None, TrainResult]:
    """Train ``spec``'s model; returns the best module (by validation mean NDCG), the ranking
    add-on chosen after training (None: rank by the module's scores) and a summary.

    With ``out_dir``, writes best.pt / resume.pt / train_log.jsonl there and resumes from
    resume.pt when it exists for the same model, config and data. ``plan`` is the batch plan
    (default: ``config.batch_size`` over this run's processes). ``warm_start``: an earlier
    run's checkpoint of the same model to start from (module docstring).

    Under torchrun (``WORLD_SIZE`` > 1) or inside a process group opened by the caller, this is
    one rank of a DistributedDataParallel run (module docstring); ``on_epoch`` is called on
    rank 0 only, and only rank 0 returns the add-on.
    """
    t_start = time.perf_counter()
    ctx, device = distributed.start(setup_torch(config))
    try:
        result = _train_model(spec, data, train, validate, config, out_dir, progress, on_epoch,
                              plan, ctx, device, t_start, warm_start)
    except BaseException:
        distributed.finish(ctx, clean=False)
        raise
    distributed.finish(ctx)
    return result


def _train_model(
    spec: ModelSpec,
    data: BasketData,
    train: Instances,
    validate: Instances,
    config: TrainOptions,
    out_dir: str | Path | None,
    progress: bool,
    on_epoch: Callable[[dict[str, Any]], None] | None,
    plan: BatchPlan | None,
    ctx: distributed.DistContext,
    device: torch.device,
    t_start: float,
    warm_start: str | Path | None = None,
) -> tuple[nn.Module, RankingAddOn | None, TrainResult]:
    """:func:`train_model` on ``device`` as rank ``ctx.rank`` of ``ctx.world_size``."""
    torch.manual_seed(config.seed)
    module = spec.build(data.n_items, config).to(device)
    if spec.init is not None:
        spec.init(module, data, train, config)
    warm: WarmStartReport | None = None
    if warm_start is not None and ctx.rank == 0:
        warm = apply_warm_start(module, spec, config, read_previous(warm_start, spec), data.item_ids)
    optimizer = torch.optim.Adam(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = make_scheduler(optimizer, config)
    plan = plan or BatchPlan(config.batch_size, ctx.world_size, ctx.rank, config.batch_work)
    if (plan.world_size, plan.rank) != (ctx.world_size, ctx.rank):
        raise ValueError(f"{plan} does not match this process (rank {ctx.rank} of {ctx.world_size})")
    writes = plan.rank == 0  # only rank 0 writes files
    progress = progress and writes
    loss_fn = spec.loss or _default_loss(data.n_items, config)
    pool_train = train  # the add-on's pool: one row per training customer, never prefixes
    if config.train_prefixes:
        train = prefix_instances(train)
    train_source = spec.batches(data, train, config, True)
    val_source = spec.batches(data, validate, config, False)
    # Each rank validates its 1/N of the customers (all of them if there are fewer than N).
    val_part = validate
    if ctx.distributed and len(validate) >= ctx.world_size:
        val_part = Instances(validate.users[ctx.rank :: ctx.world_size],
                             validate.n_history[ctx.rank :: ctx.world_size])
    val_part_source = spec.batches(data, val_part, config, False) if val_part is not validate else val_source
    fingerprint = data_fingerprint(data, train, validate)
    train_sizes = source_sizes(train_source)
    left_out = {part: int(getattr(src, "left_out_baskets", 0))
                for part, src in (("train", train_source), ("validate", val_source))}
    left_out = {part: n for part, n in left_out.items() if n}
    # Scoring batches (256 rows, no gradients) get the training batch's work per row.
    score_work = config.batch_work * 256 // config.batch_size

    out = Path(out_dir) if out_dir is not None else None
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"epoch": 0, "metrics": {"mean_ndcg": -1.0}, "state": None}
    start_epoch = 1
    # resume.pt continues only the run that started from the same weights.
    resume_key = fingerprint if warm is None else f"{fingerprint}|warm-start:{warm.sha256}"
    if out is not None:
        if writes:
            out.mkdir(parents=True, exist_ok=True)
        resumed = _load_resume(out / "resume.pt", spec.name, config, resume_key) if writes else None
        if ctx.distributed:  # rank 0's file, on every rank (and every machine)
            resumed = distributed.broadcast_object(resumed)
        if resumed is None:
            # A different run: start its log and checkpoints afresh, never mixed with the old.
            if writes:
                for stale_file in ("train_log.jsonl", "best.pt", "resume.pt"):
                    (out / stale_file).unlink(missing_ok=True)
        else:
            module.load_state_dict(resumed["model"])
            optimizer.load_state_dict(resumed["optimizer"])
            scheduler.load_state_dict(resumed["scheduler"])
            best = resumed["best"]
            history = resumed["history"]
            start_epoch = resumed["epoch"] + 1
            # The log may hold epochs finished after the resume state was written: drop them.
            if writes:
                _write_log(out / "train_log.jsonl", history)

    # DDP after any resume: it starts every rank from rank 0's weights.
    net = nn.parallel.DistributedDataParallel(module) if ctx.distributed else module
    if warm_start is not None and start_epoch == 1:
        # Epoch 0: the warm-started module, the one to beat.
        val, _ = validation_metrics(module, val_part_source, data, val_part, device)
        if val_part is not validate:
            val = distributed.mean_over_ranks(val, len(val_part))
        best = {"epoch": 0, "metrics": val, "state": copy.deepcopy(module.state_dict())}
        if out is not None and writes:
            save_checkpoint(out / "best.pt", spec.name, module, config, data.item_ids,
                            {"epoch": 0, "validation": val, "data_fingerprint": fingerprint})
    stale = start_epoch - 1 - best["epoch"]
    steps_done = sum(int(r.get("steps", 0)) for r in history)  # after a resume: the earlier epochs'
    epoch = start_epoch - 1
    for epoch in range(start_epoch, config.epochs + 1):
        # Early stopping, but never before min_steps training steps: with few steps per epoch
        # the first epochs can all be spent lowering every logit (BENCHMARKS.md §7).
        if stale >= config.patience and steps_done >= config.min_steps:
            epoch -= 1
            break
        t0 = time.perf_counter()
        torch.manual_seed(config.seed * 100_003 + epoch + 1_000_003 * ctx.rank)  # dropout differs per rank
        module.train()
        losses = []
        batches = plan.epoch(train_source.lengths, config.seed, epoch, train_sizes)
        bar = progress_bar(batches, desc=f"epoch {epoch}", enabled=progress, unit="batch")
        for idx in bar:
            batch = train_source.collate(idx).to(device)
            skip = spec.skip_batch is not None and spec.skip_batch(batch)
            if ctx.distributed and spec.skip_batch is not None:
                skip = distributed.any_rank(skip)  # a DDP step is all ranks or none
            if skip:
                continue
            scores = net(batch)  # [B, I]
            loss = loss_fn(module, batch, scores, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{np.mean(losses):.4f}")
        if ctx.distributed:  # the mean over every rank's steps, the same on every rank
            total, steps = distributed.sum_over_ranks(np.array([sum(losses), len(losses)]))
            train_loss = float(total / steps)
            distributed.broadcast_buffers(module)
        else:
            train_loss = float(np.mean(losses))
        if config.lr_schedule == "cosine":
            scheduler.step()  # lr of the next epoch: lr * (1 + cos(pi * epoch / epochs)) / 2
        else:
            scheduler.step(train_loss)
        train_s = time.perf_counter() - t0
        steps_done += len(batches)
        val, _ = validation_metrics(module, val_part_source, data, val_part, device, score_work)
        if val_part is not validate:
            val = distributed.mean_over_ranks(val, len(val_part))
        record = {
            "epoch": epoch,
            "train_loss": round(train_loss, 6),
            "lr": optimizer.param_groups[0]["lr"],
            "steps": len(batches),
            "train_s": round(train_s, 3),
            "validate_s": round(time.perf_counter() - t0 - train_s, 3),
            **({"processes": ctx.world_size} if ctx.distributed else {}),
            **{f"val_{k}": round(v, 6) for k, v in val.items()},
        }
        improved = val["mean_ndcg"] > best["metrics"]["mean_ndcg"]
        record["best"] = improved
        history.append(record)
        if improved:
            best = {"epoch": epoch, "metrics": val, "state": copy.deepcopy(module.state_dict())}
            stale = 0
        else:
            stale += 1
        if out is not None and writes:
            if improved:
                save_checkpoint(
                    out / "best.pt", spec.name, module, config, data.item_ids,
                    {"epoch": epoch, "validation": val, "data_fingerprint": fingerprint,
                     **({"left_out_baskets": left_out} if left_out else {})},
                )
            with open(out / "train_log.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            _save_resume(out / "resume.pt", spec.name, module, optimizer, scheduler, epoch, best,
                         history, config, resume_key)
        if on_epoch is not None and writes:
            on_epoch(record)

    if best["state"] is not None:
        module.load_state_dict(best["state"])
    module.eval()
    addon, choice = None, None
    if best["state"] is not None and wants_addon(config) and writes:
        # The ranking add-on step: any model, from its validation scores.
        _, val_scores = validation_metrics(module, val_source, data, validate, device, score_work)
        addon, choice = choose_addon(config, val_scores, data, pool_train, validate)
    if out is not None and writes and best["state"] is not None and choice is not None:
        # best.pt was written during training; add the add-on choice (and its state, if used).
        save_checkpoint(
            out / "best.pt", spec.name, module, config, data.item_ids,
            {"epoch": best["epoch"], "validation": best["metrics"], "data_fingerprint": fingerprint,
             "addon_choice": choice.as_dict(), **({"left_out_baskets": left_out} if left_out else {})},
            addon=addon,
        )
    if out is not None and writes and warm is not None and (out / "best.pt").is_file():
        add_extras(out / "best.pt", warm_start=warm.as_dict())  # where its weights came from
    return module, addon, TrainResult(
        best_epoch=best["epoch"],
        best_validation=best["metrics"],
        epochs_run=epoch,
        seconds=time.perf_counter() - t_start,
        history=history,
        warm_start=warm,
        addon=choice,
        left_out_baskets=left_out,
    )


def make_scheduler(optimizer: torch.optim.Optimizer, config: TrainOptions):
    """The learning-rate schedule of ``config.lr_schedule``, stepped once per epoch:
    ReduceLROnPlateau on the epoch's training loss (plateau), or cosine annealing from ``lr`` to
    0 over ``config.epochs`` epochs (cosine)."""
    if config.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs)
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=config.lr_patience)


def _save_resume(path: Path, model_name, module, optimizer, scheduler, epoch, best, history, config, fingerprint) -> None:
    with atomic_path(path) as tmp:
        torch.save(
            {
                "model_name": model_name,
                "model": module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "epoch": epoch,
                "best": best,
                "history": history,
                "config": config.model_dump(),
                "fingerprint": fingerprint,
            },
            tmp,
        )


def _load_resume(path: Path, model_name: str, config: TrainOptions, fingerprint: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    # Settings that do not change training: the add-on options only act after it; min_steps
    # (like epochs) only says when to stop. Under the cosine schedule, epochs sets the learning
    # rate of every epoch, so it is part of the run.
    ignored = ("device", "threads", "min_steps", *ADDON_OPTIONS) + (() if config.lr_schedule == "cosine" else ("epochs",))
    # A resume.pt written before an option existed ran with that option's default, or as a
    # checkpoint of its time reads (engine.checkpoint.config_as_trained).
    defaults = {name: field.get_default(call_default_factory=True) for name, field in type(config).model_fields.items()}
    written = {**defaults, **config_as_trained(state["config"], model_name)}
    same_run = {k: v for k, v in written.items() if k not in ignored}
    wanted = {k: v for k, v in config.model_dump().items() if k not in ignored}
    if (
        same_run != wanted
        or state["fingerprint"] != fingerprint
        # resume.pt written before the engine held one model of several: DNNTSP's
        or state.get("model_name", "dnntsp") != model_name
    ):
        return None
    return state


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in history))
