"""Per-user co-occurrence graphs (DNNTSP's first step) in the distinct-row layout of
``basketgnn.graph.cooccurrence``: hand-computed rows (present node-timestamps, then one absent
row per node), multiplicities, ``seq_row``, edges and weights, edge counts, attention-bucket
plans, collation of several users, and random users against a dense brute-force construction.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import (
    AttentionBucket,
    GraphBatch,
    _HistoryEntries,
    build_user_graphs,
)

# Every user: history baskets, then the target basket.
SEQUENCES = [
    [[1, 3], [1, 2, 3], [3], [2]],  # u0: T = 3, nodes items 1, 2, 3
    [[0], [0], [5]],  # u1: T = 2, one node, never co-bought
    [[4, 4, 5], [0, 1]],  # u2: T = 1, a repeated id (counts once)
    [[0], [0, 1], [0], [1]],  # u3: T = 3, item 0 in every basket, item 1 at t = 1 only
]
N_ITEMS = 6


def _instances(sequences, n_history=None) -> Instances:
    if n_history is None:
        n_history = [len(s) - 1 for s in sequences]
    return Instances(np.arange(len(sequences)), np.asarray(n_history, dtype=np.int64))


def _graphs(sequences=SEQUENCES, n_items=N_ITEMS, form="edges"):
    return build_user_graphs(
        from_sequences(sequences, n_items=n_items), _instances(sequences), form=form
    )


def _edges(batch: GraphBatch) -> dict[tuple[int, int], float]:
    src, dst = batch.graph.edges()
    pairs = list(zip(src.tolist(), dst.tolist()))
    assert len(set(pairs)) == len(pairs), "duplicate edges"
    return dict(zip(pairs, batch.graph.edata["w"].tolist()))


def _in_edges(batch: GraphBatch) -> dict[int, dict[int, float]]:
    """dst row -> {src row: weight}, every row present (possibly empty)."""
    out: dict[int, dict[int, float]] = {r: {} for r in range(batch.graph.num_nodes())}
    for (s, d), w in _edges(batch).items():
        out[d][s] = w
    return out


def _plan(batch: GraphBatch) -> dict[int, list[tuple[int, dict[int, int]]]]:
    """What the attention buckets say, per node m and position t < T_max: the query row and
    how often each row occurs among the keys t' <= t ({row: count}, counts > 0 only)."""
    plan: dict[int, list[tuple[int, dict[int, int]]]] = {}
    T = batch.max_len
    for b in batch.attention:
        assert b.log_count.dtype == torch.float64
        assert b.rows.shape == (len(b.nodes), b.log_count.shape[2])
        assert b.query.shape == (len(b.nodes), T) and b.log_count.shape[:2] == (len(b.nodes), T)
        lc = b.log_count.numpy()
        finite = np.isfinite(lc)
        assert (lc[~finite] == -np.inf).all()
        counts = np.zeros(lc.shape, dtype=np.int64)
        counts[finite] = np.rint(np.exp(lc[finite]))
        assert (counts[finite] >= 1).all()
        assert np.array_equal(lc[finite], np.log(counts[finite]))  # exactly log(n)
        for i, m in enumerate(b.nodes.tolist()):
            assert m not in plan, f"node {m} in two buckets"
            steps = []
            for t in range(T):
                c: Counter[int] = Counter()
                for d in range(lc.shape[2]):
                    if counts[i, t, d]:
                        c[int(b.rows[i, d])] += int(counts[i, t, d])
                steps.append((int(b.rows[i, b.query[i, t]]), dict(c)))
            plan[m] = steps
    assert sorted(plan) == list(range(len(batch.node_item))), "every node in exactly one bucket"
    return plan


def _plan_from_seq_row(batch: GraphBatch) -> dict[int, list[tuple[int, dict[int, int]]]]:
    """The same plan, read off the full sequences seq_row (padding = the absent row)."""
    seq = batch.seq_row.tolist()
    return {
        m: [(s[t], dict(Counter(s[: t + 1]))) for t in range(batch.max_len)]
        for m, s in enumerate(seq)
    }


def _bucket_of(batch: GraphBatch, node: int) -> tuple[AttentionBucket, int]:
    for b in batch.attention:
        hit = (b.nodes == node).nonzero().flatten().tolist()
        if hit:
            return b, hit[0]
    raise AssertionError(f"node {node} in no bucket")


def _log(counts) -> torch.Tensor:
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(np.asarray(counts, dtype=np.float64)))


