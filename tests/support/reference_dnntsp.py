"""A dense, loop-based reference of DNNTSP, written straight from ``/work/shared/MODEL.md``.

Speed does not matter here: every user is handled on its own with its own T (no padding
anywhere), every timestamp gets a dense N x N weight matrix, and attention loops over nodes and
heads with an explicit causal mask. Only the parameters are borrowed from a fast
:class:`~basketgnn.models.dnntsp.DNNTSP` instance, so both can be compared value for value and
gradient for gradient.

Default configuration (MODEL.md):

1. nodes V_u = distinct items of the history; c(i, j) = #baskets holding both (i != j),
   c(i, i) = 1, w = c / max c; A_t[i, j] = w(i, j) if i != j and both in S_t, A_t[i, i] = w(i, i)
   for every node and every t. Layer: h_j^t = Lin(sum_i A_t[i, j] x_i^t), then BatchNorm over
   the feature dimension, then ReLU; input x_i^t = E[i] at every t.
2. per node, per head: softmax(Q K^T / sqrt(d_head), t' <= t) V, heads concatenated;
   a_t = Z_t . w_agg (no softmax), z = sum_{t < T_u} a_t Z_t.
3. e_hat_i = (1 - alpha_i) E_i + alpha_i z_i for i in V_u, else E_i; y_i = w_o . e_hat_i + b_o.

Switches (their meaning taken from the fast model): gcn off -> C_i^t = E_i if i in S_t else 0;
attention off -> z = mean of C over the real timestamps; aggregation "last" -> z = Z_{T_u - 1};
gate "fixed" -> alpha = 0.5, "off" -> alpha = 1; head_merge "mean" -> d_head = d and the head
outputs are averaged.

BatchNorm in training mode normalises with the statistics (mean, biased variance) of all real
node-timestamps of all users of the batch, so every user's pre-norm output of a layer is
computed before any of them is normalised. In eval mode the running statistics are used.
"""

from __future__ import annotations

import math

import torch

from basketgnn.models.dnntsp import DNNTSP


def _user_graph(
    history: list[list[int]], weight_dtype: torch.dtype
) -> tuple[list[int], list[set[int]], torch.Tensor]:
    """Nodes (sorted items), baskets as sets, and the weights w = c / max c [N, N] (computed in
    float64, rounded through ``weight_dtype``, returned as float64)."""
    baskets = [set(int(i) for i in b) for b in history]
    assert baskets and all(baskets), (
        "the reference expects non-empty histories of non-empty baskets"
    )
    nodes = sorted(set().union(*baskets))
    c = torch.tensor(
        [
            [1.0 if a == b else sum(1.0 for s in baskets if a in s and b in s) for b in nodes]
            for a in nodes
        ],
        dtype=torch.float64,
    )  # [N, N]
    return nodes, baskets, (c / c.max()).to(weight_dtype).double()


def _adjacency(nodes: list[int], basket: set[int], w: torch.Tensor) -> torch.Tensor:
    """Dense A_t [N, N]: co-occurrence edges inside the basket plus a self-loop on every node."""
    keep = torch.tensor(
        [
            [a == b or (i in basket and j in basket) for b, j in enumerate(nodes)]
            for a, i in enumerate(nodes)
        ]
    )  # [N, N] bool
    return torch.where(keep, w, torch.zeros_like(w))


def _batch_norm(x: torch.Tensor, norm: torch.nn.BatchNorm1d) -> torch.Tensor:
    """BatchNorm1d by hand over rows of x (all real node-timestamps of the batch)."""
    if norm.training:
        mean = x.mean(dim=0)
        var = ((x - mean) ** 2).mean(dim=0)  # biased, as BatchNorm normalises
    else:
        assert norm.running_mean is not None and norm.running_var is not None
        mean, var = norm.running_mean, norm.running_var
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _attention(C: torch.Tensor, model: DNNTSP) -> torch.Tensor:
    """Causal multi-head self-attention of one node's sequence C [T, d] -> Z [T, d]."""
    att = model.attention
    assert att is not None
    H, dh = att.heads, att.d_head
    W = att.qkv.weight  # [3 * H * dh, d]: rows q (head 0 .. H-1), then k, then v
    T = C.shape[0]
    allowed = torch.tensor([[tp <= t for tp in range(T)] for t in range(T)])  # [T, T'] t' <= t
    outs = []
    for h in range(H):
        Wq = W[0 * H * dh + h * dh : 0 * H * dh + (h + 1) * dh]  # [dh, d]
        Wk = W[1 * H * dh + h * dh : 1 * H * dh + (h + 1) * dh]
        Wv = W[2 * H * dh + h * dh : 2 * H * dh + (h + 1) * dh]
        Q, K, V = C @ Wq.T, C @ Wk.T, C @ Wv.T  # each [T, dh]
        logits = (Q @ K.T / math.sqrt(dh)).masked_fill(~allowed, -math.inf)  # [T, T']
        outs.append(torch.softmax(logits, dim=1) @ V)  # [T, dh]
    if att.merge == "mean":
        return torch.stack(outs).mean(dim=0)  # [T, d]
    return torch.cat(outs, dim=1)  # [T, H * dh]


