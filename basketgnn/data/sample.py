"""A capped, seeded sample of customers to train on (the nightly mode), while every customer is
still scored.

The sample is drawn by customer *id*, not by row: each id gets a key, a keyed hash of (seed,
id), and the ``n`` customers with the smallest keys are the sample. So the same log and seed
give the same sample on a rerun, and a customer sampled yesterday is sampled today as long as
the log has not grown by more new customers with smaller keys (a growing log keeps most of
yesterday's sample: what a warm-started model saw before).

The split is made first on every customer; the sample then keeps the training and validation
instances of sampled customers only, so the validation customers are drawn from the sample's
split (early stopping and the fusion's choice see no customer outside it). The test part is
left whole: the held-out customers are everyone's, and recommendations cover everyone.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances, Split
from basketgnn.errors import UserError

#: The split parts the sample restricts (the test part stays whole).
SAMPLED_PARTS = ("train", "validate")
#: Customer ids hashed per block (their Python strings exist a block at a time).
_BLOCK = 1 << 20


@dataclass(frozen=True)
class CustomerSample:
    """What was sampled: ``sampled`` of ``customers`` customers with ``seed``, and the training
    and validation instances left (``*_before``: without the sample)."""

    seed: int
    requested: int
    customers: int
    sampled: int
    train: int
    validate: int
    train_before: int
    validate_before: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"training on a sample of {self.sampled:,} of {self.customers:,} customers (seed "
            f"{self.seed}): {self.train:,} training and {self.validate:,} validation customers "
            f"(of {self.train_before:,} and {self.validate_before:,} without the sample)"
        )


def customer_keys(customer_ids: np.ndarray, seed: int) -> np.ndarray:
    """A seeded 64-bit key per customer id (SipHash of the id's text, keyed by the seed).

    Shapes: customer_ids [M] -> [M] uint64.
    """
    key = hashlib.sha256(f"basketgnn-sample:{seed}".encode()).hexdigest()[:16]
    ids = np.asarray(customer_ids)
    out = np.empty(len(ids), dtype=np.uint64)
    for start in range(0, len(ids), _BLOCK):  # a block of Python strings at a time
        block = ids[start : start + _BLOCK].astype(str).astype(object)
        out[start : start + len(block)] = pd.util.hash_array(block, hash_key=key, categorize=False)
    return out


def sampled_customers(customer_ids: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Mask of the ``n`` customers with the smallest keys (everyone when ``n`` >= their number).

    Shapes: customer_ids [M] -> [M] bool.
    """
    if n < 1:
        raise UserError(f"sample_customers must be at least 1, got {n}.")
    m = len(customer_ids)
    mask = np.zeros(m, dtype=bool)
    if n >= m:
        mask[:] = True
        return mask
    keys = customer_keys(customer_ids, seed)
    # The n smallest by (key, index): every key below the n-th smallest, then the lowest
    # indices among the keys equal to it (ties of 64-bit keys go to the lower index).
    kth = np.partition(keys, n - 1)[n - 1]
    below = keys < kth
    mask[below] = True
    mask[np.flatnonzero(keys == kth)[: n - int(below.sum())]] = True
    return mask


def sample_split(
    split: Split, data: BasketData, n: int, seed: int = 0, mask: np.ndarray | None = None
) -> tuple[Split, CustomerSample]:
    """``split`` with its training and validation parts restricted to a sample of ``n``
    customers (module docstring); the test part unchanged. ``mask``: the sample's
    :func:`sampled_customers` when already computed.

    Shapes: mask [n_users] bool."""
    if mask is None:
        mask = sampled_customers(data.user_ids, n, seed)
    parts: dict[str, Instances] = {}
    for name, inst in split.parts.items():
        if name in SAMPLED_PARTS:
            keep = mask[inst.users]
            inst = Instances(inst.users[keep], inst.n_history[keep])
        parts[name] = inst
    info = CustomerSample(
        seed=seed,
        requested=n,
        customers=data.n_users,
        sampled=int(mask.sum()),
        train=len(parts["train"]),
        validate=len(parts["validate"]),
        train_before=len(split["train"]),
        validate_before=len(split["validate"]),
    )
    for name in SAMPLED_PARTS:
        if len(parts[name]) == 0:
            raise UserError(
                f"A sample of {info.sampled:,} of {info.customers:,} customers (seed {seed}) "
                f"leaves no {name} customers in the split {split.name}; sample more customers "
                "(sample_customers) or none."
            )
    if info.sampled == info.customers:
        return split, info
    return Split(f"{split.name}, trained on {info.sampled} sampled customers (seed {seed})", parts), info