def test_user_with_cooccurrences_hand_computed():
    # u0 history: S_0 = {1, 3}, S_1 = {1, 2, 3}, S_2 = {3}; T = 3.
    # Nodes (sorted items): node 0 = item 1, node 1 = item 2, node 2 = item 3.
    # c(1, 3) = 2 (S_0, S_1), c(1, 2) = 1 (S_1), c(2, 3) = 1 (S_1), c(i, i) = 1 -> max c = 2.
    # w(1, 3) = 2/2 = 1, w(1, 2) = w(2, 3) = 1/2, self-loops 1/2.
    # Present rows, basket by basket (items sorted): 0 = (item 1, t0), 1 = (item 3, t0),
    # 2 = (item 1, t1), 3 = (item 2, t1), 4 = (item 3, t1), 5 = (item 3, t2).
    # Absent rows: 6 = item 1 (absent at t2: multiplicity 1), 7 = item 2 (t0, t2: 2),
    # 8 = item 3 (never absent: 0).
    b = _graphs().collate(np.array([0]))
    assert b.node_item.tolist() == [1, 2, 3]
    assert b.graph.num_nodes() == 9
    assert b.row_node.tolist() == [0, 2, 0, 1, 2, 2, 0, 1, 2]
    assert b.row_present.tolist() == [True] * 6 + [False] * 3
    assert b.row_weight.tolist() == [1, 1, 1, 1, 1, 1, 1, 2, 0]
    assert b.row_weight.sum().item() == 3 * 3  # N * T node-timestamps
    assert b.seq_row.tolist() == [
        [0, 2, 6],  # item 1: present t0, t1; absent t2
        [7, 3, 7],  # item 2: present t1 only
        [1, 4, 5],  # item 3: present everywhere
    ]
    expected = {
        # t = 0: items 1, 3 (rows 0, 1), w(1, 3) = 2/2
        (0, 1): 1.0, (1, 0): 1.0,
        # t = 1: items 1, 2, 3 (rows 2, 3, 4)
        (2, 3): 0.5, (3, 2): 0.5,  # w(1, 2) = 1/2
        (2, 4): 1.0, (4, 2): 1.0,  # w(1, 3) = 2/2
        (3, 4): 0.5, (4, 3): 0.5,  # w(2, 3) = 1/2
        # t = 2: item 3 alone, no co-occurrence edge
        # a self-loop 1 / max c = 1/2 on every row, present or absent (also multiplicity 0)
        **{(r, r): 0.5 for r in range(9)},
    }  # fmt: skip
    assert _edges(b) == pytest.approx(expected)
    # sum_t |S_t|(|S_t| - 1) + (#present + N) = (2 + 6 + 0) + (6 + 3) = 17 (N^2 T would be 27).
    assert b.graph.num_edges() == 17
    assert b.node_user.tolist() == [0, 0, 0]
    assert b.node_len.tolist() == [3, 3, 3] and b.user_len.tolist() == [3]
    assert b.target_items.tolist() == [2] and b.target_offsets.tolist() == [0, 1]
    assert b.graph.edata["w"].dtype == torch.float32
    assert b.row_weight.dtype == torch.float32 and b.row_present.dtype == torch.bool
    assert b.seq_row.dtype == b.row_node.dtype == b.node_item.dtype == torch.int64


def test_user_never_cobought_has_only_self_loops_of_weight_one():
    # u1: S_0 = S_1 = {0}: one node, no pair, max c = c(0, 0) = 1 -> self-loops of weight 1.
    # Rows: 0 = (item 0, t0), 1 = (item 0, t1), 2 = absent (multiplicity 0).
    b = _graphs().collate(np.array([1]))
    assert b.node_item.tolist() == [0]
    assert b.row_node.tolist() == [0, 0, 0]
    assert b.row_present.tolist() == [True, True, False]
    assert b.row_weight.tolist() == [1, 1, 0]
    assert b.seq_row.tolist() == [[0, 1]]
    assert _edges(b) == {(0, 0): 1.0, (1, 1): 1.0, (2, 2): 1.0}


def test_repeated_id_counts_once():
    # u2: S_0 = {4, 5} (the second 4 is dropped): c(4, 5) = 1, max c = 1, all weights 1.
    # Rows: 0 = (item 4, t0), 1 = (item 5, t0), 2 = absent 4, 3 = absent 5 (both multiplicity 0).
    b = _graphs().collate(np.array([2]))
    assert b.node_item.tolist() == [4, 5]
    assert b.row_node.tolist() == [0, 1, 0, 1]
    assert b.row_present.tolist() == [True, True, False, False]
    assert b.row_weight.tolist() == [1, 1, 0, 0]
    assert b.seq_row.tolist() == [[0], [1]]
    # 1 * 2 + (2 + 2) = 6 edges
    assert _edges(b) == {(0, 1): 1.0, (1, 0): 1.0, **{(r, r): 1.0 for r in range(4)}}


def test_item_in_every_basket_hand_computed():
    # u3: S_0 = {0}, S_1 = {0, 1}, S_2 = {0}; c(0, 1) = 1 -> max c = 1, all weights 1.
    # Rows: 0 = (item 0, t0), 1 = (item 0, t1), 2 = (item 1, t1), 3 = (item 0, t2),
    # 4 = absent 0 (multiplicity 0), 5 = absent 1 (multiplicity 2: t0, t2).
    b = _graphs().collate(np.array([3]))
    assert b.node_item.tolist() == [0, 1]
    assert b.row_node.tolist() == [0, 0, 1, 0, 0, 1]
    assert b.row_present.tolist() == [True] * 4 + [False] * 2
    assert b.row_weight.tolist() == [1, 1, 1, 1, 0, 2]
    assert b.seq_row.tolist() == [[0, 1, 3], [5, 2, 5]]
    # (0 + 2 + 0) + (4 + 2) = 8 edges
    assert _edges(b) == {(1, 2): 1.0, (2, 1): 1.0, **{(r, r): 1.0 for r in range(6)}}