def reference_scores(
    model: DNNTSP,
    histories: list[list[list[int]]],
    weight_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Scores [B, num_items] of the users whose histories (baskets of item ids) are given.

    Uses ``model``'s parameters and its train / eval mode (for BatchNorm). Dropout must be 0.
    ``weight_dtype``: precision in which the edge weights c / max c are stored. The exact value
    is float64; pass float32 to mirror a graph that stores them as float32, which makes a float64
    comparison exact to rounding error.
    """
    E = model.embedding.weight  # [num_items, d]
    num_items = E.shape[0]
    graphs = [_user_graph(h, weight_dtype) for h in histories]

    # Step 1: C[u] is a list over t of [N_u, d].
    x = [[E[nodes] for _ in baskets] for nodes, baskets, _ in graphs]
    if model.presence is not None:  # beyond the paper: + p where the item is in the basket
        x = [
            [
                E[nodes] + torch.tensor([float(i in s) for i in nodes], dtype=E.dtype)[:, None]
                * model.presence
                for s in baskets
            ]
            for nodes, baskets, _ in graphs
        ]
    if model.gcn is not None:
        A = [[_adjacency(nodes, s, w).to(E.dtype) for s in baskets] for nodes, baskets, w in graphs]
        for layer in model.gcn.layers:
            assert layer.dropout.p == 0.0
            lin_w, lin_b = layer.linear.weight, layer.linear.bias
            pre = [
                [(A[u][t].T @ x[u][t]) @ lin_w.T + lin_b for t in range(len(x[u]))]
                for u in range(len(x))
            ]
            # Normalise all users' node-timestamps jointly, then cut back per user / timestamp.
            flat = torch.cat([p for user in pre for p in user])
            normed = torch.relu(_batch_norm(flat, layer.norm))
            out, k = [], 0
            for user in pre:
                out.append([])
                for p in user:
                    out[-1].append(normed[k : k + len(p)])
                    k += len(p)
            x = out
    else:
        x = [
            [
                torch.stack(
                    [x[u][t][n] if i in s else torch.zeros_like(E[i]) for n, i in enumerate(nodes)]
                )
                for t, s in enumerate(baskets)
            ]
            for u, (nodes, baskets, _) in enumerate(graphs)
        ]

    rows = []
    z_all = []
    for u, (nodes, _, _) in enumerate(graphs):
        C = torch.stack(x[u], dim=1)  # [N, T, d]
        z_of = {}
        for n, item in enumerate(nodes):
            if model.attention is None:
                z_of[item] = C[n].mean(dim=0)
                continue
            assert model.attention.dropout == 0.0
            Z = _attention(C[n], model)  # [T, d]
            if model.aggregate.mode == "last":
                z_of[item] = Z[-1]
            else:
                assert model.aggregate.mode == "learned" and model.aggregate.w_agg is not None
                w_agg = model.aggregate.w_agg
                z_of[item] = sum(torch.dot(Z[t], w_agg) * Z[t] for t in range(Z.shape[0]))

        z_all.append(z_of)
        # Step 3: the full [I, d] updated embedding of this user, then the linear scorer.
        scorer = model.scorer
        e_hat = []
        for i in range(num_items):
            if i in z_of:
                if scorer.gate == "learned":
                    assert scorer.alpha is not None
                    alpha = scorer.alpha[i]
                else:
                    alpha = E.new_tensor(0.5 if scorer.gate == "fixed" else 1.0)
                e_hat.append((1 - alpha) * E[i] + alpha * z_of[i])
            else:
                e_hat.append(E[i])
        rows.append(torch.stack(e_hat))  # [I, d]
    e_hat_all = torch.stack(rows)  # [B, num_items, d]
    w_o, b_o = model.scorer.out.weight.squeeze(0), model.scorer.out.bias
    scores = e_hat_all @ w_o + b_o  # [B, I]
    if model.scorer.repeat is not None:  # beyond the paper: + v . phi on the user's own items
        extra = torch.zeros_like(scores)
        for u, (nodes, baskets, _) in enumerate(graphs):
            T = len(baskets)
            for i in nodes:
                times = [t for t, s in enumerate(baskets) if i in s]
                gap = T - 1 - max(times)
                phi = [math.log(1 + len(times)), len(times) / T, 1 / (1 + gap), float(gap == 0)]
                # membership flags: bought j baskets before the target, j = 0 .. K - 1
                phi += [float(T - 1 - j >= 0 and i in baskets[T - 1 - j]) for j in range(model.scorer.membership_steps)]
                extra[u, i] = torch.tensor(phi, dtype=scores.dtype) @ model.scorer.repeat
        scores = scores + extra
    if model.scorer.context is not None:  # beyond the paper: + E_i . (W_c mean_i z_{u,i})
        for u, z_of in enumerate(z_all):
            h = torch.stack(list(z_of.values())).mean(dim=0)
            scores[u] = scores[u] + E @ (h @ model.scorer.context)
    return scores
