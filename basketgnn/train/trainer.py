"""The DNNTSP training loop (MODEL.md §4), with early stopping and crash-safe resume.

Each epoch: batches of users with similar history length (little padding) in a seeded random
order; Adam; ReduceLROnPlateau on the mean training loss; mean validation NDCG over
K in {10, 20, 30, 40} decides the best checkpoint and early stopping.

Files in ``out_dir``:
    best.pt            the best checkpoint (weights, config, item ids, validation metrics)
    resume.pt          state after the last finished epoch (model, optimiser, scheduler, best)
    train_log.jsonl    one JSON object per finished epoch

Randomness is derived from (seed, epoch) at the start of every epoch, so an interrupted run
resumed from ``resume.pt`` follows exactly the same path as an uninterrupted one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances, prefix_instances
from basketgnn.evaluate import usable_ks
from basketgnn.graph.cooccurrence import UserGraphs, build_user_graphs
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.metrics import KS, ranking_metrics, top_k
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig
from basketgnn.models.neighbours import NeighbourPool, NeighbourScores, fuse_neighbours
from basketgnn.scoring.fusion import choose_fusion, fusion_choice
from basketgnn.train.checkpoint import save_checkpoint
from basketgnn.train.losses import compute_loss, multi_hot


@dataclass
class TrainResult:
    best_epoch: int
    best_validation: dict[str, float]
    epochs_run: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    neighbours: dict[str, Any] | None = None  # see choose_neighbours


def setup_torch(config: DNNTSPConfig) -> torch.device:
    """Threads and float behaviour for training and scoring; returns the device."""
    if config.threads:
        torch.set_num_threads(config.threads)
    # Denormal floats (tiny gradients of saturated sigmoids) are ~40x slower on x86 CPUs.
    torch.set_flush_denormal(True)
    return torch.device(config.device)


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Split indices into batches of similar ``lengths``, in random order when ``rng`` is given.

    Sorting by (length, random key) keeps padding small while still mixing users between epochs.
    """
    tie = rng.random(len(lengths)) if rng is not None else np.arange(len(lengths))
    order = np.lexsort((tie, lengths))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@torch.no_grad()
def score_graphs(
    model: DNNTSP, graphs: UserGraphs, device: torch.device, batch_size: int = 256
) -> np.ndarray:
    """The model's scores of every item for every instance of ``graphs`` (logits; the ranking
    with neighbour scores is made from them by ``models.neighbours.fuse_neighbours``).

    Shapes: -> [len(graphs), I] float32.
    """
    model.eval()
    out = np.zeros((len(graphs), model.num_items), dtype=np.float32)
    for idx in length_batches(graphs.n_history, batch_size, None):
        batch = graphs.collate(idx, with_targets=False).to(device)
        out[idx] = model(batch).float().cpu().numpy()
    return out


def validation_metrics(
    model: DNNTSP, graphs: UserGraphs, device: torch.device
) -> dict[str, float]:
    """Ranking metrics of the model's own scores on ``graphs`` plus ``mean_ndcg`` (the
    model-selection criterion)."""
    scores = score_graphs(model, graphs, device)
    assert graphs.target_items is not None and graphs.target_offsets is not None
    ks = usable_ks(KS, model.num_items)
    m = ranking_metrics(
        top_k(scores, max(ks)), graphs.target_items, graphs.target_offsets, model.num_items, ks=ks
    )
    m["mean_ndcg"] = float(np.mean([m[f"ndcg@{k}"] for k in ks]))
    return m


def data_fingerprint(data: BasketData, *instance_sets: Instances) -> str:
    """A short hash of the data and instances, so a resume never mixes two datasets."""
    h = hashlib.sha256()
    for arr in (data.items, data.basket_offsets, data.user_offsets):
        h.update(np.ascontiguousarray(arr).tobytes())
    for inst in instance_sets:
        h.update(inst.users.tobytes())
        h.update(inst.n_history.tobytes())
    return h.hexdigest()[:16]