def test_attention_buckets_hand_computed():
    # u3 alone (T = 3). Item 1 (node 1) bought at t = 1 only: columns [absent row 5, row 2];
    # query column per t = [0, 1, 0]; counts of the columns among keys t' <= t:
    # t0 {absent: 1}, t1 {absent: 1, (t1): 1}, t2 {absent: 2, (t1): 1}.
    b = _graphs().collate(np.array([3]))
    bucket, i = _bucket_of(b, 1)
    assert bucket.rows[i].tolist() == [5, 2]
    assert bucket.query[i].tolist() == [0, 1, 0]
    assert torch.equal(bucket.log_count[i], _log([[1, 0], [1, 1], [2, 1]]))
    # Item 0 (node 0) bought at every t: columns [absent row 4, rows 0, 1, 3]; the absent row is
    # never a key (count 0 -> log = -inf).
    bucket, i = _bucket_of(b, 0)
    assert bucket.rows[i].tolist() == [4, 0, 1, 3]
    assert bucket.query[i].tolist() == [1, 2, 3]
    assert torch.equal(bucket.log_count[i], _log([[0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]]))
    assert _plan(b) == _plan_from_seq_row(b)

    # [u3, u2]: u2 (T = 1) starts at row 6 and node 2: rows 6 = (item 4, t0), 7 = (item 5, t0),
    # 8 = absent 4, 9 = absent 5. T_max = 3, so u2's nodes get padding positions t = 1, 2, which
    # (like seq_row) hold the absent row.
    b = _graphs().collate(np.array([3, 2]))
    assert b.seq_row.tolist() == [[0, 1, 3], [5, 2, 5], [6, 8, 8], [7, 9, 9]]
    for node, rows in [(2, [8, 6]), (3, [9, 7])]:
        bucket, i = _bucket_of(b, node)
        assert bucket.rows[i, :2].tolist() == rows
        assert bucket.query[i, 0].item() == 1  # t0: the present row
        assert torch.equal(bucket.log_count[i, :1, :2], _log([[0, 1]]))
        assert torch.isinf(bucket.log_count[i, :, 2:]).all()  # any padding column: never a key
    bucket, i = _bucket_of(b, 1)
    assert bucket.rows[i, :2].tolist() == [5, 2] and bucket.query[i].tolist() == [0, 1, 0]
    assert torch.equal(bucket.log_count[i, :, :2], _log([[1, 0], [1, 1], [2, 1]]))
    assert _plan(b) == _plan_from_seq_row(b)


def test_attention_buckets_move_with_the_device_call():
    b = _graphs().collate(np.array([0, 1, 2, 3])).to("cpu")
    assert len(b.attention) >= 1
    assert _plan(b) == _plan_from_seq_row(b)
    # Off the CPU ("meta" stands in for a GPU here) the buckets are built from the CPU arrays
    # and moved with the batch, not rebuilt later from device tensors.
    cpu = _graphs(form="factored").collate(np.array([0, 1, 2, 3]))
    moved = cpu.to("meta")
    assert "attention" in moved.__dict__ and len(moved.attention) == len(cpu.attention)
    assert all(t.device.type == "meta" for bucket in moved.attention for t in vars(bucket).values())
    assert moved.node_rows.device.type == "meta"


def test_user_graphs_arrays():
    g = _graphs()
    assert len(g) == 4
    assert g.n_history.tolist() == [3, 2, 1, 3]
    assert g.node_offsets.tolist() == [0, 3, 4, 6, 8]
    assert g.n_nodes.tolist() == [3, 1, 2, 2]
    assert g.node_item.tolist() == [1, 2, 3, 0, 4, 5, 0, 1]
    assert g.node_present.tolist() == [2, 1, 3, 2, 1, 1, 3, 1]  # baskets holding each node
    assert g.present_offsets.tolist() == [0, 6, 8, 10, 14]
    assert g.n_present.tolist() == [6, 2, 2, 4]
    assert g.present_node.tolist() == [0, 2, 0, 1, 2, 2, 0, 0, 0, 1, 0, 0, 1, 0]
    assert g.present_t.tolist() == [0, 0, 1, 1, 1, 2, 0, 1, 0, 0, 0, 1, 1, 2]
    assert g.self_w.tolist() == [0.5, 1.0, 1.0, 1.0]
    assert g.edge_offsets.tolist() == [0, 8, 8, 10, 12]  # self-loops are added at collation
    per_instance = [
        sorted(
            zip(
                g.edge_src[g.edge_offsets[k] : g.edge_offsets[k + 1]].tolist(),
                g.edge_dst[g.edge_offsets[k] : g.edge_offsets[k + 1]].tolist(),
                g.edge_w[g.edge_offsets[k] : g.edge_offsets[k + 1]].tolist(),
            )
        )
        for k in range(4)
    ]
    assert per_instance == [
        [(0, 1, 1.0), (1, 0, 1.0), (2, 3, 0.5), (2, 4, 1.0),
         (3, 2, 0.5), (3, 4, 0.5), (4, 2, 1.0), (4, 3, 0.5)],
        [],
        [(0, 1, 1.0), (1, 0, 1.0)],
        [(1, 2, 1.0), (2, 1, 1.0)],
    ]  # fmt: skip
    assert g.target_offsets.tolist() == [0, 1, 2, 4, 5]
    assert g.target_items.tolist() == [2, 5, 0, 1, 1]


