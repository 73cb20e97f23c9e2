"""``basketgnn serve`` of a checkpoint whose re-ranking stage validation kept, as users meet it:
the real server on a loopback port and a real HTTP client. Its answers equal `recommend`'s rows
(also beyond the stage's candidates) and `predict`'s table, and each item's reasons start with
the stage's."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pandas as pd
import pytest

from basketgnn.data.split import Instances
from basketgnn.recommenders.reranked import RerankedRecommender
from basketgnn.workflow.training import load_trained
from tests.support.cli import make_checkpoint, run, run_ok
from tests.support.server import start_server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reranked")
    checkpoint, data = make_checkpoint(folder, rerank=True)
    server = start_server("--checkpoint", str(checkpoint), log=folder / "server.log")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client, checkpoint, data
    finally:
        server.stop()


def items(answer):
    return [e["item_id"] for e in answer["items"]]


@pytest.mark.parametrize("k", [5, 14])  # within the stage's 10 candidates, and beyond them
def test_answers_equal_recommend_rows_with_the_stages_reason_first(served, tmp_path, k):
    client, checkpoint, data = served
    run_ok("recommend", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "recs.csv"), "--k", str(k))
    rows = pd.read_csv(tmp_path / "recs.csv", dtype={"customer_id": str, "item_id": str})
    customers = data.user_ids[:20].tolist()
    batch = client.post("/v1/next-baskets", json={"customers": [{"customer_id": c} for c in customers], "k": k, "reasons": True}).json()
    for c, in_batch in zip(customers, batch["answers"]):
        want = rows[rows.customer_id == c]
        assert items(in_batch) == want.item_id.tolist() and len(want) == k
        assert [e["score"] for e in in_batch["items"]] == pytest.approx(want.score.tolist(), rel=1e-6)
        assert all(e["reasons"][0]["kind"] == "rerank" for e in in_batch["items"])
    # The stage orders otherwise than the fused ranking it wraps.
    wrapper = load_trained(checkpoint)
    assert isinstance(wrapper, RerankedRecommender)
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    fused = wrapper.shipped.rank(data, everyone, k)[0][:20]
    assert any(items(a) != [str(data.item_ids[i]) for i in row] for a, row in zip(batch["answers"], fused))


def test_a_history_is_ranked_as_predict_ranks_it(served, monkeypatch, capsys):
    client, checkpoint, data = served
    history = [[str(data.item_ids[i]) for i in b] for b in data.user_baskets(3)]
    answer = client.post("/v1/next-basket", json={"history": history, "k": 4}).json()
    code, out, _ = run(monkeypatch, capsys, "predict", "--checkpoint", str(checkpoint), "--history", json.dumps(history), "--k", "4")
    assert code == 0
    table = [line.split("│")[1:4] for line in out.splitlines() if line.count("│") >= 4]
    assert items(answer) == [cells[1].strip() for cells in table] and len(table) == 4
    assert answer["items"][0]["reasons"][0]["kind"] == "rerank"
