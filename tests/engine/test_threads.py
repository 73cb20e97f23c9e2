"""The scoring threads: one helper pool per size kept inside a kept_helpers block and ended with
it, a pool per call elsewhere and for a call made on a helper thread, new pools in a forked
child, concurrent ranking calls that rank as one, and torch's threads restored after a narrowed
block."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
import torch

from basketgnn.data.split import Instances, make_split
from basketgnn.engine.threads import (
    THREAD_PREFIX,
    SharedParts,
    helper_threads,
    in_parts,
    kept_helpers,
    torch_thread_count,
    torch_threads,
)
from basketgnn.models.dnntsp import DNNTSPConfig
from basketgnn.recommenders.base import rank_items
from basketgnn.recommenders.fused import FusedRecommender
from basketgnn.scoring.fusion import ScoreFusion, TifuScorer
from basketgnn.scoring.tifu import TifuParams
from tests.recommenders.test_fused import recommender
from tests.support.planted import planted_data


def test_pools_kept_inside_the_block_and_ended_with_it():
    with kept_helpers():
        with helper_threads(2) as a:
            names = {a.submit(lambda: threading.current_thread().name).result() for _ in range(4)}
        with kept_helpers(), helper_threads(2) as b, helper_threads(1) as c:  # nested: the same pools
            assert b is a and c is not a
        threads = list(a._threads)
        assert threads and all(t.is_alive() for t in threads)
    assert all(not t.is_alive() for t in threads)  # no helper outlives the block
    assert all(n.startswith(THREAD_PREFIX) for n in names)
    with helper_threads(1) as d, helper_threads(1) as e:  # outside a block: a pool per call
        assert d is not e
    assert d._shutdown and e._shutdown
    with pytest.raises(ValueError, match="at least 1"):
        with helper_threads(0):
            pass


def test_a_call_on_a_helper_thread_gets_a_pool_of_its_own():
    """A part that scores on a helper of the one-thread pool: waiting on that pool would never
    end, so it runs on its own pool and the outer part finishes."""

    def outer():
        with helper_threads(1) as inner:
            return inner.submit(lambda: 7).result(timeout=10), inner

    with kept_helpers(), helper_threads(1) as pool:
        value, inner = pool.submit(outer).result(timeout=20)
    assert value == 7 and inner is not pool


def _child_runs_a_task(queue):
    with helper_threads(1) as pool:
        queue.put(pool.submit(lambda: 42).result(timeout=10))


def test_a_child_forked_inside_a_block_makes_its_own_pool():
    with kept_helpers():
        with helper_threads(1) as pool:
            pool.submit(lambda: None).result()  # the parent's pool has a thread the child lacks
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child_runs_a_task, args=(queue,))
        child.start()
        child.join(30)
    assert child.exitcode == 0 and queue.get(timeout=5) == 42


def test_torch_threads_restored_after_the_block():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_torch_threads_stay_narrowed_inside_a_kept_helpers_block_until_it_ends(monkeypatch):
    """A job's ranking calls narrow torch's threads once, not once per call: the count is set
    when the first call narrows it and restored when the block ends (an error included)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sets = []
        set_num_threads = torch.set_num_threads
        monkeypatch.setattr(torch, "set_num_threads", lambda n: sets.append(n) or set_num_threads(n))
        with kept_helpers():
            for _ in range(3):
                with torch_threads(1):
                    assert torch.get_num_threads() == 1
                assert torch.get_num_threads() == 1  # left narrowed for the next call
            with kept_helpers(), torch_threads(1):  # nested: the outer block's
                pass
            assert torch_thread_count() == 2  # what the job's next call is to use
        assert torch.get_num_threads() == 2 and sets == [1, 2]
        with pytest.raises(RuntimeError, match="failed"):
            with kept_helpers(), torch_threads(1):
                raise RuntimeError("failed")
        assert torch.get_num_threads() == 2 and sets == [1, 2, 1, 2]
        with kept_helpers():  # not narrowed: nothing to restore
            pass
        assert sets == [1, 2, 1, 2]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("configured", [2, 0])