ROW_FIELDS = ("row_weight", "row_present")
NODE_FIELDS = ("node_item", "node_len")


def _absent_rows(b: GraphBatch) -> list[int]:
    """The absent row of every node."""
    out = []
    for m in range(len(b.node_item)):
        (rows,) = np.nonzero((b.row_node.numpy() == m) & ~b.row_present.numpy())
        assert len(rows) == 1, f"node {m}: {len(rows)} absent rows"
        out.append(int(rows[0]))
    return out


def _as_dict(b: GraphBatch) -> dict[str, object]:
    """Everything a batch says, with the attention plan at real positions only (a single
    instance's batch has no padding)."""
    out: dict[str, object] = {k: getattr(b, k).tolist() for k in ROW_FIELDS + NODE_FIELDS}
    out.update(
        edges=_edges(b),
        row_node=b.row_node.tolist(),
        seq_row=b.seq_row.tolist(),
        node_user=b.node_user.tolist(),
        user_len=b.user_len.tolist(),
        target_items=b.target_items.tolist(),
        target_offsets=b.target_offsets.tolist(),
        plan={m: p[: int(b.node_len[m])] for m, p in _plan(b).items()},
    )
    return out


def _side_by_side(parts: list[GraphBatch]) -> dict[str, object]:
    """What collating several instances must give: their graphs side by side, row and node ids
    shifted, sequences padded to the longest history with each node's absent row."""
    T_max = max(p.max_len for p in parts)
    out: dict[str, object] = {
        k: [v for p in parts for v in getattr(p, k).tolist()] for k in ROW_FIELDS + NODE_FIELDS
    }
    edges: dict[tuple[int, int], float] = {}
    row_node: list[int] = []
    seq_row: list[list[int]] = []
    plan: dict[int, list] = {}
    row_base = node_base = 0
    for p in parts:
        edges.update({(s + row_base, d + row_base): w for (s, d), w in _edges(p).items()})
        row_node += [n + node_base for n in p.row_node.tolist()]
        for s, a in zip(p.seq_row.tolist(), _absent_rows(p)):
            seq_row.append([r + row_base for r in s] + [a + row_base] * (T_max - len(s)))
        for m, steps in _plan(p).items():
            plan[m + node_base] = [
                (q + row_base, {r + row_base: c for r, c in keys.items()}) for q, keys in steps
            ]
        row_base += p.graph.num_nodes()
        node_base += len(p.node_item)
    out.update(
        edges=edges,
        row_node=row_node,
        seq_row=seq_row,
        node_user=[k for k, p in enumerate(parts) for _ in range(len(p.node_item))],
        user_len=[p.user_len.item() for p in parts],
        target_items=[v for p in parts for v in p.target_items.tolist()],
        target_offsets=np.cumsum([0] + [len(p.target_items) for p in parts]).tolist(),
        plan=plan,
    )
    return out


@pytest.mark.parametrize(
    "idx", [[0, 1], [1, 0], [0, 2], [2, 0, 1], [0, 0], [3, 2, 0], [1, 3, 3, 2], [2]]
)
def test_collate_is_graphs_side_by_side(idx):
    g = _graphs()
    batch = g.collate(np.array(idx))
    assert batch.batch_size == len(idx)
    assert batch.max_len == max(g.n_history[i] for i in idx)
    assert _as_dict(batch) == _side_by_side([g.collate(np.array([i])) for i in idx])
    assert _plan(batch) == _plan_from_seq_row(batch)


def test_collate_two_users_hand_computed():
    # [u0, u1]: u1's rows start at 9 (u0 has 6 present + 3 absent rows), its node at 3.
    # u1 rows: 9 = (item 0, t0), 10 = (item 0, t1), 11 = absent; T_max = 3, padding -> 11.
    b = _graphs().collate(np.array([0, 1]))
    edges = _edges(b)
    assert edges[(9, 9)] == edges[(10, 10)] == edges[(11, 11)] == 1.0
    assert edges[(0, 1)] == 1.0 and edges[(8, 8)] == 0.5
    assert b.graph.num_edges() == 17 + 3
    assert b.row_node.tolist()[9:] == [3, 3, 3]
    assert b.row_weight.tolist()[9:] == [1, 1, 0]
    assert b.seq_row.tolist() == [[0, 2, 6], [7, 3, 7], [1, 4, 5], [9, 10, 11]]
    assert b.node_user.tolist() == [0, 0, 0, 1]
    assert b.node_len.tolist() == [3, 3, 3, 2]
    assert b.user_len.tolist() == [3, 2]
    assert b.target_items.tolist() == [2, 5] and b.target_offsets.tolist() == [0, 1, 2]
    assert b.max_len == 3


