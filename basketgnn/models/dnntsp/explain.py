"""Which past baskets DNNTSP's temporal attention weights most for each item of a history.

For a user-node (customer u, item i) with the GCN's rows gathered into its sequence C [T, d]
(T = the baskets the model reads), the layer computes per head h

    A_h = softmax(Q_h K_hᵀ / sqrt(d_head) + causal mask)           [T (query), T (key)]
    Z   = merge_h(A_h V_h),   a_t = Z_t · w_agg  (t < T),   z = Σ_t a_t Z_t

so z = merge_h Σ_{t'} c_{h,t'} V_{h,t'} with c_{h,t'} = Σ_t a_t A_{h,t,t'}: basket t' enters
the item's vector with weight c_{h,t'} in head h. The weight of basket t' reported here is
mean_h |c_{h,t'}| divided by its sum over t' (a share; a_t has no softmax and may be negative,
hence the magnitudes). With the "last" readout a_t is 1 at the last basket and 0 elsewhere.

Computed densely ([N, heads, T, T]), which is exact and small for the few customers one asks
about; scoring never calls it.
"""

from __future__ import annotations

import torch

from basketgnn.graph.cooccurrence import GraphBatch
from basketgnn.models.dnntsp.model import DNNTSP
from basketgnn.models.spec import TemporalWeights
from basketgnn.nn.masks import length_mask


def attention_by_basket(
    module: DNNTSP, batch: GraphBatch, rows: torch.Tensor, items: torch.Tensor
) -> TemporalWeights | None:
    """The share of attention per basket of the window (module docstring) of the pairs (batch
    row, item) asked for that are user-nodes (items of the window), or None for a
    configuration without temporal attention.

    Shapes: rows, items [K] -> TemporalWeights(row [N], item [N], length [N], weight [N, T]),
    N <= K.
    """
    attention = module.attention
    if attention is None or module.aggregate.mode not in ("learned", "last") or len(batch.node_item) == 0:
        return None
    n_items = module.num_items
    wanted = rows.to(batch.node_user.device) * n_items + items.to(batch.node_user.device)
    nodes = torch.isin(batch.node_user * n_items + batch.node_item, wanted).nonzero().squeeze(1)  # [N]
    with torch.inference_mode():
        rows = module.row_features(batch)  # [R, d]
        seq = rows.index_select(0, batch.seq_row.index_select(0, nodes).reshape(-1))
        seq = seq.view(len(nodes), batch.seq_row.shape[1], -1)  # [N, T, d]
        q, k, v = attention._split(seq)  # each [N, heads, T, d_head]
        M, H, T, _ = q.shape
        scores = (q @ k.transpose(-1, -2)) * attention.d_head**-0.5  # [N, heads, T (query), T (key)]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        a = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)  # [N, heads, T, T]
        lengths = batch.node_len.index_select(0, nodes)
        if module.aggregate.mode == "last":
            readout = torch.nn.functional.one_hot(lengths - 1, T).to(a.dtype)  # [N, T]
        else:
            z = attention._merge_heads(a @ v)  # [N, T, d]
            readout = (z @ module.aggregate.w_agg) * length_mask(lengths, T).to(z.dtype)  # [N, T]
        c = torch.einsum("mt,mhts->mhs", readout, a).abs().mean(1)  # [N, T (key)]
        c = c * length_mask(lengths, T).to(c.dtype)
        weight = c / c.sum(1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)
    return TemporalWeights(batch.node_user.index_select(0, nodes), batch.node_item.index_select(0, nodes), lengths, weight)
