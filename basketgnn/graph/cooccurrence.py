"""Per-user temporal co-occurrence graphs (MODEL.md §1), built for all users at once.

For an instance (user u, history of T baskets S_0 .. S_{T-1}):

- nodes V_u: the N distinct items of the history; *node-timestamps* (i, t) for every node and
  every t < T, numbered node-major: ``local = node * T + t``.
  Example: N = 2 nodes, T = 3 -> (0,0)=0 (0,1)=1 (0,2)=2 (1,0)=3 (1,1)=4 (1,2)=5.
- c(i, j), i != j: number of history baskets holding both; c(i, i) = 1;
  w = c / max(c) over the user (max includes the self weight 1).
- edges at timestamp t: (i, t) -> (j, t) with weight w(i, j) for i != j both in S_t, and a
  self-loop (i, t) -> (i, t) with weight w(i, i) = 1 / max(c) for every node and every t.

Only co-occurring pairs and self-loops exist, so memory is O(sum |S_t|^2 + N * T) per user,
never N^2 per timestamp. Everything here is vectorised numpy over all instances (no loop over
users or item pairs); :meth:`UserGraphs.collate` cuts out a batch as one DGL graph.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
import dgl

from basketgnn.data.dataset import BasketData, _offsets, ranges
from basketgnn.data.split import Instances


@dataclass(frozen=True)
class GraphBatch:
    """A batch of B users' graphs merged into one DGL graph over node-timestamps.

    Shapes (NT = node-timestamps, M = user-nodes in the batch):
    graph: NT nodes, edata["w"] [E] float32 (co-occurrence and self-loop weights);
    nt_node [NT] user-node of each node-timestamp; nt_time [NT] its timestamp;
    node_item [M] catalogue item of each user-node; node_user [M] its batch row;
    node_len [M] history length T of its user; user_len [B];
    nt_present [NT] bool, whether the item is in the basket at that timestamp; targets: Csr-like
    (target_items [nnz], target_offsets [B + 1]) or None when scoring.
    """

    graph: dgl.DGLGraph
    nt_node: torch.Tensor
    nt_time: torch.Tensor
    node_item: torch.Tensor
    node_user: torch.Tensor
    node_len: torch.Tensor
    user_len: torch.Tensor
    nt_present: torch.Tensor
    target_items: torch.Tensor | None = None
    target_offsets: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return len(self.user_len)

    @property
    def max_len(self) -> int:
        return int(self.user_len.max())

    def to(self, device: torch.device | str) -> GraphBatch:
        fields = {k: (v.to(device) if v is not None else None) for k, v in self.__dict__.items()}
        return GraphBatch(**fields)


@dataclass(frozen=True)
class UserGraphs:
    """The graphs of a set of instances, in flat arrays (instance k's slice by the offsets).

    Shapes (n instances, M nodes, P co-occurrence edges):
    n_history [n] (T), node_offsets [n + 1], node_item [M],
    edge_offsets [n + 1], edge_src [P], edge_dst [P] (local node-timestamp ids), edge_w [P],
    self_w [n] (1 / max c), present_offsets [n + 1] / present_nt [nnz] (local node-timestamps
    whose item is in that basket), target_items / target_offsets (the target baskets, when known).
    """

    n_history: np.ndarray
    node_offsets: np.ndarray
    node_item: np.ndarray
    edge_offsets: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_w: np.ndarray
    self_w: np.ndarray
    present_offsets: np.ndarray
    present_nt: np.ndarray
    target_items: np.ndarray | None
    target_offsets: np.ndarray | None

    def __len__(self) -> int:
        return len(self.n_history)

    @property
    def n_nodes(self) -> np.ndarray:
        return np.diff(self.node_offsets)

    @property
    def n_node_timestamps(self) -> np.ndarray:
        return self.n_nodes * self.n_history

    def collate(self, idx: np.ndarray, with_targets: bool = True) -> GraphBatch:
        """Merge the graphs of instances ``idx`` into one :class:`GraphBatch` (vectorised)."""
        idx = np.asarray(idx, dtype=np.int64)
        T = self.n_history[idx]  # [B]
        n_nodes = self.n_nodes[idx]  # [B]
        nt_count = n_nodes * T  # [B]
        nt_base = _offsets(nt_count)  # [B + 1]
        node_base = _offsets(n_nodes)
        NT = int(nt_base[-1])

        # Node-timestamp k of instance b: local = k - nt_base[b]; node = local // T; t = local % T.
        nt_inst = np.repeat(np.arange(len(idx)), nt_count)  # [NT]
        local = np.arange(NT, dtype=np.int64) - nt_base[:-1][nt_inst]
        T_rep = T[nt_inst]
        nt_node = node_base[:-1][nt_inst] + local // T_rep
        nt_time = local % T_rep

        n_edges = self.edge_offsets[idx + 1] - self.edge_offsets[idx]
        e = ranges(self.edge_offsets[idx], n_edges)
        shift = np.repeat(nt_base[:-1], n_edges)
        self_loops = np.arange(NT, dtype=np.int64)
        src = np.concatenate([self.edge_src[e] + shift, self_loops])
        dst = np.concatenate([self.edge_dst[e] + shift, self_loops])
        w = np.concatenate([self.edge_w[e], np.repeat(self.self_w[idx], nt_count)])
        graph = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=NT)
        graph.edata["w"] = torch.from_numpy(w.astype(np.float32))

        n_present = self.present_offsets[idx + 1] - self.present_offsets[idx]
        present = np.zeros(NT, dtype=bool)
        present[
            self.present_nt[ranges(self.present_offsets[idx], n_present)]
            + np.repeat(nt_base[:-1], n_present)
        ] = True
        nodes = ranges(self.node_offsets[idx], n_nodes)
        targets: dict[str, torch.Tensor] = {}
        if with_targets and self.target_items is not None and self.target_offsets is not None:
            lens = self.target_offsets[idx + 1] - self.target_offsets[idx]
            targets = {
                "target_items": torch.from_numpy(
                    self.target_items[ranges(self.target_offsets[idx], lens)].astype(np.int64)
                ),
                "target_offsets": torch.from_numpy(_offsets(lens)),
            }
        return GraphBatch(
            graph=graph,
            nt_node=torch.from_numpy(nt_node),
            nt_time=torch.from_numpy(nt_time),
            node_item=torch.from_numpy(self.node_item[nodes].astype(np.int64)),
            node_user=torch.from_numpy(np.repeat(np.arange(len(idx)), n_nodes)),
            node_len=torch.from_numpy(np.repeat(T, n_nodes)),
            user_len=torch.from_numpy(T.copy()),
            nt_present=torch.from_numpy(present),
            **targets,
        )


def build_user_graphs(
    data: BasketData, instances: Instances, with_targets: bool = True
) -> UserGraphs:
    """Build the co-occurrence graphs of every instance's history, vectorised over instances."""
    n = len(instances)
    T = np.asarray(instances.n_history, dtype=np.int64)  # [n]
    hist = data.histories(instances.users, T)
    baskets = hist.baskets
    n_hb = baskets.n_rows
    basket_inst = np.repeat(np.arange(n, dtype=np.int64), T)  # [n_hb]
    basket_t = np.arange(n_hb, dtype=np.int64) - hist.basket_offsets[:-1][basket_inst]

    entry_basket = baskets.row_ids()  # [nnz]
    entry_inst = basket_inst[entry_basket]
    item = baskets.values.astype(np.int64)
    # Nodes: distinct (instance, item), sorted by instance then item.
    node_key, entry_node = np.unique(entry_inst * data.n_items + item, return_inverse=True)
    node_inst = node_key // data.n_items
    node_offsets = _offsets(np.bincount(node_inst, minlength=n))
    node_local = np.arange(len(node_key), dtype=np.int64) - node_offsets[:-1][node_inst]

    # All ordered pairs of entries of the same basket, i != j: sum |S|^2 - |S| of them.
    size = baskets.lengths[entry_basket]  # [nnz]
    src_e = np.repeat(np.arange(len(item), dtype=np.int64), size)
    dst_e = ranges(baskets.offsets[:-1][entry_basket], size)
    keep = src_e != dst_e
    src_e, dst_e = src_e[keep], dst_e[keep]
    src_node, dst_node = entry_node[src_e], entry_node[dst_e]
    pair_inst = entry_inst[src_e]
    pair_t = basket_t[entry_basket[src_e]]

    # c(i, j) = number of baskets with both = occurrences of the (i, j) node pair.
    _, pair_group, pair_count = np.unique(
        src_node * len(node_key) + dst_node, return_inverse=True, return_counts=True
    )
    c = pair_count[pair_group].astype(np.float64)
    max_c = np.ones(n, dtype=np.float64)  # the self weight 1 takes part in the max
    np.maximum.at(max_c, pair_inst, c)

    T_pair = T[pair_inst]
    edge_src = node_local[src_node] * T_pair + pair_t
    edge_dst = node_local[dst_node] * T_pair + pair_t
    targets = data.targets(instances.users, T) if with_targets else None
    return UserGraphs(
        n_history=T,
        node_offsets=node_offsets,
        node_item=(node_key % data.n_items).astype(np.int32),
        edge_offsets=_offsets(np.bincount(pair_inst, minlength=n)),
        edge_src=edge_src,
        edge_dst=edge_dst,
        edge_w=(c / max_c[pair_inst]).astype(np.float32),
        self_w=(1.0 / max_c).astype(np.float32),
        present_offsets=_offsets(np.bincount(entry_inst, minlength=n)),
        present_nt=node_local[entry_node] * T[entry_inst] + basket_t[entry_basket],
        target_items=None if targets is None else targets.values,
        target_offsets=None if targets is None else targets.offsets,
    )