def test_without_targets():
    g = _graphs()
    b = g.collate(np.array([0, 1]), with_targets=False)
    assert b.target_items is None and b.target_offsets is None
    data = from_sequences(SEQUENCES, n_items=N_ITEMS)
    g2 = build_user_graphs(data, _instances(SEQUENCES), with_targets=False, form="edges")
    assert g2.target_items is None and g2.target_offsets is None
    b2 = g2.collate(np.array([0, 1]))  # with_targets=True, but there are none
    assert b2.target_items is None and b2.target_offsets is None
    assert _edges(b2) == _edges(b)
    for k in ("row_node", "row_weight", "row_present", "seq_row", "node_item", "node_len"):
        assert torch.equal(getattr(b2, k), getattr(b, k)), k
    # Whole sequences as histories (prediction time): no target basket exists at all.
    g3 = build_user_graphs(
        data, _instances(SEQUENCES, [len(s) for s in SEQUENCES]), with_targets=False, form="edges"
    )
    b3 = g3.collate(np.array([0]))
    assert b3.user_len.tolist() == [4] and b3.node_item.tolist() == [1, 2, 3]
    assert b3.row_weight.sum().item() == 3 * 4
    # present rows 0..6 (the 4th basket {2} adds row 6 = (item 2, t3)); absent rows 7, 8, 9
    assert b3.seq_row.tolist() == [[0, 2, 7, 7], [8, 3, 8, 6], [1, 4, 5, 9]]


def _random_sequences(rng: np.random.Generator, n_users: int, n_items: int) -> list:
    users = []
    for _ in range(n_users):
        T = int(rng.integers(1, 8))
        always = int(rng.integers(n_items)) if rng.random() < 0.3 else None
        baskets = []
        for _ in range(T + 1):  # T history baskets and the target
            # with replacement: repeated ids inside a basket
            b = rng.integers(n_items, size=int(rng.integers(1, 6))).tolist()
            baskets.append(b + ([always] if always is not None else []))
        users.append(baskets)
    return users


@pytest.mark.parametrize("seed", [0, 1])
def test_random_users_match_brute_force(seed):
    """Against a dense N x N x T construction straight from the model's definition: every node-timestamp
    (m, t) maps through seq_row to a row with exactly its in-edges (absent ones: only the
    self-loop), multiplicities count the node-timestamps of each row, and the attention plan
    agrees with the sequences."""
    rng = np.random.default_rng(seed)
    n_items = 12
    sequences = _random_sequences(rng, 25, n_items)
    g = _graphs(sequences, n_items)
    order = rng.permutation(len(sequences))
    batch = g.collate(order)
    in_edges = _in_edges(batch)
    seq_row = batch.seq_row.numpy()
    row_node = batch.row_node.numpy()
    row_present = batch.row_present.numpy()
    R = batch.graph.num_nodes()
    T_max = batch.max_len
    assert seq_row.shape == (len(batch.node_item), T_max)

    covered = np.zeros(R, dtype=np.int64)  # node-timestamps t < T mapped to each row
    present_hits = np.zeros(R, dtype=np.int64)
    n_edges = n_rows = 0
    node_base = 0
    absent = _absent_rows(batch)
    for k, u in enumerate(order):
        hist = [set(b) for b in sequences[u][:-1]]
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
        A = np.zeros((T, N, N))  # A[t, a, b]: weight of the edge (a, t) -> (b, t)
        for t, s in enumerate(hist):
            for a, i in enumerate(nodes):
                for b, j in enumerate(nodes):
                    if a == b or (i in s and j in s):
                        A[t, a, b] = w[a, b]
        ms = np.arange(node_base, node_base + N)
        assert batch.node_item[ms].tolist() == nodes
        assert (batch.node_user[ms] == k).all() and (batch.node_len[ms] == T).all()
        assert batch.user_len[k] == T
        for a in range(N):
            m = node_base + a
            for t in range(T):
                r = int(seq_row[m, t])
                assert row_node[r] == m
                assert row_present[r] == (nodes[a] in hist[t])
                covered[r] += 1
                if nodes[a] in hist[t]:
                    present_hits[r] += 1
                    expected = {
                        int(seq_row[node_base + b, t]): A[t, b, a] for b in range(N) if A[t, b, a]
                    }
                else:
                    assert r == absent[m]
                    expected = {r: w[a, a]}
                assert in_edges[r] == pytest.approx(expected, rel=1e-6), (u, a, t)
            assert (seq_row[m, T:] == absent[m]).all()  # padding: the node's absent row
            # an absent row never seen (multiplicity 0) still exists, with only its self-loop
            assert in_edges[absent[m]] == pytest.approx({absent[m]: w[a, a]}, rel=1e-6)
        # compact, never N^2 per timestamp: co-occurrence pairs + one self-loop per row
        n_present = sum(len(s) for s in hist)
        n_edges += sum(len(s) * (len(s) - 1) for s in hist) + n_present + N
        n_rows += n_present + N
        user_rows = np.flatnonzero(np.isin(row_node, ms))
        assert batch.row_weight[user_rows].sum().item() == N * T
        node_base += N
    assert node_base == len(batch.node_item)
    assert R == n_rows and batch.graph.num_edges() == n_edges
    # each present row is exactly one node-timestamp; every row is present xor some node's absent
    assert (present_hits[row_present] == 1).all() and (present_hits[~row_present] == 0).all()
    assert sorted(np.flatnonzero(~row_present).tolist()) == sorted(absent)
    assert batch.row_weight.tolist() == covered.tolist()
    assert _plan(batch) == _plan_from_seq_row(batch)


