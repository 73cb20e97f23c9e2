"""DNNTSP (Yu et al., KDD 2020): weighted GCN -> masked temporal attention -> aggregation ->
gated scorer, computed batched over users (MODEL.md).

Data flow for a batch (R distinct rows, M user-nodes, B users, T = longest history):

    E[node_item] per distinct row             [R, d]      (present node-timestamps + absent rows)
    -> WeightedGCN on the batch graph         [R, d]      (or skipped: E at t where i in S_t)
    -> gather to each node's sequence         [M, T, d]
    -> MaskedTemporalSelfAttention            [M, T, d]   (or skipped)
    -> TemporalAggregation (own lengths)      [M, d]
    -> GatedScorer                            [B, I]
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)
from torch import nn

from basketgnn.graph.attention_plan import NodeSubset
from basketgnn.graph.cooccurrence import GraphBatch
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import SparseForward
from basketgnn.nn.aggregation import TemporalAggregation
from basketgnn.nn.gated_scorer import GatedScorer, membership_features, repeat_features
from basketgnn.nn.temporal_attention import MaskedTemporalSelfAttention
from basketgnn.nn.weighted_gcn import WeightedGCN, state_key


class DNNTSPConfig(TrainOptions):
    """Everything that defines a DNNTSP model and its training; the single source of truth.
    The training options (lr, epochs, seed, device, ...) are the engine's
    (:class:`basketgnn.models.options.TrainOptions`).

    The defaults are basketgnn's product settings: the published model plus presence vectors,
    repeat features and dropout 0.2, history caps for long histories and big baskets
    (max_history, train_history_items) and an early stop never before min_steps steps; each was
    chosen on validation customers. The paper's exact configuration is
    ``configs/published.yaml``; the :class:`DNNTSP` constructor's own defaults are the published
    model too.
    """

    model_config = ConfigDict(extra="forbid")

    embed_dim: int = Field(32, ge=1, description="Item embedding size d.")
    gcn: bool = Field(True, description="Use the weighted GCN (off: item embeddings go straight to attention).")
    gcn_layers: int = Field(2, ge=1, description="Number of weighted graph convolutions.")
    attention: bool = Field(True, description="Use temporal self-attention (off: no attention, mean over time).")
    heads: int = Field(4, ge=1, description="Attention heads.")
    head_merge: Literal["concat", "mean"] = Field("concat", description="How heads are combined.")
    aggregation: Literal["learned", "last"] = Field(
        "learned", description="learned: aggregate_nodes_temporal_feature; last: last timestamp."
    )
    gate: Literal["learned", "fixed", "off"] = Field(
        "learned", description="Gated update: learned alpha per item, fixed 0.5, or off (alpha = 1)."
    )
    dropout: float = Field(0.2, ge=0.0, lt=1.0, description="Dropout in GCN and attention (published: 0).")
    presence: bool = Field(
        True, description="Beyond the paper: a learned vector added to an item's input where it was bought."
    )
    repeat_features: bool = Field(
        True, description="Beyond the paper: a learned repeat term over purchase count and recency."
    )
    membership_steps: int = Field(
        0, ge=0, le=64,
        description="Beyond the paper: the repeat term also sees the item's presence in the last K baskets (0: off).",
    )  # fmt: skip
    user_context: bool = Field(
        False, description="Beyond the paper: items outside the history scored per customer from the mean item vector."
    )
    explore_attention: bool = Field(
        False, description="Beyond the paper: items outside the history scored by target attention over the history."
    )
    item_prior: bool = Field(
        False, description="Beyond the paper: a per-item output bias starting at the item's log-odds in the targets."
    )
    base_rate_init: bool = Field(
        False, description="Beyond the paper: the output bias starts at the targets' base rate instead of near 0."
    )
    catalogue_columns: list[str] | None = Field(
        None,
        description="Beyond the paper: these columns of the data's item catalogue (prepare --items) add a "
        "learned embedding per value to each item's embedding, so rare items share what common ones learn.",
    )
    catalogue_buckets: int = Field(
        4096, ge=1,
        description="Rows of each catalogue column's embedding table; a column with more values shares rows "
        "(value code modulo N).",
    )  # fmt: skip
    max_history: int = Field(
        20, ge=0, description="Beyond the paper: the model reads each customer's last N baskets (0: all)."
    )
    train_history_items: int = Field(
        150, ge=0,
        description="Beyond the paper: training windows keep their latest whole baskets up to N items (0: all).",
    )  # fmt: skip
    min_steps: int = Field(
        1000, ge=0, description="Early stopping never stops a run before this many training steps."
    )
    batchnorm_padding: bool = Field(
        False,
        description="The authors' training: the GCN's BatchNorm statistics also count each node's padded "
        "timestamps up to the batch's longest history (self weight 1, no other edge).",
    )

    @model_validator(mode="after")
    def _heads_divide_embedding(self) -> DNNTSPConfig:
        if self.attention and self.head_merge == "concat" and self.embed_dim % self.heads:
            raise ValueError(
                f"embed_dim {self.embed_dim} must be divisible by heads {self.heads} "
                "(or use head_merge: mean)"
            )
        if self.membership_steps and not self.repeat_features:
            raise ValueError("membership_steps needs repeat_features: true (the flags are repeat features)")
        return self


class DNNTSP(nn.Module):
    """The DNNTSP model. Constructed from explicit arguments; :meth:`from_config` reads a config.

    Shapes: forward(GraphBatch of B users) -> scores [B, num_items].
    """

    def __init__(
        self,
        num_items: int,
        embed_dim: int = 32,
        gcn: bool = True,
        gcn_layers: int = 2,
        attention: bool = True,
        heads: int = 4,
        head_merge: Literal["concat", "mean"] = "concat",
        aggregation: Literal["learned", "last"] = "learned",
        gate: Literal["learned", "fixed", "off"] = "learned",
        dropout: float = 0.0,
        presence: bool = False,
        repeat_features: bool = False,
        user_context: bool = False,
        item_prior: bool = False,
        explore_attention: bool = False,
        membership_steps: int = 0,
        catalogue_columns: list[str] | None = None,
        catalogue_buckets: int = 4096,
    ) -> None:
        super().__init__()
        self.num_items = num_items
        self.embedding = nn.Embedding(num_items, embed_dim)
        # Catalogue features: column c's value code k has row c * buckets + k % buckets, zero at
        # the start (the model starts as the one without them); item_codes [I, C] is set by
        # init_catalogue and saved with the weights. Without columns neither exists, so the
        # state dict is the one of a model without the option.
        self.catalogue_buckets = catalogue_buckets
        self.catalogue: nn.Embedding | None = None
        C = len(catalogue_columns or [])
        if C:
            self.catalogue = nn.Embedding(C * catalogue_buckets, embed_dim)
            nn.init.zeros_(self.catalogue.weight)
        self.register_buffer("item_codes", torch.zeros(num_items, C, dtype=torch.int64) if C else None)
        self.presence = nn.Parameter(torch.zeros(embed_dim)) if presence else None
        self.gcn = WeightedGCN(embed_dim, gcn_layers, dropout) if gcn else None
        self.attention = (
            MaskedTemporalSelfAttention(embed_dim, heads, head_merge, dropout) if attention else None
        )
        # Without attention, the sequence is reduced by its mean over time.
        self.aggregate = TemporalAggregation(embed_dim, aggregation if attention else "mean")
        self.scorer = GatedScorer(
            num_items, embed_dim, gate, repeat_features, user_context,
            item_bias=item_prior, explore_attention=explore_attention,
            membership_steps=membership_steps,
        )

    #: Training only: the GCN's BatchNorm statistics also count padded timestamps as the
    #: authors' code does (``batchnorm_padding``; :mod:`basketgnn.nn.weighted_gcn`).
    batchnorm_padding: bool = False

    @classmethod
    def from_config(cls, num_items: int, config: DNNTSPConfig) -> DNNTSP:
        model = cls(
            num_items,
            embed_dim=config.embed_dim,
            gcn=config.gcn,
            gcn_layers=config.gcn_layers,
            attention=config.attention,
            heads=config.heads,
            head_merge=config.head_merge,
            aggregation=config.aggregation,
            gate=config.gate,
            dropout=config.dropout,
            presence=config.presence,
            repeat_features=config.repeat_features,
            user_context=config.user_context,
            item_prior=config.item_prior,
            explore_attention=config.explore_attention,
            membership_steps=config.membership_steps,
            catalogue_columns=config.catalogue_columns,
            catalogue_buckets=config.catalogue_buckets,
        )
        model.batchnorm_padding = config.batchnorm_padding
        return model

    def init_base_rate(self, n_target_items: int, n_targets: int) -> None:
        """Start the output bias at the log-odds of n_target_items / (n_targets · I), the share
        of the catalogue in an average training target basket."""
        self.scorer.set_base_rate(n_target_items / max(n_targets * self.num_items, 1))

    def init_item_prior(self, target_items: torch.Tensor | np.ndarray, n_targets: int) -> None:
        """Set the per-item bias to the log-odds of each item's frequency among ``n_targets``
        training target baskets (needs item_prior). Shapes: target_items [nnz] item ids."""
        counts = torch.bincount(torch.as_tensor(target_items, dtype=torch.int64), minlength=self.num_items)
        self.scorer.set_item_prior(counts.double() / max(n_targets, 1))

    def init_catalogue(self, codes: torch.Tensor | np.ndarray) -> None:
        """Set each item's catalogue value codes (0 = unknown). Shapes: codes [I, C]."""
        if self.item_codes is None:
            raise ValueError("init_catalogue needs catalogue_columns")
        self.item_codes.copy_(torch.as_tensor(np.asarray(codes), dtype=torch.int64))

    def item_vectors(self) -> torch.Tensor:
        """Each item's embedding E_i plus, with catalogue columns, the sum of its values'
        embeddings F_c[code_ic]: the item vectors the GCN and the scorer read. Shapes: -> [I, d]."""
        if self.catalogue is None or self.item_codes is None:
            return self.embedding.weight
        C, B = self.item_codes.shape[1], self.catalogue_buckets
        rows = self.item_codes % B + torch.arange(C, device=self.item_codes.device) * B  # [I, C]
        features = self.catalogue.weight.index_select(0, rows.reshape(-1)).view(self.num_items, C, -1)
        return self.embedding.weight + features.sum(1)  # [I, d]

    def row_features(self, batch: GraphBatch) -> torch.Tensor:
        """GCN output of every distinct row (see graph.cooccurrence). Shapes: -> [R, d]."""
        # index_select on the weight = the embedding lookup, with a cheaper backward on CPU.
        E = self.item_vectors()  # [I, d]
        item = batch.node_item[batch.row_node]  # [R]
        graph = batch.adjacency if batch.adjacency is not None else batch.graph
        if self.gcn is not None and not self.training:
            assert graph is not None
            catalogue = self.catalogue.weight if self.catalogue is not None else None
            # What E and the table are made of: the GCN keeps its projection while these stay.
            key = state_key(self.embedding.weight, self.presence, catalogue, self.item_codes)
            if self.presence is None:
                return self.gcn.forward_gathered(graph, E, item, key)
            # Each item's input without and with the presence vector: [2I, d].
            index = item + batch.row_present.to(item.dtype) * self.num_items  # [R]
            return self.gcn.forward_gathered(graph, torch.cat([E, E + self.presence]), index, key)
        x = E.index_select(0, item)  # [R, d]
        if self.presence is not None:
            x = x + batch.row_present.unsqueeze(1).to(x.dtype) * self.presence
        if self.gcn is not None:
            assert graph is not None
            if self.batchnorm_padding:
                # Each node's padded timestamps, T_max - T_u of them: input E[i] (an absent row's).
                pad = batch.max_len - batch.node_len  # [M]
                keep = pad > 0
                pad_x = E.index_select(0, batch.node_item[keep])  # [P, d]
                return self.gcn(graph, x, batch.row_weight, pad_x, pad[keep])
            return self.gcn(graph, x, batch.row_weight)
        # Static embeddings, zero where the item is not in the basket, so the sequence
        # still shows when the item was bought.
        return x * batch.row_present.unsqueeze(1).to(x.dtype)

    @staticmethod
    def expand_sequences(batch: GraphBatch, rows: torch.Tensor) -> torch.Tensor:
        """Row features to each node's left-aligned sequence; padding holds the absent row's
        value and is masked out later. Shapes: rows [R, d] -> [M, T_max, d]."""
        return rows.index_select(0, batch.seq_row.reshape(-1)).view(*batch.seq_row.shape, -1)

    def forward(
        self, batch: GraphBatch, sparse: bool = False, nodes: torch.Tensor | None = None
    ) -> torch.Tensor | SparseForward:
        """Scores of every item for every user of the batch, [B, I]; with ``sparse``, the same
        scores in shared form (:meth:`forward_sparse`; the scorer must give items outside a
        history one score for everyone), with the own entries of ``nodes`` alone where given."""
        if sparse:
            out = self.forward_sparse(batch, nodes)
            if out is None:
                raise ValueError("sparse scores need a scorer without user_context and explore_attention")
            user, item = batch.node_user, batch.node_item
            if nodes is not None:
                user, item = user.index_select(0, nodes), item.index_select(0, nodes)
            return SparseForward(out[0], user, item, out[1])
        if self.scorer.shared_outside_history:  # the scorer reads z only as w_o . z
            E = self.item_vectors()  # [I, d]
            return self.scorer(
                E, None, batch.node_item, batch.node_user, batch.batch_size, self._node_features(batch, E.dtype),
                z_out=self.node_outputs(batch),
            )  # [B, I], the shared form's values written out
        return self.score_nodes(batch, self.node_vectors(batch))  # [B, I]

    def node_vectors(self, batch: GraphBatch) -> torch.Tensor:
        """Each user-node's vector z after GCN, attention and aggregation. Shapes: -> [M, d]."""
        if len(batch.node_item) == 0:  # no user of the batch has a known history item
            return self.embedding.weight.new_zeros(0, self.embedding.embedding_dim)
        rows = self.row_features(batch)  # [R, d]
        if self.attention is not None and self.aggregate.mode in ("learned", "last"):
            # Attention and readout in one: never builds the [M, T, d] sequences.
            return self.attention.forward_nodes(rows, batch, self.aggregate.w_agg)  # [M, d]
        if self.attention is not None:
            seq = self.attention.forward_rows(
                rows, batch.attention, len(batch.node_item), batch.max_len
            )  # [M, T, d]
        else:
            seq = self.expand_sequences(batch, rows)  # [M, T, d]
        return self.aggregate(seq, batch.node_len)  # [M, d]

    def forward_sparse(
        self, batch: GraphBatch, nodes: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """:meth:`forward` as a shared score per item plus each user-node's own score, when
        the scorer gives items outside a history the same score for every user (the default
        configuration); None otherwise. forward(batch)[node_user[m], node_item[m]] equals
        node[m] and every other entry of column i equals base[i], bit for bit. With ``nodes``
        (ascending places), the own scores of those nodes alone, node[j] the one of node
        nodes[j] (the other nodes are not attended: :meth:`node_outputs`).

        Shapes: nodes [M'] -> (base [I], node [M] or [M']).
        """
        if not self.scorer.shared_outside_history:
            return None
        E = self.item_vectors()  # [I, d]
        z_out = self.node_outputs(batch, nodes)  # [M] or [M']
        item = batch.node_item if nodes is None else batch.node_item.index_select(0, nodes)
        return self.scorer.node_scores(E, z_out, item, self._node_features(batch, E.dtype, nodes))

    def node_outputs(self, batch: GraphBatch, nodes: torch.Tensor | None = None) -> torch.Tensor:
        """Each user-node's w_o . z (:meth:`node_vectors` on the scorer's weight), all the
        shared form reads of z; with the learned or last readout the attention computes it
        without z (``forward_nodes_dot``), and with ``nodes`` (ascending places) attends those
        nodes alone (:class:`~basketgnn.graph.attention_plan.NodeSubset`; every row is still
        projected, in the whole batch's one call): each node's output reads its own rows only,
        so it has the whole batch's bits. Shapes: nodes [M'] -> [M] or [M']."""
        w_o = self.scorer.output_weight
        if len(batch.node_item) and self.attention is not None and self.aggregate.mode in ("learned", "last"):
            plan = batch if nodes is None else NodeSubset.of(batch, nodes)
            return self.attention.forward_nodes_dot(self.row_features(batch), plan, self.aggregate.w_agg, w_o)
        out = self.scorer.project(self.node_vectors(batch))  # [M]
        return out if nodes is None else out.index_select(0, nodes)

    def score_nodes(self, batch: GraphBatch, z: torch.Tensor) -> torch.Tensor:
        """Gated scoring of all items from the user-nodes' vectors. Shapes: z [M, d] -> [B, I]."""
        return self.scorer(
            self.item_vectors(), z, batch.node_item, batch.node_user, batch.batch_size,
            self._node_features(batch, z.dtype),
        )

    def _node_features(
        self, batch: GraphBatch, dtype: torch.dtype, nodes: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The scorer's repeat features of each node (of ``nodes`` alone where given: the same
        values, computed node by node). Shapes: -> [M or M', 4 + K]."""
        if self.scorer.repeat is None:
            return None

        def pick(x: torch.Tensor) -> torch.Tensor:
            return x if nodes is None else x.index_select(0, nodes)

        node_len = pick(batch.node_len)
        phi = repeat_features(pick(batch.node_count), pick(batch.node_last), node_len, dtype)  # [M, 4]
        steps = self.scorer.membership_steps
        if steps:
            seq_row = pick(batch.seq_row)  # [M, T]
            seq_present = batch.row_present.index_select(0, seq_row.reshape(-1)).view(seq_row.shape)
            phi = torch.cat([phi, membership_features(seq_present, node_len, steps, dtype)], dim=1)
        return phi  # [M, 4 + K]
