"""Gated information fusing and scoring over the whole catalogue (DNNTSP's third step).

    ê_i = (1 - α_i) E_i + α_i z_{u,i}   for i in V_u,     ê_i = E_i otherwise
    y_i = w_o . ê_i + b_o

Optionally (beyond the paper) a user's own items also get a learned linear term over repeat
features φ (see :func:`repeat_features`): y_i += v . φ_{u,i}, with v initialised to 0. With
``membership_steps`` K > 0, φ also holds K membership flags (PIETSP's multi-hot matrix over the
last K steps, :func:`membership_features`): whether the item was bought 0, 1, ..., K - 1 baskets
before the target, so v can learn a purchase cycle.

Optionally (beyond the paper) every item also gets a user-context term, so items outside the
history are ranked per user too: h_u = mean of z_{u,i} over i in V_u, y_i += E_i . (W_c h_u),
with W_c [d, d] initialised to 0. This is a [B, d] x [d, I] product, never [B, I, d].

Optionally (beyond the paper) every item has its own output bias b_i, y_i += b_i, set before
training to the log-odds of the item's frequency in the training targets (:meth:`GatedScorer.
set_item_prior`), so training starts from popularity instead of all logits at 0 (with thousands
of items that start costs tens of epochs of shrinking every logit).

Optionally (beyond the paper) items outside a user's history get DIN's target attention over
the user's item vectors (nn/target_attention.py): y_i += w_x . Σ_{j ∈ V_u} a(z_{u,j}, E_i) z_{u,j}
for i not in V_u, with w_x [d] initialised to 0. This one is [B, I, |V_u|, 4d] work, run in
chunks of items (EXPLORE_CHUNK_ELEMENTS numbers of attention input per chunk).

Because the scorer is linear this equals a base score shared by the batch plus a correction on
each user's own nodes, so no [batch, items, d] tensor is ever built:

    y_i = (w_o . E_i + b_o) + [i in V_u] α_i (w_o . z_{u,i} - w_o . E_i)
"""

from __future__ import annotations

import torch
from torch import nn

from basketgnn.nn.target_attention import TargetAttention, chunk_size, pad_segments

REPEAT_FEATURES = 4  # without membership flags
EXPLORE_CHUNK_ELEMENTS = 1 << 22