def _dense_edges(batch: GraphBatch) -> torch.Tensor:
    """W[dst, src] of the explicit edge list, float64. Shape [R, R]."""
    src, dst = batch.graph.edges()
    W = torch.zeros(batch.num_rows, batch.num_rows, dtype=torch.float64)
    W[dst, src] = batch.graph.edata["w"].double()
    return W


def _dense_factored(batch: GraphBatch) -> torch.Tensor:
    """diag(scale) (B^T B + diag(self)), built densely from the factored entries. Shape [R, R]."""
    a = batch.adjacency
    B = torch.zeros(a.num_slots, batch.num_rows, dtype=torch.float64)
    B.index_put_((a.pair_slot, a.pair_row), torch.ones(len(a.pair_row), dtype=torch.float64),
                 accumulate=True)
    return a.row_scale.double()[:, None] * (B.T @ B + torch.diag(a.row_self.double()))


def _random_big_baskets(seed: int) -> list[list[list[int]]]:
    """Users with long-tailed basket sizes (up to 40 of 60 items) and repeat purchases."""
    rng = np.random.default_rng(seed)
    users = []
    for _ in range(6):
        T = int(rng.integers(1, 12))
        sizes = np.minimum(rng.geometric(0.15, size=T + 1), 40)
        users.append([rng.choice(60, size=int(k), replace=False).tolist() for k in sizes])
    return users + SEQUENCES


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_factored_adjacency_equals_the_edge_list(seed):
    """B^T B factoring (the default form) gives exactly the weights of the explicit edge list,
    and the GCN's weighted sum agrees in both forms."""
    from basketgnn.nn.weighted_gcn import weighted_sum

    seqs = _random_big_baskets(seed)
    data = from_sequences(seqs, n_items=60)
    order = np.random.default_rng(seed).permutation(len(seqs))
    edges = build_user_graphs(data, _instances(seqs), form="edges").collate(order)
    factored = build_user_graphs(data, _instances(seqs)).collate(order)
    assert factored.graph is None and edges.adjacency is None
    for k in ("row_node", "row_weight", "row_present", "seq_row", "node_item", "node_count"):
        assert torch.equal(getattr(edges, k), getattr(factored, k)), k
    W_edges, W_fact = _dense_edges(edges), _dense_factored(factored)
    # the edge list stores float32 weights; the factored form multiplies integers by 1 / max c
    torch.testing.assert_close(W_fact, W_edges, rtol=1e-7, atol=0)
    assert (W_edges > 0).sum() > 4 * edges.num_rows  # real co-occurrence, not only self-loops
    # far fewer entries than edges on big baskets
    assert len(factored.adjacency.pair_row) < edges.graph.num_edges()
    x = torch.randn(edges.num_rows, 5, dtype=torch.float64)
    torch.testing.assert_close(weighted_sum(factored.adjacency, x), W_fact @ x)
    torch.testing.assert_close(
        weighted_sum(edges.graph, x.float()).double(), W_edges @ x, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_weighted_sum_is_the_tensor_paths_bits(dtype):
    """The GCN's factored sum for inference (``nn.gcn_kernel``) makes the tensor path's
    additions in the same order: the same bits. With a gradient to track the tensor path runs."""
    from basketgnn.nn import gcn_kernel
    from basketgnn.nn.weighted_gcn import weighted_sum

    seqs = _random_big_baskets(4)
    batch = build_user_graphs(from_sequences(seqs, n_items=60), _instances(seqs)).collate(np.arange(len(seqs)))
    x = torch.randn(batch.num_rows, 7, dtype=dtype)
    a = batch.adjacency
    compiled = gcn_kernel.weighted_sum(x, a.pair_row, a.pair_slot, a.num_slots, a.row_self, a.row_scale)
    tensor_path = weighted_sum(a, x, compiled=False)
    assert compiled.dtype == dtype
    assert torch.equal(compiled, tensor_path)
    assert torch.equal(weighted_sum(a, x), compiled)
    x.requires_grad_(True)
    out = weighted_sum(a, x)
    assert out.requires_grad and torch.equal(out.detach(), compiled)


def test_bad_graph_form_is_refused():
    data = from_sequences(SEQUENCES, n_items=N_ITEMS)
    with pytest.raises(ValueError, match="unknown graph form"):
        build_user_graphs(data, _instances(SEQUENCES), form="dense")


@pytest.mark.parametrize("form", ["factored", "edges"])
def test_history_cap_is_the_graph_of_the_last_baskets(form):
    # A cap of 2 baskets: the graphs equal those of the same customers with their earlier
    # baskets removed, the targets are still the basket after the whole history, and the
    # left-out baskets are counted (u0: 1 of 3, u3: 1 of 3; u1, u2 have <= 2).
    capped = build_user_graphs(
        from_sequences(SEQUENCES, n_items=N_ITEMS), _instances(SEQUENCES), form=form, max_history=2
    )
    cut = [s[max(0, len(s) - 1 - 2):] for s in SEQUENCES]
    reference = build_user_graphs(from_sequences(cut, n_items=N_ITEMS), _instances(cut), form=form)
    assert capped.left_out_baskets == 2 and reference.left_out_baskets == 0
    assert capped.n_history.tolist() == [2, 2, 1, 2]
    for name, value in reference.__dict__.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(getattr(capped, name), value, err_msg=name)
    full = build_user_graphs(from_sequences(SEQUENCES, n_items=N_ITEMS), _instances(SEQUENCES), form=form)
    np.testing.assert_array_equal(capped.target_items, full.target_items)
    # A cap at or above every history changes nothing.
    same = build_user_graphs(
        from_sequences(SEQUENCES, n_items=N_ITEMS), _instances(SEQUENCES), form=form, max_history=3
    )
    assert same.left_out_baskets == 0
    np.testing.assert_array_equal(same.present_t, full.present_t)
    np.testing.assert_array_equal(same.node_item, full.node_item)


@pytest.mark.parametrize("max_items", [1, 3, 7, 12, 40])
@pytest.mark.parametrize("max_history", [0, 3])
def test_item_cap_keeps_the_latest_whole_baskets_within_the_budget(max_items, max_history):
    # Random customers with baskets of 1 to 9 items: the item cap keeps, per instance, the
    # longest run of last baskets (within max_history) whose items add up to at most
    # max_items, and never less than the last basket. Reference: a loop per instance.
    rng = np.random.default_rng(max_items)
    sequences = [
        [sorted(rng.choice(30, size=rng.integers(1, 10), replace=False).tolist()) for _ in range(rng.integers(2, 9))]
        for _ in range(25)
    ]
    n_history = [int(rng.integers(1, len(s))) for s in sequences]  # prefixes, as the temporal split
    data, instances = from_sequences(sequences, n_items=30), _instances(sequences, n_history)
    capped = build_user_graphs(data, instances, max_history=max_history, max_history_items=max_items)
    expected = []
    for s, n in zip(sequences, n_history):
        window = s[:n][-max_history:] if max_history else s[:n]
        keep, total = 0, 0
        for basket in reversed(window):
            total += len(basket)
            if total > max_items:
                break
            keep += 1
        expected.append(max(keep, 1))
    assert capped.n_history.tolist() == expected
    assert capped.left_out_baskets == sum(n_history) - sum(expected)
    # The graphs are those of the kept baskets: same as a plain cap per instance's length.
    cut = [s[n - k: n + 1] for s, n, k in zip(sequences, n_history, expected)]
    reference = build_user_graphs(from_sequences(cut, n_items=30), _instances(cut))
    for name in ("node_item", "node_offsets", "present_t", "target_items"):
        np.testing.assert_array_equal(getattr(capped, name), getattr(reference, name), err_msg=name)
    assert any(k < min(n, max_history or n) for k, n in zip(expected, n_history)) or max_items >= 40


def test_dnntsps_item_cap_bounds_training_batches_only():
    from basketgnn.models.dnntsp import SPEC, DNNTSPConfig

    data, instances = from_sequences(SEQUENCES, n_items=N_ITEMS), _instances(SEQUENCES)
    config = DNNTSPConfig(train_history_items=1)
    trained = SPEC.batches(data, instances, config, True)
    scored = SPEC.batches(data, instances, config, False)
    assert trained.left_out_baskets > 0 and (trained.n_history == 1).all()
    assert scored.left_out_baskets == 0
    np.testing.assert_array_equal(scored.n_history, instances.n_history)


def test_sizes_are_nodes_per_instance():
    g = _graphs()
    assert g.sizes.tolist() == [3, 1, 2, 2]  # u0: 1, 2, 3; u1: 0; u2: 4, 5; u3: 0, 1


def test_history_entries_hand_computed():
    """u0's last 2 history baskets of 3 ([1, 2, 3], [3]) and u3's whole history: entries basket
    by basket, each with its basket's timestamp within the history and its instance."""
    data = from_sequences(SEQUENCES, n_items=N_ITEMS)
    e = _HistoryEntries.of(data, np.array([0, 3]), np.array([3, 3]), np.array([2, 3]))
    assert e.T.tolist() == [2, 3]
    assert e.basket_t.tolist() == [0, 1, 0, 1, 2]  # u0: 2 baskets, u3: 3
    assert e.item.tolist() == [1, 2, 3, 3, 0, 0, 1, 0]
    assert e.basket.tolist() == [0, 0, 0, 1, 2, 3, 3, 4]
    assert e.inst.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert e.present_offsets.tolist() == [0, 4, 8]


def _long_histories(seed: int) -> list[list[list[int]]]:
    """Customers of a few shapes: long histories (up to 40 baskets), baskets of up to 120 of
    200 items, repeat purchases, and several customers with the same largest co-occurrence
    count, so that absent rows meet across customers."""
    rng = np.random.default_rng(seed)
    users = []
    for _ in range(24):
        T = int(rng.integers(1, 40))
        sizes = np.minimum(rng.geometric(0.08, size=T + 1), 120)
        favourites = rng.choice(200, size=8, replace=False)
        users.append([
            sorted(set(rng.choice(200, size=int(k), replace=False).tolist()) | {int(favourites[t % 8])})
            for t, k in enumerate(sizes)
        ])  # fmt: skip
    return users + _random_big_baskets(seed) + SEQUENCES


@pytest.mark.parametrize("form", ["factored", "edges"])
@pytest.mark.parametrize("seed", [0, 1])
def test_shared_absent_rows_are_the_same_graphs(form, seed):
    """``share_absent``: the nodes of one item whose customers share 1 / max c read one absent
    row; every node-timestamp's weights, self weight and multiplicity are those of the
    per-node layout, and the batch has fewer rows."""
    seqs = _long_histories(seed)
    data, inst = from_sequences(seqs, n_items=200), _instances(seqs)
    order = np.random.default_rng(seed).permutation(len(seqs))
    plain = build_user_graphs(data, inst, form=form).collate(order)
    shared = build_user_graphs(data, inst, form=form, share_absent=True).collate(order)
    assert shared.num_rows < plain.num_rows
    for k in ("node_item", "node_user", "node_len", "node_count", "node_last", "node_times", "user_len"):
        assert torch.equal(getattr(plain, k), getattr(shared, k)), k
    # Every node-timestamp (m, t) holds a row of the same item, presence and self weight.
    for b in (plain, shared):
        assert torch.equal(b.node_item[b.row_node[b.seq_row]], b.node_item[:, None].expand_as(b.seq_row))
    assert torch.equal(plain.row_present[plain.seq_row], shared.row_present[shared.seq_row])
    scale = (lambda b: b.adjacency.row_scale) if form == "factored" else (
        lambda b: b.graph.edata["w"][b.graph.edge_ids(torch.arange(b.num_rows), torch.arange(b.num_rows))]
    )  # fmt: skip
    assert torch.equal(scale(plain)[plain.seq_row], scale(shared)[shared.seq_row])
    # Shared absent rows: one per distinct (item, self weight), their multiplicities summed.
    absent = shared.absent_row
    key = torch.stack([shared.node_item, (1 / scale(shared)[absent]).round().long()], 1)
    assert len(torch.unique(absent)) == len(torch.unique(key, dim=0)) < len(absent)
    assert float(shared.row_weight.sum()) == float(plain.row_weight.sum())
    assert torch.equal(shared.row_weight[~shared.row_present].sum(), plain.row_weight[~plain.row_present].sum())
    # The present rows' weights to each other are unchanged (dense matrices, present rows only).
    dense = _dense_factored if form == "factored" else _dense_edges
    keep_p, keep_s = plain.row_present, shared.row_present
    assert torch.equal(dense(plain)[keep_p][:, keep_p], dense(shared)[keep_s][:, keep_s])


def _batch_arrays(batch: GraphBatch) -> dict[str, torch.Tensor]:
    """Every array of a factored batch, the adjacency's included."""
    out = {k: v for k, v in vars(batch).items() if isinstance(v, torch.Tensor)}
    a = batch.adjacency
    out.update(pair_row=a.pair_row, pair_slot=a.pair_slot, row_scale=a.row_scale, row_self=a.row_self)
    out["num_slots"] = torch.tensor(a.num_slots)
    return out


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_collate_is_the_numpy_collate(share, seed):
    """The factored form's compiled collate gives the NumPy form's arrays, dtype and element for
    element: per-node and shared absent rows, customers of every shape (long histories, baskets
    of 120 items, repeated ids, customers without history), targets, any order, empty batches."""
    seqs = _long_histories(seed)
    n_history = [len(s) - 1 for s in seqs]
    n_history[3] = 0  # a customer without history: no node
    data, inst = from_sequences(seqs, n_items=200), _instances(seqs, n_history)
    graphs = build_user_graphs(data, inst, form="factored", share_absent=share)
    rng = np.random.default_rng(seed)
    batches = [rng.permutation(len(seqs)), rng.choice(len(seqs), size=5, replace=False), np.array([3]), np.array([], np.int64)]
    for idx in batches:
        for targets in (True, False):
            fast = graphs.collate(idx, with_targets=targets)
            reference = graphs.collate(idx, with_targets=targets, compiled=False)
            got, want = _batch_arrays(fast), _batch_arrays(reference)
            assert got.keys() == want.keys()
            for k in want:
                assert got[k].dtype == want[k].dtype, k
                assert torch.equal(got[k], want[k]), k
            if len(idx) > 3 and share:
                assert len(torch.unique(fast.absent_row)) < len(fast.absent_row)  # absent rows shared
