"""``batchnorm_padding``: the GCN's training-mode BatchNorm statistics of the authors' code,
against a dense reference of their batch tensor: [nodes, T_max, d] for the whole batch, the
weights of MODEL.md at a user's real timestamps and the identity at its padded ones (their
collate pads with ``eye(N)``), BatchNorm over every node x T_max position. Real outputs and
running statistics agree; without the option the padded positions are left out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.graph.cooccurrence import build_user_graphs
from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_ITEMS, DIM = 9, 8
# Histories (the last basket is the target): T = 4, 1, 2, 3, so three users are padded.
USERS = [
    [[0, 1], [0, 2, 5], [1], [0, 1, 3], [2]],
    [[4, 7], [8]],
    [[5], [5, 6], [0]],
    [[2, 3], [3], [2, 3, 8], [1]],
]


def _dense_weights(history: list[list[int]], T_max: int) -> tuple[list[int], torch.Tensor]:
    """Nodes (sorted items) and A [T_max, N, N], A[t, i, j] the weight of i -> j."""
    baskets = [set(b) for b in history]
    nodes = sorted(set().union(*baskets))
    c = torch.tensor([[1.0 if a == b else float(sum(a in s and b in s for s in baskets)) for b in nodes]
                      for a in nodes], dtype=torch.float64)  # fmt: skip
    w = c / c.max()
    A = torch.zeros(T_max, len(nodes), len(nodes), dtype=torch.float64)
    for t in range(T_max):
        if t >= len(baskets):
            A[t] = torch.eye(len(nodes), dtype=torch.float64)  # the authors' padding
            continue
        for a, i in enumerate(nodes):
            for b, j in enumerate(nodes):
                if a == b or (i in baskets[t] and j in baskets[t]):
                    A[t, a, b] = w[a, b]
    return nodes, A


def _dense_gcn(model: DNNTSP, users: list[list[list[int]]]) -> list[torch.Tensor]:
    """The authors' GCN on the padded batch: per user [N_u, T_max, d] (train-mode BatchNorm
    over all sum N_u x T_max positions, updating the running statistics of copies of ours)."""
    T_max = max(len(u) - 1 for u in users)
    graphs = [_dense_weights(u[:-1], T_max) for u in users]
    E = model.embedding.weight
    h = [E[nodes].unsqueeze(1).expand(len(nodes), T_max, DIM) for nodes, _ in graphs]
    assert model.gcn is not None
    for layer in model.gcn.layers:
        pre = [layer.linear(torch.einsum("tij,itd->jtd", A, x)) for (_, A), x in zip(graphs, h)]
        flat = torch.cat([p.reshape(-1, DIM) for p in pre])  # [sum N_u * T_max, d]
        norm = torch.nn.BatchNorm1d(DIM).double().train()
        norm.load_state_dict(layer.norm.state_dict())
        out = torch.relu(norm(flat))
        layer.reference_norm = norm  # its running statistics after the step
        sizes = [p.shape[0] * T_max for p in pre]
        h = [o.view(-1, T_max, DIM) for o in out.split(sizes)]
    return h


def _model() -> DNNTSP:
    torch.manual_seed(3)
    model = DNNTSP.from_config(N_ITEMS, DNNTSPConfig(embed_dim=DIM, dropout=0.0, batchnorm_padding=True)).double()
    for layer in model.gcn.layers:  # non-trivial affine parameters and running statistics
        layer.norm.weight.data.uniform_(0.5, 1.5)
        layer.norm.bias.data.uniform_(-0.5, 0.5)
        layer.norm.running_mean.uniform_(-1, 1)
        layer.norm.running_var.uniform_(0.5, 2)
    return model.train()


def test_padded_statistics_equal_the_authors_dense_batch():
    model = _model()
    assert model.batchnorm_padding
    data = from_sequences(USERS, n_items=N_ITEMS)
    inst = Instances(np.arange(len(USERS)), np.array([len(u) - 1 for u in USERS], dtype=np.int64))
    batch = build_user_graphs(data, inst).collate(np.arange(len(USERS)))
    dense = _dense_gcn(model, USERS)  # before ours moves the running statistics
    rows = model.row_features(batch)  # [R, d]
    seq = DNNTSP.expand_sequences(batch, rows)  # [M, T_max, d]
    for m, (b, item) in enumerate(zip(batch.node_user.tolist(), batch.node_item.tolist())):
        history = USERS[b][:-1]
        node = sorted(set().union(*map(set, history))).index(item)
        T = len(history)
        torch.testing.assert_close(seq[m, :T], dense[b][node, :T], rtol=1e-10, atol=1e-10)
    for layer in model.gcn.layers:
        torch.testing.assert_close(layer.norm.running_mean, layer.reference_norm.running_mean)
        torch.testing.assert_close(layer.norm.running_var, layer.reference_norm.running_var)


def test_without_the_option_padding_is_left_out_and_eval_ignores_it():
    data = from_sequences(USERS, n_items=N_ITEMS)
    inst = Instances(np.arange(len(USERS)), np.array([len(u) - 1 for u in USERS], dtype=np.int64))
    batch = build_user_graphs(data, inst).collate(np.arange(len(USERS)))
    padded, plain = _model(), _model()
    plain.batchnorm_padding = False
    rows_padded, rows_plain = padded.row_features(batch), plain.row_features(batch)
    assert not torch.allclose(rows_padded, rows_plain)  # the statistics differ
    # Only the plain statistics are those of the real node-timestamps alone.
    assert not torch.allclose(padded.gcn.layers[0].norm.running_mean, plain.gcn.layers[0].norm.running_mean)
    padded.eval()
    plain.eval()
    plain.load_state_dict(padded.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(padded.row_features(batch), plain.row_features(batch))
    assert DNNTSPConfig().batchnorm_padding is False and DNNTSP(N_ITEMS).batchnorm_padding is False
