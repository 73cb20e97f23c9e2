"""Dense, obviously-correct references of the sequential models (SASRec, BERT4Rec, DIN).

One user at a time, one step at a time, written from the papers' formulas with plain tensor ops
(no SDPA, no nn.LayerNorm, no batching, no padding: a user's sequence is only its real steps).
They read the weights of the fast modules, so outputs and gradients can be compared exactly.
"""

from __future__ import annotations

import math

import torch

from basketgnn.nn.dice import Dice, PReLU
from basketgnn.nn.target_attention import TargetAttention
from basketgnn.nn.transformer_block import TransformerBlock


def linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    return x @ layer.weight.T + layer.bias


def layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def self_attention(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    """Multi-head self-attention of one user's real steps x [T, d] -> [T, d], step by step."""
    att = block.attention
    T, d = x.shape
    q, k, v = linear(x, att.qkv).split(d, dim=-1)  # [T, d] each
    outputs = []
    for t in range(T):
        keys = range(t + 1) if block.causal else range(T)
        heads = []
        for j in range(att.heads):
            cols = slice(j * att.d_head, (j + 1) * att.d_head)
            logits = torch.stack([q[t, cols] @ k[s, cols] for s in keys]) / math.sqrt(att.d_head)
            w = torch.exp(logits - logits.max())
            w = w / w.sum()
            heads.append(sum(w[n] * v[s, cols] for n, s in enumerate(keys)))
        outputs.append(torch.cat(heads))
    return linear(torch.stack(outputs), att.out)


def feed_forward(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    hidden = linear(x, block.ffn[0])
    hidden = torch.relu(hidden) if isinstance(block.ffn[1], torch.nn.ReLU) else gelu(hidden)
    return linear(hidden, block.ffn[2])


def transformer_block(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    """One block (no dropout) on one user's real steps x [T, d]."""
    if block.norm_first:
        y = x + self_attention(block, layer_norm(x, block.norm1))
        return y + feed_forward(block, layer_norm(y, block.norm2))
    y = layer_norm(x + self_attention(block, x), block.norm1)
    return layer_norm(y + feed_forward(block, y), block.norm2)


def basket_mean(embedding: torch.Tensor, basket: list[int]) -> torch.Tensor:
    """Mean of the embedding rows of a basket's catalogue items (rows are item + 1)."""
    return torch.stack([embedding[i + 1] for i in basket]).mean(dim=0)


def activation(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """PReLU: s or α s; Dice in eval mode: p s + (1 - p) α s, p = sigmoid(normalised s)."""
    if isinstance(layer, PReLU):
        return torch.where(x > 0, x, layer.alpha * x)
    assert isinstance(layer, Dice) and not layer.training
    p = torch.sigmoid((x - layer.running_mean) / torch.sqrt(layer.running_var + layer.eps))
    return p * x + (1 - p) * layer.alpha * x


def mlp(layers: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = linear(x, layer) if isinstance(layer, torch.nn.Linear) else activation(layer, x)
    return x


def target_attention(unit: TargetAttention, history: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DIN's activation unit for one user and one target: history [T, d] (real steps), target [d]
    -> (Σ_j a_j h_j [d], a [T])."""
    a = torch.stack([mlp(unit.unit, torch.cat([h, target, h - target, h * target]))[0] for h in history])
    return sum(a[j] * history[j] for j in range(len(history))), a


def basket_vector(model, basket: list[int]) -> torch.Tensor:
    """A basket's vector: the mean of its item embeddings, or (the hierarchical encoder) one
    Transformer block among its items, then the mean of their outputs."""
    E = model.items.weight
    if not hasattr(model.pool, "block"):
        return basket_mean(E, basket)
    inside = transformer_block(model.pool.block, torch.stack([E[i + 1] for i in basket]))  # [|S|, d]
    return inside.mean(dim=0)


def interest_vectors(readout, states: torch.Tensor, t: int, keys: list[int]) -> torch.Tensor:
    """The K interest vectors of step t reading the states ``keys`` -> [K, d], one by one:
    softmax over s of (q_k + F_t) · (W_K F_s + b_K) / sqrt(d), then Σ_s a_s (W_V F_s + b_V)."""
    d = states.shape[1]
    out = []
    for k in range(readout.interests):
        query = readout.queries[k] + states[t]
        logits = torch.stack([query @ linear(states[s], readout.key) for s in keys]) / math.sqrt(d)
        w = torch.exp(logits - logits.max())
        w = w / w.sum()
        out.append(sum(w[n] * linear(states[s], readout.value) for n, s in enumerate(keys)))
    return torch.stack(out)


def best_interest(vectors: torch.Tensor, item_vector: torch.Tensor) -> torch.Tensor:
    """max_k vectors[k] · item_vector, one interest at a time."""
    return torch.stack([v @ item_vector for v in vectors]).max()


def sasrec_states(model, baskets: list[list[int]]) -> torch.Tensor:
    """SASRec (no dropout): every state F_t [T, d] of one user's history baskets."""
    x = torch.stack([basket_vector(model, b) + model.positions.weight[t] for t, b in enumerate(baskets)])
    for block in model.blocks:
        x = transformer_block(block, x)
    return layer_norm(x, model.norm)


def sasrec_step_scorer(model, states: torch.Tensor, t: int):
    """Step t's score of one item (E row ``item + 1``): F_t · E, or the best of the K interests
    read causally from F_{<= t}."""
    E = model.items.weight
    if model.readout is None:
        return lambda item: states[t] @ E[item + 1]
    vectors = interest_vectors(model.readout, states, t, list(range(t + 1)))
    return lambda item: best_interest(vectors, E[item + 1])


def sasrec_scores(model, baskets: list[list[int]]) -> torch.Tensor:
    """SASRec (no dropout) for one user's history baskets -> scores [I] (and every state [T, d])."""
    states = sasrec_states(model, baskets)
    score = sasrec_step_scorer(model, states, len(baskets) - 1)
    return torch.stack([score(i) for i in range(model.n_items)]), states


def sasrec_bce_terms(model, baskets: list[list[int]], target: list[int], negatives: list[int]) -> list[torch.Tensor]:
    """SASRec's sampled BCE loss term of every step of one user, given each step's negative
    (catalogue index): -mean_{i ∈ o_t} log σ(r_{t,i}) - log(1 - σ(r_{t,j_t})), o_t the next basket."""
    states = sasrec_states(model, baskets)
    terms = []
    for t in range(len(baskets)):
        score = sasrec_step_scorer(model, states, t)
        expected = baskets[t + 1] if t + 1 < len(baskets) else target
        positive = torch.stack([torch.log(torch.sigmoid(score(i))) for i in expected]).mean()
        terms.append(-positive - torch.log(1 - torch.sigmoid(score(negatives[t]))))
    return terms


def bert4rec_logits(model, baskets: list[list[int]], masked: list[bool]) -> torch.Tensor:
    """BERT4Rec (no dropout) for one user's steps (history baskets, then [] for the appended
    step); ``masked[t]`` replaces step t by the mask vector -> logits of every step [T, I]."""
    E = model.items.weight
    steps = [
        (model.mask_vector if m else basket_vector(model, b)) + model.positions.weight[t]
        for t, (b, m) in enumerate(zip(baskets, masked))
    ]
    x = layer_norm(torch.stack(steps), model.input_norm)
    for block in model.blocks:
        x = transformer_block(block, x)
    if model.readout is None:
        return gelu(linear(x, model.head)) @ E[1:].T + model.item_bias
    rows = []
    for t in range(len(steps)):
        vectors = gelu(linear(interest_vectors(model.readout, x, t, list(range(len(steps)))), model.head))
        rows.append(torch.stack([best_interest(vectors, E[i + 1]) for i in range(model.n_items)]))
    return torch.stack(rows) + model.item_bias


def din_scores(model, baskets: list[list[int]]) -> torch.Tensor:
    """DIN (eval mode) for one user's history baskets -> scores [I], item by item."""
    E = model.items.weight
    if model.history_kind == "baskets":
        history = torch.stack([basket_mean(E, b) for b in baskets])
    else:
        history = torch.stack([E[i + 1] for b in baskets for i in b])
    scores = []
    for i in range(model.n_items):
        pooled, _ = target_attention(model.attention, history, E[i + 1])
        scores.append(mlp(model.scorer, torch.cat([pooled, E[i + 1]]))[0])
    return torch.stack(scores)