def repeat_features(
    count: torch.Tensor, last: torch.Tensor, length: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per user-node purchase statistics: [log(1 + count), count / T, 1 / (1 + T - 1 - last),
    bought in the last basket]. Shapes: count, last, length [M] -> [M, 4]."""
    count, last, length = count.to(dtype), last.to(dtype), length.to(dtype)
    gap = length - 1 - last  # baskets since the last purchase, 0 = the most recent basket
    return torch.stack(
        [torch.log1p(count), count / length, 1 / (1 + gap), (gap == 0).to(dtype)], dim=1
    )


def membership_features(
    seq_present: torch.Tensor, length: torch.Tensor, steps: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per user-node flags: bought in the basket j steps before the target, j = 0 (the last
    basket) .. steps - 1; 0 before the first basket. Shapes: seq_present [M, T] bool (node m
    bought at timestamp t, left-aligned), length [M] its user's T -> [M, steps]."""
    t = length.unsqueeze(1) - 1 - torch.arange(steps, device=length.device)  # [M, steps]
    inside = t >= 0
    flags = seq_present.gather(1, t.clamp(min=0, max=max(seq_present.shape[1] - 1, 0)))
    return (flags & inside).to(dtype)


class GatedScorer(nn.Module):
    """Scores every catalogue item for every user of the batch.

    Args:
        num_items: catalogue size I.
        dim: embedding size d.
        gate: "learned" (α ∈ R^I, initialised U[0, 1]), "fixed" (α = 0.5 for every item) or
            "off" (α = 1: a user's own items are scored from z alone).
        repeat_features: add the learned repeat-feature term (beyond the paper).
        user_context: add the user-context term for every item (beyond the paper).
        item_bias: add a per-item output bias b_i (beyond the paper; 0 until set_item_prior).
        explore_attention: add DIN's target-attention term for items outside the history
            (beyond the paper).
        membership_steps: K membership flags in the repeat features (needs repeat_features).

    Shapes: embedding E [I, d]; z [M, d] per user-node; node_item [M]; node_user [M];
    node_features [M, 4 + K] (with repeat_features) -> scores [B, I].
    """

    def __init__(
        self,
        num_items: int,
        dim: int,
        gate: str = "learned",
        repeat_features: bool = False,
        user_context: bool = False,
        item_bias: bool = False,
        explore_attention: bool = False,
        membership_steps: int = 0,
    ) -> None:
        super().__init__()
        if gate not in ("learned", "fixed", "off"):
            raise ValueError(f"unknown gate {gate!r}")
        self.gate = gate
        self.alpha = nn.Parameter(torch.rand(num_items)) if gate == "learned" else None
        self.out = nn.Linear(dim, 1)
        if membership_steps and not repeat_features:
            raise ValueError("membership_steps needs repeat_features")
        self.membership_steps = membership_steps
        self.repeat = nn.Parameter(torch.zeros(REPEAT_FEATURES + membership_steps)) if repeat_features else None
        self.context = nn.Parameter(torch.zeros(dim, dim)) if user_context else None
        self.item_bias = nn.Parameter(torch.zeros(num_items)) if item_bias else None
        self.explore = TargetAttention(dim) if explore_attention else None
        self.explore_out = nn.Parameter(torch.zeros(dim)) if explore_attention else None

    @torch.no_grad()
    def set_item_prior(self, frequency: torch.Tensor, smoothing: float = 1e-4) -> None:
        """b_i = log-odds of each item's frequency (clipped to [smoothing, 1 - smoothing]) and
        b_o = 0, so every initial logit is the item's prior log-odds plus w_o . E_i.
        Shapes: frequency [I] in [0, 1]."""
        if self.item_bias is None:
            raise ValueError("set_item_prior needs item_bias=True")
        p = frequency.to(self.item_bias.dtype).clamp(smoothing, 1 - smoothing)
        self.item_bias.copy_(torch.log(p) - torch.log1p(-p))
        self.out.bias.zero_()

    @torch.no_grad()
    def set_base_rate(self, rate: float, smoothing: float = 1e-6) -> None:
        """b_o = the log-odds of ``rate`` (clipped to [smoothing, 1 - smoothing]): every initial
        logit starts near the base rate of a target item instead of near 0. A constant on every
        logit, so no ranking changes; only where training starts from."""
        p = min(max(float(rate), smoothing), 1 - smoothing)
        self.out.bias.fill_(torch.logit(torch.tensor(p, dtype=torch.float64)).item())

    def gate_values(self, node_item: torch.Tensor) -> torch.Tensor:
        """α of each node's item. Shapes: [M] -> [M]."""
        if self.alpha is not None:
            return self.alpha.index_select(0, node_item)
        value = 0.5 if self.gate == "fixed" else 1.0
        return torch.full(node_item.shape, value, device=node_item.device)

    @property
    def shared_outside_history(self) -> bool:
        """True when every item outside a user's history gets the same score for every user
        (no user-context or target-attention term): then :meth:`node_scores` describes the
        whole [B, I] output."""
        return self.context is None and self.explore is None

    @property
    def output_weight(self) -> torch.Tensor:
        """w_o, the linear map from an item's vector to its score. Shapes: [d]."""
        return self.out.weight.squeeze(0)

    def project(self, z: torch.Tensor) -> torch.Tensor:
        """w_o . z_{u,i} of each user-node: the only use the scorer makes of z when no
        per-user term acts outside the history. Shapes: z [M, d] -> [M]."""
        return z @ self.output_weight

    def base_and_correction(
        self,
        embedding: torch.Tensor,
        z_out: torch.Tensor,
        node_item: torch.Tensor,
        node_features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The shared score of every item and each user-node's gated correction (module
        docstring), from each node's w_o . z (:meth:`project`).
        Shapes: z_out [M] -> (base [I], correction [M])."""
        w_o = self.output_weight  # [d]
        lin = embedding @ w_o  # [I] w_o . E_i
        base = lin + self.out.bias  # [I]
        if self.item_bias is not None:
            base = base + self.item_bias  # b_i is not gated: a user's own items keep it too
        # index_select rather than base[node_item]: a faster backward on CPU, same values.
        correction = self.gate_values(node_item) * (z_out - lin.index_select(0, node_item))
        if self.repeat is not None:
            assert node_features is not None, "repeat_features needs node_features [M, 4 + K]"
            correction = correction + node_features.to(z_out.dtype) @ self.repeat  # [M]
        return base, correction

    def node_scores(
        self,
        embedding: torch.Tensor,
        z_out: torch.Tensor,
        node_item: torch.Tensor,
        node_features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The output of :meth:`forward` without the [B, I] matrix, when
        :attr:`shared_outside_history`: scores[u, i] = base[i], except at each user-node
        (node_user[m], node_item[m]), where it is node[m] (the same float32 sum
        base[i] + correction that forward writes there). It reads z only through each node's
        w_o . z, ``z_out`` (:meth:`project`, or that product computed without z).

        Shapes: z_out [M] -> (base [I], node [M]).
        """
        if not self.shared_outside_history:
            raise ValueError("node_scores needs a scorer without user_context and explore_attention")
        base, correction = self.base_and_correction(embedding, z_out, node_item, node_features)
        return base, base.index_select(0, node_item) + correction

    def forward(
        self,
        embedding: torch.Tensor,
        z: torch.Tensor | None,
        node_item: torch.Tensor,
        node_user: torch.Tensor,
        batch_size: int,
        node_features: torch.Tensor | None = None,
        z_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores of every item for every user. ``z_out``: each node's w_o . z where the caller
        computes it without z (:meth:`project` otherwise); z may then be None when
        :attr:`shared_outside_history` (nothing else reads it).

        Shapes: embedding [I, d]; z [M, d]; node_item, node_user [M]; z_out [M] -> [B, I]."""
        if z_out is None:
            assert z is not None
            z_out = self.project(z)
        base, correction = self.base_and_correction(embedding, z_out, node_item, node_features)
        scores = base.expand(batch_size, -1).clone()  # [B, I]
        scores.index_put_((node_user, node_item), correction, accumulate=True)
        if self.shared_outside_history:
            return scores
        assert z is not None, "user_context and explore_attention read z"
        if self.context is not None:
            d = z.shape[1]
            h = z.new_zeros(batch_size, d).index_add(0, node_user, z)  # [B, d]
            n = torch.bincount(node_user, minlength=batch_size).clamp(min=1).to(z.dtype)
            h = h / n.unsqueeze(1)  # [B, d] mean over the user's own items
            scores = scores + (h @ self.context) @ embedding.T  # [B, I]
        if self.explore is not None:
            scores = scores + self.explore_scores(embedding, z, node_item, node_user, batch_size)
        return scores

    def explore_scores(
        self, embedding: torch.Tensor, z: torch.Tensor, node_item: torch.Tensor, node_user: torch.Tensor, batch_size: int
    ) -> torch.Tensor:
        """w_x . v_u(i) for items outside each user's history, 0 on the user's own items.
        Shapes: embedding [I, d], z [M, d] -> [B, I]."""
        assert self.explore is not None and self.explore_out is not None
        history, mask = pad_segments(z, node_user, batch_size)  # [B, N, d], [B, N]
        C = chunk_size(batch_size, history.shape[1], z.shape[1], EXPLORE_CHUNK_ELEMENTS)
        term = torch.cat(
            [self.explore(history, mask, embedding[s : s + C])[0] @ self.explore_out for s in range(0, len(embedding), C)],
            dim=1,
        )  # [B, I]
        return term.index_put((node_user, node_item), term.new_zeros(len(node_item)))
