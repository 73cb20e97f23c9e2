"""The process group of a distributed (DistributedDataParallel) training run, and the few
collectives the engine needs.

A run is distributed when torchrun (or any launcher setting the same variables) starts it:
``WORLD_SIZE`` > 1, with ``RANK`` and ``LOCAL_RANK``, plus ``MASTER_ADDR`` / ``MASTER_PORT`` for
the rendezvous. The engine opens the group itself (gloo on CPU, NCCL on CUDA, each rank on GPU
``LOCAL_RANK``), so the same command works on one machine or several::

    torchrun --standalone --nproc-per-node 2 -m basketgnn train --data DC.json --out runs/dc
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 \\
        --rdzv-backend c10d --rdzv-endpoint host0:29500 -m basketgnn train ...

Without those variables (or ``WORLD_SIZE`` 1) nothing here touches torch.distributed: a
one-process run is exactly the plain loop.

Every collective below is called by every rank in the same order; a rank that skipped one
would leave the others waiting forever.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run. ``owns_group``: the engine opened the process group
    (and closes it in :func:`finish`); False when a caller opened it, or for one process."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_rank() -> int:
    """This process's rank from the launcher's environment (0 outside torchrun), readable
    before any process group exists (e.g. to keep every rank but 0 silent)."""
    return int(os.environ.get("RANK", "0"))


def start(device: torch.device) -> tuple[DistContext, torch.device]:
    """Join the run's process group, opening it when the environment asks for one.

    Returns the context and the device this rank trains on: for CUDA, GPU ``LOCAL_RANK`` (one
    GPU per process); otherwise ``device`` unchanged.
    """
    if dist.is_available() and dist.is_initialized():  # opened by the caller (e.g. a test)
        ctx = DistContext(dist.get_world_size(), dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0")))
    else:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            return DistContext(), device
        if not dist.is_available():
            raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        ctx = DistContext(dist.get_world_size(), dist.get_rank(), local_rank, owns_group=True)
    if device.type == "cuda" and ctx.distributed:
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
    return ctx, device


def finish(ctx: DistContext, clean: bool = True) -> None:
    """Close the process group if the engine opened it.

    After a clean run every rank first meets at a barrier and then sleeps briefly, the GIL
    released: gloo's worker threads free the tensors of finished collectives, and freeing one
    that has a Python object needs the GIL. In torch 2.2 the group's destructor joins those
    threads while holding the GIL, so destroying it while a worker still waits for the GIL
    deadlocks (seen in a 2-process test). ``clean=False`` (an error is propagating, other ranks
    may never arrive) skips the barrier.
    """
    if ctx.owns_group and dist.is_initialized():
        if clean:
            dist.barrier()
            time.sleep(0.1)
        dist.destroy_process_group()


def _collective_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_over_ranks(values: np.ndarray) -> np.ndarray:
    """Element-wise sum of ``values`` over all ranks (float64); the same array on every rank.

    Shapes: [n] -> [n].
    """
    t = torch.as_tensor(np.asarray(values, dtype=np.float64), device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().numpy()


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on at least one."""
    t = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` (any picklable object) on every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def broadcast_buffers(module: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s buffers (e.g. BatchNorm running statistics) to every rank.

    DDP broadcasts them at the start of each forward, so after an epoch's last step every
    rank holds its own update; this makes the module identical on every rank again.
    """
    for buf in module.buffers():
        dist.broadcast(buf.data, src=src)


def mean_over_ranks(metrics: dict[str, float], n: int) -> dict[str, float]:
    """Weighted mean of per-rank means: each rank's ``metrics`` averaged over its ``n``
    instances; returns the mean over all instances of all ranks, the same on every rank."""
    keys = sorted(metrics)
    sums = sum_over_ranks(np.array([n] + [metrics[k] * n for k in keys]))
    return {k: float(s / sums[0]) for k, s in zip(keys, sums[1:])}
