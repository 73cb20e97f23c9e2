"""Per-user co-occurrence graphs (MODEL.md §1): hand-computed nodes, edges and weights, the
node-timestamp numbering, presence flags, edge counts, and collation of several users."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import GraphBatch, build_user_graphs

# Every user: history baskets, then the target basket.
SEQUENCES = [
    [[1, 3], [1, 2, 3], [3], [2]],  # u0: T = 3, nodes items 1, 2, 3
    [[0], [0], [5]],  # u1: T = 2, one node, never co-bought
    [[4, 4, 5], [0, 1]],  # u2: T = 1, a repeated id (counts once)
]
N_ITEMS = 6


def _graphs(sequences=SEQUENCES, n_items=N_ITEMS):
    data = from_sequences(sequences, n_items=n_items)
    instances = Instances(
        np.arange(len(sequences)), np.asarray([len(s) - 1 for s in sequences], dtype=np.int64)
    )
    return build_user_graphs(data, instances)


def _edges(batch: GraphBatch) -> dict[tuple[int, int], float]:
    src, dst = batch.graph.edges()
    pairs = list(zip(src.tolist(), dst.tolist()))
    assert len(set(pairs)) == len(pairs), "duplicate edges"
    return dict(zip(pairs, batch.graph.edata["w"].tolist()))


def test_user_with_cooccurrences_hand_computed():
    # u0 history: S_0 = {1, 3}, S_1 = {1, 2, 3}, S_2 = {3}.
    # Nodes (sorted items): node 0 = item 1, node 1 = item 2, node 2 = item 3; T = 3.
    # c(1, 3) = 2 (S_0, S_1), c(1, 2) = 1 (S_1), c(2, 3) = 1 (S_1), c(i, i) = 1 -> max c = 2.
    # w(1, 3) = 2/2 = 1, w(1, 2) = w(2, 3) = 1/2, self-loops 1/2.
    # Node-timestamp local = node * T + t: (item 1, t) = t, (item 2, t) = 3 + t, (item 3, t) = 6 + t.
    b = _graphs().collate(np.array([0]))
    assert b.node_item.tolist() == [1, 2, 3]
    assert b.nt_node.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert b.nt_time.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    expected = {
        # t = 0: items 1, 3
        (0, 6): 1.0, (6, 0): 1.0,
        # t = 1: items 1, 2, 3
        (1, 4): 0.5, (4, 1): 0.5,
        (1, 7): 1.0, (7, 1): 1.0,
        (4, 7): 0.5, (7, 4): 0.5,
        # t = 2: item 3 alone, no co-occurrence edge
        # self-loops at every node-timestamp, also where the item is absent
        **{(k, k): 0.5 for k in range(9)},
    }  # fmt: skip
    assert _edges(b) == pytest.approx(expected)
    # sum_t |S_t|(|S_t| - 1) + N * T = (2 + 6 + 0) + 3 * 3 = 17, not N^2 * T = 27.
    assert b.graph.num_edges() == 17
    # item 1 at t 0, 1; item 2 at t 1; item 3 at t 0, 1, 2
    assert np.flatnonzero(b.nt_present.numpy()).tolist() == [0, 1, 4, 6, 7, 8]
    assert b.node_user.tolist() == [0, 0, 0]
    assert b.node_len.tolist() == [3, 3, 3] and b.user_len.tolist() == [3]
    assert b.target_items.tolist() == [2] and b.target_offsets.tolist() == [0, 1]
    assert b.graph.edata["w"].dtype == torch.float32


def test_user_never_cobought_has_only_self_loops_of_weight_one():
    # u1: S_0 = S_1 = {0}: one node, no pair, max c = c(0, 0) = 1 -> self-loops of weight 1.
    b = _graphs().collate(np.array([1]))
    assert b.node_item.tolist() == [0]
    assert _edges(b) == {(0, 0): 1.0, (1, 1): 1.0}
    assert b.nt_present.tolist() == [True, True]


def test_repeated_id_counts_once():
    # u2: S_0 = {4, 5} (the second 4 is dropped): c(4, 5) = 1, max c = 1, all weights 1.
    b = _graphs().collate(np.array([2]))
    assert b.node_item.tolist() == [4, 5]
    assert _edges(b) == {(0, 1): 1.0, (1, 0): 1.0, (0, 0): 1.0, (1, 1): 1.0}
    assert b.nt_present.tolist() == [True, True]


def test_user_graphs_arrays():
    g = _graphs()
    assert len(g) == 3
    assert g.n_history.tolist() == [3, 2, 1]
    assert g.node_offsets.tolist() == [0, 3, 4, 6]
    assert g.node_item.tolist() == [1, 2, 3, 0, 4, 5]
    assert g.n_node_timestamps.tolist() == [9, 2, 2]
    assert g.self_w.tolist() == [0.5, 1.0, 1.0]
    assert g.edge_offsets.tolist() == [0, 8, 8, 10]  # self-loops are added at collation
    assert g.target_offsets.tolist() == [0, 1, 2, 4]
    assert g.target_items.tolist() == [2, 5, 0, 1]


FIELDS = ("nt_time", "nt_present", "node_item", "node_len", "user_len", "target_items")


def _as_dict(b: GraphBatch) -> dict[str, object]:
    out: dict[str, object] = {k: getattr(b, k).tolist() for k in FIELDS}
    out.update(
        edges=_edges(b),
        nt_node=b.nt_node.tolist(),
        node_user=b.node_user.tolist(),
        target_offsets=b.target_offsets.tolist(),
    )
    return out


def _side_by_side(parts: list[GraphBatch]) -> dict[str, object]:
    """What collating several instances must give: their graphs side by side, ids shifted."""
    out: dict[str, object] = {k: [v for p in parts for v in getattr(p, k).tolist()] for k in FIELDS}
    edges: dict[tuple[int, int], float] = {}
    nt_node: list[int] = []
    nt_base = node_base = 0
    for p in parts:
        edges.update({(s + nt_base, d + nt_base): w for (s, d), w in _edges(p).items()})
        nt_node += [n + node_base for n in p.nt_node.tolist()]
        nt_base += p.graph.num_nodes()
        node_base += len(p.node_item)
    out.update(
        edges=edges,
        nt_node=nt_node,
        node_user=[k for k, p in enumerate(parts) for _ in range(len(p.node_item))],
        target_offsets=np.cumsum([0] + [len(p.target_items) for p in parts]).tolist(),
    )
    return out


@pytest.mark.parametrize("idx", [[0, 1], [1, 0], [0, 2], [2, 0, 1], [0, 0]])
def test_collate_is_graphs_side_by_side(idx):
    g = _graphs()
    batch = g.collate(np.array(idx))
    assert batch.batch_size == len(idx)
    assert _as_dict(batch) == _side_by_side([g.collate(np.array([i])) for i in idx])


def test_collate_two_users_hand_computed():
    # [u0, u1]: u1's node-timestamps start at 9 (u0 has 3 nodes * 3 timestamps), its node at 3.
    b = _graphs().collate(np.array([0, 1]))
    edges = _edges(b)
    assert edges[(9, 9)] == edges[(10, 10)] == 1.0
    assert edges[(0, 6)] == 1.0 and edges[(8, 8)] == 0.5
    assert b.graph.num_edges() == 17 + 2
    assert b.nt_node.tolist()[9:] == [3, 3]
    assert b.node_user.tolist() == [0, 0, 0, 1]
    assert b.node_len.tolist() == [3, 3, 3, 2]
    assert b.target_items.tolist() == [2, 5] and b.target_offsets.tolist() == [0, 1, 2]
    assert b.max_len == 3


def test_without_targets():
    g = _graphs()
    b = g.collate(np.array([0, 1]), with_targets=False)
    assert b.target_items is None and b.target_offsets is None
    data = from_sequences(SEQUENCES, n_items=N_ITEMS)
    g2 = build_user_graphs(data, Instances(np.arange(3), np.array([3, 2, 1])), with_targets=False)
    assert g2.target_items is None
    assert _edges(g2.collate(np.array([0, 1]), with_targets=False)) == _edges(b)


def test_random_users_match_brute_force():
    """Edges, weights, edge counts and presence against a dense per-timestamp construction."""
    rng = np.random.default_rng(0)
    n_items = 15
    sequences = [
        [
            rng.choice(n_items, size=int(rng.integers(1, 6)), replace=False).tolist()
            for _ in range(int(rng.integers(2, 8)))
        ]
        for _ in range(20)
    ]
    g = _graphs(sequences, n_items)
    batch = g.collate(np.arange(len(sequences)))
    edges = _edges(batch)
    expected: dict[tuple[int, int], float] = {}
    present: list[int] = []
    base = 0
    for seq in sequences:
        hist = [set(b) for b in seq[:-1]]
        T = len(hist)
        nodes = sorted(set().union(*hist))
        N = len(nodes)
        c = np.array(
            [
                [1.0 if i == j else sum(i in s and j in s for s in hist) for j in nodes]
                for i in nodes
            ]
        )
        w = c / c.max()
        n_edges = 0
        for t, s in enumerate(hist):
            for a, i in enumerate(nodes):
                if i in s:
                    present.append(base + a * T + t)
                for b, j in enumerate(nodes):
                    if a == b or (i in s and j in s):
                        expected[(base + a * T + t, base + b * T + t)] = w[a, b]
                        n_edges += 1
        assert n_edges == sum(len(s) * (len(s) - 1) for s in hist) + N * T
        base += N * T
    assert batch.graph.num_nodes() == base
    assert edges.keys() == expected.keys()
    for k, v in expected.items():
        assert edges[k] == pytest.approx(v, rel=1e-6), k
    assert np.flatnonzero(batch.nt_present.numpy()).tolist() == sorted(present)
