"""NextBaskets (basketgnn/workflow/serving.py), the one scoring path of predict, serve and
recommend --reasons: stored customers equal recommend's rows, new baskets and typed histories
equal ranking a dataset that holds them, exclusions equal the top k of the rest, the
blocked-items file is read again when it changes, and unknown ids are reported."""

from __future__ import annotations

import os

import numpy as np
import pytest

from basketgnn.data.dataset import BasketData, from_sequences
from basketgnn.data.split import Instances
from basketgnn.errors import UserError
from basketgnn.metrics import top_k
from basketgnn.recommenders.base import rank_items
from basketgnn.workflow.recommendations import recommend_all
from basketgnn.workflow.serving import (
    TYPED_HISTORY_ID,
    BlockedItems,
    NextBaskets,
    Query,
    UnknownCustomer,
)
from tests.support.cli import make_checkpoint


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    ckpt, _ = make_checkpoint(tmp_path_factory.mktemp("ckpt"))
    return NextBaskets.load(ckpt)


def ids_of(answer):
    return [e["item_id"] for e in answer.items]


def test_stored_customers_equal_recommend_rows(service):
    rows = recommend_all(service.recommender, service.data, 5)
    customers = service.data.user_ids.tolist()
    together = service.answer([Query(c, k=5) for c in customers], reasons=False)
    for c, a in zip(customers, together):
        want = rows[rows.customer_id == c]
        assert ids_of(a) == want.item_id.tolist() and a.customer_id == c and a.warnings == []
        np.testing.assert_allclose([e["score"] for e in a.items], want.score, rtol=1e-6)
    one = service.answer([Query(customers[3], k=5)])[0]  # alone in its batch, with reasons
    assert ids_of(one) == ids_of(together[3]) and all(e["reasons"] for e in one.items)
    assert [e["rank"] for e in one.items] == [1, 2, 3, 4, 5]


def test_new_baskets_and_typed_histories_rank_a_dataset_that_holds_them(service):
    data, ids = service.data, service.item_ids
    u = 4
    stored = [b.tolist() for b in data.user_baskets(u)]
    new = [[3, 7], [7]]
    cases = [
        (Query(str(data.user_ids[u]), [[ids[i] for i in b] for b in new], k=6), stored + new, str(data.user_ids[u])),
        (Query(None, [[ids[i] for i in b] for b in stored], k=6), stored, TYPED_HISTORY_ID),
    ]
    for query, baskets, owner in cases:
        got = service.answer([query], reasons=False)[0]
        one = from_sequences([baskets], n_items=len(ids))
        one = BasketData(**{**one.__dict__, "item_ids": ids, "user_ids": np.array([owner])})
        items, scores = rank_items(service.recommender, one, Instances(np.array([0]), np.array([len(baskets)])), 6)
        assert ids_of(got) == ids[items[0]].tolist() and got.n_history == len(baskets)
        np.testing.assert_allclose([e["score"] for e in got.items], scores[0], rtol=1e-6)


def test_exclusions_give_the_top_k_of_the_rest(service, tmp_path):
    data = service.data
    u = 7
    inst = Instances(np.array([u]), data.n_baskets_per_user[[u]].astype(np.int64))
    dense = np.asarray(service.recommender.score(data, inst), np.float64)[0]
    first = ids_of(service.answer([Query(str(data.user_ids[u]), k=4)], reasons=False)[0])
    blocked_file = tmp_path / "blocked.txt"
    blocked_file.write_text(f"item_id\n{first[1]}  # out of stock\n\n")
    service.blocked = BlockedItems(blocked_file)
    try:
        got = service.answer([Query(str(data.user_ids[u]), k=4, exclude=(first[0], "no-such-item"))], reasons=False)[0]
        out = [service._item_index[first[0]], service._item_index[first[1]]]
        rest = dense.copy()
        rest[out] = -np.inf
        assert ids_of(got) == service.item_ids[top_k(rest[None], 4)[0]].tolist()
        assert got.warnings == ["exclude: 1 item id(s) the model does not know were ignored: no-such-item"]
        # The file changes: the new list applies to the next answer; it goes: the last list stays.
        blocked_file.write_text(f"{first[2]}\n")
        os.utime(blocked_file, ns=(1, 10**18))
        again = ids_of(service.answer([Query(str(data.user_ids[u]), k=4)], reasons=False)[0])
        assert first[2] not in again and first[1] in again
        blocked_file.unlink()
        assert service.blocked.current() == frozenset({first[2]}) and "last list" in service.blocked.error
    finally:
        service.blocked = None


def test_unknown_ids_are_reported_and_unknown_customers_refused(service):
    known = service.item_ids[0]
    got = service.answer([Query(None, [[known, "zz-1"], ["zz-2"]], k=3)], reasons=False)[0]
    assert got.warnings == ["history: 2 item id(s) the model does not know were ignored: zz-1, zz-2"]
    assert len(got.items) == 3 and got.customer_id is None
    labelled = service.answer([Query(None, [[known]], k=2, label="web-42")], reasons=False)[0]
    assert labelled.customer_id == "web-42"
    with pytest.raises(UnknownCustomer, match="send their baskets as a history"):
        service.answer([Query("nobody", k=3)])
    with pytest.raises(UserError, match="no such blocked-items file"):
        BlockedItems("/no/such/file.txt")


def test_stored_history_lists_the_baskets_oldest_first(service):
    data = service.data
    u = 2
    baskets = service.stored_history(str(data.user_ids[u]))
    assert [sorted(b["items"]) for b in baskets] == [sorted(service.item_ids[b].tolist()) for b in data.user_baskets(u)]
    assert len(service.stored_history(str(data.user_ids[u]), last=2)) == min(2, len(baskets))
