"""A tiny planted-signal data set and a minimal training loop for the sequential models.

The training engine trains these models in the package; this loop only proves, in tests, that
each model learns: the loss falls and it beats a popularity baseline.

Planted signal: 6 groups of 4 items; every customer has a group, and each basket holds 2 items
of it plus 1 item drawn from the whole catalogue. Item popularity is flat, so popularity ranks
at chance (recall@4 about 4/24 of the target), while a model that reads a customer's history
can put the group's items first (recall@4 up to 2/3).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.split import Instances, prefix_instances
from basketgnn.models.spec import ModelSpec
from basketgnn.nn.losses import compute_loss, multi_hot

N_ITEMS, GROUP = 24, 4


def planted_data(n_users: int = 96, seed: int = 0) -> tuple[BasketData, Instances, Instances]:
    """(data, training instances (every prefix), test instances (last basket))."""
    rng = np.random.default_rng(seed)
    sequences = []
    for _ in range(n_users):
        group = rng.integers(N_ITEMS // GROUP) * GROUP
        n = int(rng.integers(3, 8))
        sequences.append(
            [list(group + rng.choice(GROUP, 2, replace=False)) + [int(rng.integers(N_ITEMS))] for _ in range(n)]
        )
    data = from_sequences(sequences, n_items=N_ITEMS)
    users = np.arange(n_users)
    n = data.n_baskets_per_user
    train = users[: n_users * 3 // 4]
    test = users[n_users * 3 // 4 :]
    return data, prefix_instances(Instances(train, n[train] - 1)), Instances(test, n[test] - 1)


def train_briefly(spec: ModelSpec, config, data: BasketData, train: Instances, epochs: int) -> tuple[torch.nn.Module, list[float]]:
    """Adam over shuffled batches; returns the model and the mean loss of every epoch."""
    torch.manual_seed(config.seed)
    model = spec.build(data.n_items, config)
    source = spec.batches(data, train, config, True)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    rng = np.random.default_rng(config.seed)
    losses = []
    for _ in range(epochs):
        model.train()
        total = []
        for idx in np.array_split(rng.permutation(len(source)), max(1, len(source) // config.batch_size)):
            batch = source.collate(idx, with_targets=True)
            scores = model(batch)
            if spec.loss is not None:
                loss = spec.loss(model, batch, scores, config)
            else:
                loss = compute_loss(config.loss, scores, multi_hot(batch.target_items, batch.target_offsets, data.n_items))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total.append(loss.item())
        losses.append(float(np.mean(total)))
    return model, losses


def recall_at(scores: torch.Tensor, target_items: torch.Tensor, target_offsets: torch.Tensor, k: int) -> float:
    """Mean over users of |top-k ∩ target| / |target|."""
    y = multi_hot(target_items, target_offsets, scores.shape[1])
    top = scores.topk(k, dim=1).indices
    return float((y.gather(1, top).sum(1) / y.sum(1)).mean())


def model_vs_popularity(spec: ModelSpec, config, epochs: int, k: int = GROUP) -> tuple[float, float, list[float]]:
    """(model recall@k on test users, popularity recall@k, losses per epoch). Popularity counts
    every basket, test targets included (generous to the baseline)."""
    data, train, test = planted_data()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only contend on a shared CI machine
    try:
        model, losses = train_briefly(spec, config, data, train, epochs)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    batch = spec.batches(data, test, config, True).collate(np.arange(len(test)))
    with torch.no_grad():
        scores = model(batch)
    popularity = torch.from_numpy(np.bincount(data.items, minlength=data.n_items).astype(np.float32))
    pop = recall_at(popularity.expand(len(test), -1), batch.target_items, batch.target_offsets, k)
    return recall_at(scores, batch.target_items, batch.target_offsets, k), pop, losses


# A hand-made tiny batch for the reference comparisons: 3 customers, 4 instances (one customer
# twice, with different history lengths), baskets of 1 to 3 items.
SEQUENCES = [[[1, 2], [3], [4, 5, 6], [0, 7]], [[0], [2, 3]], [[5], [5, 6], [1], [2], [3, 4]]]
USERS, N_HISTORY = np.array([0, 1, 2, 2]), np.array([3, 1, 4, 2])
TINY_ITEMS = 8

#: SASRec's and BERT4Rec's encoder options, each alone and together, as tests parametrise them.
ENCODER_OPTIONS = {
    "multi-interest": {"interests": 3},
    "hierarchical": {"basket_encoder": "attention"},
    "both": {"interests": 2, "basket_encoder": "attention"},
}


def tiny_batch(spec: ModelSpec, config):
    """The tiny data's instances as one batch, with targets."""
    data = from_sequences(SEQUENCES, n_items=TINY_ITEMS)
    return spec.batches(data, Instances(USERS, N_HISTORY), config, True).collate(np.arange(len(USERS)))


def histories(max_len: int) -> list[list[list[int]]]:
    """Each tiny instance's history as the reference reads it: its last max_len baskets."""
    return [[sorted(b) for b in SEQUENCES[u][:h]][-max_len:] for u, h in zip(USERS, N_HISTORY)]


def assert_matches_reference(model: torch.nn.Module, batch, max_len: int, reference) -> None:
    """``model(batch)`` equals ``reference(history)`` row by row, and so do the gradients of
    every parameter under a random linear function of the scores (float64, tight tolerance)."""
    weights = torch.randn(len(USERS), TINY_ITEMS, dtype=torch.float64)
    scores = model(batch)
    (scores * weights).sum().backward()
    fast = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = 0
    for row, history in enumerate(histories(max_len)):
        ref = reference(history)
        torch.testing.assert_close(scores[row], ref, rtol=1e-10, atol=1e-10)
        total = total + (ref * weights[row]).sum()
    total.backward()
    for g, p in zip(fast, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-11)


def with_padding(batch):
    """The same batch with 2 more padding steps and 3 more padding slots per basket."""
    return replace(
        batch, items=F.pad(batch.items, (0, 3, 0, 2)), basket_mask=F.pad(batch.basket_mask, (0, 2))
    )