def test_a_jobs_chunks_narrow_torch_threads_once(monkeypatch, configured):
    """Three ranking calls in one block set torch's count twice in all (narrowed, restored),
    and each call runs on two threads, also where the configuration takes torch's count (0)."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    fusion = ScoreFusion(0.3, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    two = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=configured)), fusion)
    want = rank_items(two, data, everyone, 10, chunk=200)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sets, calls = [], []
        set_num_threads = torch.set_num_threads
        monkeypatch.setattr(torch, "set_num_threads", lambda n: sets.append(n) or set_num_threads(n))
        beside = FusedRecommender._forward_beside_search
        monkeypatch.setattr(FusedRecommender, "_forward_beside_search",
                            lambda self, d, inst, threads: calls.append(threads) or beside(self, d, inst, threads))  # fmt: skip
        got = rank_items(two, data, everyone, 10, chunk=40)  # three ranking calls
        assert sets == [1, 2] and torch.get_num_threads() == 2 and calls == [2, 2, 2]
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_concurrent_rankings_in_chunks_rank_as_one_call():
    """Three fused rankings at once, each in chunks that share its own kept helper (a server's
    requests): each the one-thread ranking."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    fusion = ScoreFusion(0.3, "sigmoid", TifuScorer.build(data, sp["train"], TifuParams(k=10)))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    want = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=1)), fusion).rank(data, everyone, 10)
    two = FusedRecommender(recommender(data, DNNTSPConfig(embed_dim=8, threads=2)), fusion)
    got: list = [None] * 3
    callers = [threading.Thread(target=lambda i=i: got.__setitem__(i, rank_items(two, data, everyone, 10, chunk=40))) for i in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(120)
    for g in got:
        assert g is not None
        np.testing.assert_array_equal(g[0], want[0])
        np.testing.assert_array_equal(g[1], want[1])


def test_a_dense_forward_after_a_narrowed_call_runs_on_the_jobs_count(monkeypatch):
    """A configuration without the shared form (user_context) tries it, narrowed, and falls back
    to the dense forward: with threads 0 (torch's count), that forward runs on the job's two
    threads in every call, not on the one the narrowing left."""
    import basketgnn.recommenders.neural as neural_module

    data = planted_data(n_users=90, n_items=40)
    rec = recommender(data, DNNTSPConfig(embed_dim=8, threads=0, user_context=True))
    everyone = Instances(np.arange(data.n_users), data.n_baskets_per_user.astype(np.int64))
    seen = []
    score_source = neural_module.score_source
    monkeypatch.setattr(neural_module, "score_source",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or score_source(*a, **k))  # fmt: skip
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rank_items(rec, data, everyone, 10, chunk=30)  # three ranking calls
        assert seen == [2, 2, 2] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_shared_parts_run_each_part_once_and_stop_at_an_error():
    from concurrent.futures import ThreadPoolExecutor

    ran = []
    parts = SharedParts(list(range(50)), lambda i: ran.append(i) or i * i)
    with ThreadPoolExecutor(3) as pool:
        for f in [pool.submit(parts.drain) for _ in range(3)]:
            f.result()
    assert sorted(ran) == list(range(50)) and parts.results() == [i * i for i in range(50)]

    def fail_at_3(i):
        if i == 3:
            raise ValueError("part 3")
        return i

    parts = SharedParts(list(range(50)), fail_at_3)
    with pytest.raises(ValueError, match="part 3"):
        parts.drain()
    parts.drain()  # another thread stops too
    assert parts.results()[4:] == [None] * 46


def test_in_parts_returns_each_parts_result_in_order_and_raises_a_parts_error():
    got = in_parts(lambda i: i * i, list(range(40)), 2)
    assert got == [i * i for i in range(40)]
    assert in_parts(lambda i: i, [], 2) == [] and in_parts(lambda i: i + 1, [4], 2) == [5]
    assert in_parts(lambda i: -i, [1, 2, 3], 1) == [-1, -2, -3]

    def fail_at_7(i):
        if i == 7:
            raise ValueError("part 7")
        return i

    with pytest.raises(ValueError, match="part 7"):
        in_parts(fail_at_7, list(range(20)), 2)