def train_dnntsp(
    data: BasketData,
    train: Instances,
    validate: Instances,
    config: DNNTSPConfig,
    out_dir: str | Path | None = None,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[DNNTSP, TrainResult]:
    """Train DNNTSP; returns the best model (by validation mean NDCG) and a summary.

    With ``out_dir``, writes best.pt / resume.pt / train_log.jsonl there and resumes from
    resume.pt when it exists for the same config and data.
    """
    t_start = time.perf_counter()
    device = setup_torch(config)
    torch.manual_seed(config.seed)
    model = DNNTSP.from_config(data.n_items, config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", patience=config.lr_patience
    )
    pool_train = train  # the neighbour pool: one row per training customer, never prefixes
    if config.train_prefixes:
        train = prefix_instances(train)
    train_graphs = build_user_graphs(data, train)
    val_graphs = build_user_graphs(data, validate)
    fingerprint = data_fingerprint(data, train, validate)

    out = Path(out_dir) if out_dir is not None else None
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"epoch": 0, "metrics": {"mean_ndcg": -1.0}, "state": None}
    start_epoch = 1
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        resumed = _load_resume(out / "resume.pt", config, fingerprint)
        if resumed is None:
            # A different run: start its log and checkpoints afresh, never mixed with the old.
            for stale_file in ("train_log.jsonl", "best.pt", "resume.pt"):
                (out / stale_file).unlink(missing_ok=True)
        else:
            model.load_state_dict(resumed["model"])
            optimizer.load_state_dict(resumed["optimizer"])
            scheduler.load_state_dict(resumed["scheduler"])
            best = resumed["best"]
            history = resumed["history"]
            start_epoch = resumed["epoch"] + 1
            # The log may hold epochs finished after the resume state was written: drop them.
            _write_log(out / "train_log.jsonl", history)

    stale = start_epoch - 1 - best["epoch"]
    epoch = start_epoch - 1
    for epoch in range(start_epoch, config.epochs + 1):
        if stale >= config.patience:
            epoch -= 1
            break
        t0 = time.perf_counter()
        rng = np.random.default_rng([config.seed, epoch])
        torch.manual_seed(config.seed * 100_003 + epoch)
        model.train()
        losses = []
        batches = length_batches(train_graphs.n_history, config.batch_size, rng)
        bar = tqdm(batches, desc=f"epoch {epoch}", leave=False, disable=not progress, unit="batch")
        for idx in bar:
            batch = train_graphs.collate(idx).to(device)
            if float(batch.row_weight.sum()) < 2:
                # Train-mode BatchNorm needs two rows; a lone one-item, one-basket user teaches
                # nothing the other batches do not.
                continue
            scores = model(batch)  # [B, I]
            assert batch.target_items is not None and batch.target_offsets is not None
            y = multi_hot(batch.target_items, batch.target_offsets, data.n_items)
            loss = compute_loss(config.loss, scores, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{np.mean(losses):.4f}")
        train_loss = float(np.mean(losses))
        scheduler.step(train_loss)
        train_s = time.perf_counter() - t0
        val = validation_metrics(model, val_graphs, device)
        record = {
            "epoch": epoch,
            "train_loss": round(train_loss, 6),
            "lr": optimizer.param_groups[0]["lr"],
            "train_s": round(train_s, 3),
            "validate_s": round(time.perf_counter() - t0 - train_s, 3),
            **{f"val_{k}": round(v, 6) for k, v in val.items()},
        }
        improved = val["mean_ndcg"] > best["metrics"]["mean_ndcg"]
        record["best"] = improved
        history.append(record)
        if improved:
            best = {"epoch": epoch, "metrics": val, "state": copy.deepcopy(model.state_dict())}
            stale = 0
        else:
            stale += 1
        if out is not None:
            if improved:
                save_checkpoint(
                    out / "best.pt", model, config, data.item_ids,
                    {"epoch": epoch, "validation": val, "data_fingerprint": fingerprint},
                )
            with open(out / "train_log.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            _save_resume(out / "resume.pt", model, optimizer, scheduler, epoch, best, history,
                         config, fingerprint)
        if on_epoch is not None:
            on_epoch(record)

    if best["state"] is not None:
        model.load_state_dict(best["state"])
    model.eval()
    choice = choose_neighbours(model, data, pool_train, validate, val_graphs, config, device)
    if out is not None and best["state"] is not None and choice is not None:
        # best.pt was written during training; add the neighbour choice (and pool, if used).
        save_checkpoint(
            out / "best.pt", model, config, data.item_ids,
            {"epoch": best["epoch"], "validation": best["metrics"], "data_fingerprint": fingerprint,
             "neighbour_choice": choice},
        )
    return model, TrainResult(
        best_epoch=best["epoch"],
        best_validation=best["metrics"],
        epochs_run=epoch,
        seconds=time.perf_counter() - t_start,
        history=history,
        neighbours=choice,
    )


#: Weights and neighbour counts tried when DNNTSPConfig asks for "auto".
NEIGHBOUR_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
NEIGHBOUR_KS: tuple[int, ...] = (100, 300)
_FUSE_CHUNK = 2048  # validation rows fused at a time (memory: chunk x I float64)
#: The validation metrics whose mean picks the weight (at the usable cut-offs among 10, 20).
NEIGHBOUR_CRITERION: tuple[str, ...] = ("recall", "ndcg", "phr")


def choose_neighbours(
    model: DNNTSP,
    data: BasketData,
    train: Instances,
    validate: Instances,
    val_graphs: UserGraphs,
    config: DNNTSPConfig,
    device: torch.device,
) -> dict[str, Any] | None:
    """Pick the neighbour weight and k on the validation customers (models.neighbours); with
    ``fusion: tifu`` (the default) the fusion with TIFU-KNN (scoring.fusion.choose_fusion),
    kept on ``model.fusion`` and summarised by ``scoring.fusion.fusion_choice``.

    Every (k, weight) of the grid re-ranks the trained model's validation scores; the winner
    has the best mean of recall, NDCG and PHR at 10 and 20 (ties: the smaller weight, then
    the smaller k). Sets ``model.neighbour_pool`` and ``model.neighbour_weight`` when the
    winning weight is above 0. Returns the choice and every grid point's criterion, or None
    when neighbours are switched off (neighbour_weight: 0).
    """
    if config.fusion == "off" or (config.fusion == "neighbours" and config.neighbour_weight == 0):
        return None
    if config.fusion == "tifu":
        # Fusion with TIFU-KNN's whole score (scoring.fusion), chosen on validation.
        fusion = choose_fusion(
            score_graphs(model, val_graphs, device), data, train, validate, chunk=_FUSE_CHUNK
        )
        model.fusion = fusion
        return fusion_choice(fusion)
    weights = NEIGHBOUR_WEIGHTS if config.neighbour_weight == "auto" else (float(config.neighbour_weight),)
    ks_nbr = NEIGHBOUR_KS if config.neighbour_k == "auto" else (int(config.neighbour_k),)
    logits = score_graphs(model, val_graphs, device)  # [n_val, I]
    targets = data.targets(validate.users, validate.n_history)
    cuts = usable_ks((10, 20), data.n_items)

    def criterion(neighbours: NeighbourScores, w: float) -> float:
        # Fused scores are made chunk by chunk: [chunk, I] float64, never [n_val, I].
        ranked = np.empty((len(logits), max(cuts)), dtype=np.int64)
        for start in range(0, len(logits), _FUSE_CHUNK):
            stop = min(start + _FUSE_CHUNK, len(logits))
            scores = logits[start:stop]
            if w > 0:
                scores = fuse_neighbours(scores, neighbours.rows(start, stop), w)
            ranked[start:stop] = top_k(scores, max(cuts))
        m = ranking_metrics(ranked, targets.values, targets.offsets, data.n_items, ks=cuts)
        return float(np.mean([m[f"{name}@{k}"] for name in NEIGHBOUR_CRITERION for k in cuts]))

    pool = NeighbourPool.build(data, train, k=max(ks_nbr), top=config.neighbour_top)
    by_k = pool.scores_by_k(data, validate, ks_nbr)  # one search for every k
    grid = [
        {"k": k, "weight": w, "validation_criterion": round(criterion(by_k[k], w), 6)}
        for k in ks_nbr
        for w in weights
    ]
    best = max(grid, key=lambda g: (g["validation_criterion"], -g["weight"], -g["k"]))
    if best["weight"] > 0:
        model.neighbour_pool = pool.with_k(best["k"])
        model.neighbour_weight = best["weight"]
    # With weight 0 the neighbours are not used, so no k was chosen.
    return {"k": best["k"] if best["weight"] > 0 else None, "weight": best["weight"], "grid": grid}


def _save_resume(path: Path, model, optimizer, scheduler, epoch, best, history, config, fingerprint) -> None:
    with atomic_path(path) as tmp:
        torch.save(
            {
                "model": model.state_dict(),
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


def _load_resume(path: Path, config: DNNTSPConfig, fingerprint: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    # Settings that do not change training: the neighbour options only act after it.
    ignored = ("device", "threads", "epochs", "fusion", "neighbour_weight", "neighbour_k", "neighbour_top")
    same_run = {k: v for k, v in state["config"].items() if k not in ignored}
    wanted = {k: v for k, v in config.model_dump().items() if k not in ignored}
    if same_run != wanted or state["fingerprint"] != fingerprint:
        return None
    return state


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in history))
