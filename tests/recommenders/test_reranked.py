"""The re-ranking stage around a trained model: the model's scores it reads, its ranking, and
``rerank: true`` through the one train and load_trained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from basketgnn import workflow
from basketgnn.data.split import Instances, make_split
from basketgnn.engine.checkpoint import load_checkpoint, set_section
from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSP, SPEC, DNNTSPConfig
from basketgnn.recommenders import reranked
from basketgnn.recommenders.neural import NeuralRecommender
from basketgnn.recommenders.reranked import RerankedRecommender
from basketgnn.scoring import rerank
from basketgnn.scoring.tifu import TifuParams
from basketgnn.workflow.training import settings
from tests.support.planted import planted_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = {"embed_dim": 8, "batch_size": 32, "lr": 1e-2, "threads": 1}


def model(data, user_context=False):
    torch.manual_seed(0)
    config = DNNTSPConfig(embed_dim=8, threads=1, user_context=user_context)
    rec = NeuralRecommender(SPEC, config)
    rec.model = DNNTSP.from_config(data.n_items, config)
    with torch.no_grad():
        rec.model.scorer.out.weight.normal_(0, 3.0)
    rec.item_ids = data.item_ids
    return rec


@pytest.mark.parametrize("user_context", [False, True])  # the shared form, and dense scores
def test_model_logits_are_the_models_scores_of_the_items(user_context, monkeypatch):
    data = planted_data(n_users=60, n_items=30)
    inst = make_split(data, "temporal")["test"]
    rec = model(data, user_context)
    assert (rec.shared_scores(data, inst) is None) == user_context
    items = np.stack([np.random.default_rng(i).permutation(30)[:9] for i in range(len(inst))])
    monkeypatch.setattr(reranked, "CHUNK", 16)  # several chunks
    got = reranked.model_logits(rec, data)(inst, items)
    want = np.take_along_axis(rec.score(data, inst), items, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if not user_context:  # read at the items alone: the whole shared form's values there, bit for bit
        whole = rec.shared_scores(data, inst)
        at_items = rec.shared_scores(data, inst, wanted=items)
        np.testing.assert_array_equal(got, reranked.shared_values(whole, items))
        assert 0 < len(at_items.items) < len(whole.items)


def test_the_wrapper_ranks_by_the_stage_and_refuses_more_than_its_candidates(monkeypatch):
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    rec = model(data)
    stage, record = reranked.learn(rec, data, sp["train"], sp["validate"], TifuParams(k=10, m=2))
    wrapper = RerankedRecommender(rec, stage)
    items, scores = wrapper.rank(data, sp["test"], 10)
    want = stage.order(data, sp["test"], reranked.model_logits(rec, data))
    np.testing.assert_array_equal(items, want[0][:, :10])
    np.testing.assert_array_equal(scores, want[1][:, :10])
    assert wrapper.item_ids is rec.item_ids and wrapper.params()["rerank_candidates"] == 40
    # On two threads the parts are shared by the threads: the same rows, in one part or in many.
    rec.with_threads(2)
    for part, last in ((1024, 128), (7, 2)):
        monkeypatch.setattr(reranked, "PART", part)
        monkeypatch.setattr(reranked, "LAST_PART", last)
        for a, b in zip(wrapper.rank(data, sp["test"], 10), (items, scores)):
            np.testing.assert_array_equal(a, b)
    rec.with_threads(1)
    # The scores read in full, not at the candidates alone: the same rows.
    whole = stage.order(data, sp["test"], lambda inst, it: reranked.shared_values(rec.shared_scores(data, inst), it))
    np.testing.assert_array_equal(whole[0][:, :10], items)
    np.testing.assert_array_equal(whole[1][:, :10], scores)
    # Beyond its candidates: the shipped ranking's next items that are not candidates.
    few = RerankedRecommender(rec, rerank.RerankStage(stage.scorer, stage.item_stats, stage.net, 5, stage.pairs))
    items, scores = few.rank(data, sp["test"], 12)
    shipped = rec.rank(data, sp["test"], 12)[0]
    assert items.shape == (len(sp["test"]), 12) and (np.diff(scores, axis=1) < 0).all()
    for r in range(len(items)):
        candidates = set(few.stage.candidate_items(data, Instances(sp["test"].users[r : r + 1], sp["test"].n_history[r : r + 1]))[0][0].tolist())
        assert set(items[r, :5].tolist()) == candidates and len(set(items[r].tolist())) == 12
        assert items[r, 5:].tolist() == [i for i in shipped[r].tolist() if i not in candidates][:7]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    entry = workflow.ModelEntry("dnntsp", {**TINY, "epochs": 3, "rerank": True}, out_dir=folder)
    return workflow.train(entry, data, sp), data, sp, folder


def test_train_with_rerank_stores_its_choice_and_load_trained_ranks_alike(trained):
    outcome, data, sp, folder = trained
    record = outcome.rerank
    assert record is not None and record["kind"] == "rerank" and record["candidates"] == 40
    section = load_checkpoint(folder / "best.pt").sections["rerank"]
    assert section["choice"] == record and (section["state"] is not None) == record["kept"]
    assert isinstance(outcome.recommender, RerankedRecommender) == record["kept"]
    loaded = workflow.load_trained(folder / "best.pt")
    assert type(loaded) is type(outcome.recommender)
    for a, b in zip(loaded.rank(data, sp["test"], 10), outcome.recommender.rank(data, sp["test"], 10)):
        np.testing.assert_array_equal(a, b)


def test_a_stored_stage_wraps_only_where_the_options_ask_for_it(trained, tmp_path):
    outcome, data, sp, folder = trained
    shipped = workflow.load_trained(folder / "best.pt")
    shipped = getattr(shipped, "shipped", shipped)
    stage, record = reranked.learn(shipped, data, sp["train"], sp["validate"], TifuParams(k=10, m=2))
    path = tmp_path / "kept.pt"
    path.write_bytes((folder / "best.pt").read_bytes())
    set_section(path, reranked.SECTION, {"choice": {**record, "kept": True}, "state": stage.state()})
    loaded = workflow.load_trained(path)
    assert isinstance(loaded, RerankedRecommender)
    np.testing.assert_array_equal(loaded.rank(data, sp["test"], 10)[0], RerankedRecommender(shipped, stage).rank(data, sp["test"], 10)[0])
    # The same section under a fusion run without rerank (an earlier run's leftover): not read.
    state = torch.load(path, weights_only=False)
    state["sections"]["fusion"]["options"]["rerank"] = False
    torch.save(state, tmp_path / "off.pt")
    assert not isinstance(workflow.load_trained(tmp_path / "off.pt"), RerankedRecommender)
    # A stage section that cannot be read names the file.
    state["sections"]["fusion"]["options"]["rerank"] = True
    state["sections"]["rerank"] = {"choice": {}, "state": {"features": ["x"]}}
    torch.save(state, tmp_path / "broken.pt")
    with pytest.raises(UserError, match=r"broken\.pt: its re-ranking section cannot be read"):
        workflow.load_trained(tmp_path / "broken.pt")


def test_rerank_needs_the_fusion_with_tifu():
    with pytest.raises(Exception, match="rerank: true reads TIFU-KNN's parts; it needs fusion: tifu"):
        settings(workflow.ModelEntry("dnntsp", {"fusion": "off", "rerank": True}))
    assert settings(workflow.ModelEntry("dnntsp", {"rerank": True})).fusion.rerank


def test_reasons_of_a_reranked_item_are_the_shipped_rankings_reasons_of_it(trained):
    from basketgnn.recommenders.reasons import explain

    outcome, data, sp, folder = trained
    shipped = getattr(outcome.recommender, "shipped", outcome.recommender)
    stage, _ = reranked.learn(shipped, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), choose_pairs=False)
    wrapper = RerankedRecommender(shipped, stage)
    items, _ = wrapper.rank(data, sp["test"], 5)
    got = explain(wrapper, data, sp["test"], items)
    plain = explain(shipped, data, sp["test"], items)
    assert len(got) == len(sp["test"]) and all(len(row) == 5 for row in got)
    assert stage.pairs is not None
    hist = data.histories(sp["test"].users, sp["test"].n_history)
    strongest = stage.pairs.strongest(data, sp["test"], hist, items, 3)
    named = 0
    for row, plain_row, pairs_row in zip(got, plain, strongest):
        for reasons, plain_reasons, pairs in zip(row, plain_row, pairs_row):
            assert reasons[0]["kind"] == "rerank" and "re-ranking stage" in reasons[0]["text"]
            assert "what other customers buy with the customer's items" in reasons[0]["text"]
            # Last, the stage's own: the customer's items that the item is most bought with.
            if pairs:
                named += 1
                assert reasons[-1]["kind"] == "bought_with"
                assert [w["item_id"] for w in reasons[-1]["with"]] == [str(data.item_ids[i]) for i, _, _ in pairs]
                assert str(data.item_ids[pairs[0][0]]) in reasons[-1]["text"]
                reasons = reasons[:-1]
            assert reasons[2:] == plain_reasons[1:]  # the repeats, neighbours, transitions, attention
            assert reasons[1]["parts"] == plain_reasons[0]["parts"]
            fused = plain_reasons[0]["text"].startswith("score ")
            assert reasons[1]["text"] == ("fused " if fused else "") + plain_reasons[0]["text"]
    assert named > 0
    # A stage without the item pairs names neither them nor a bought_with reason.
    plain_stage, record = reranked.learn(shipped, data, sp["train"], sp["validate"], TifuParams(k=10, m=2), pairs=0)
    assert plain_stage.pairs is None and not record["item_pairs_kept"]
    without = RerankedRecommender(shipped, plain_stage)
    items, _ = without.rank(data, sp["test"], 5)
    for row, plain_row in zip(explain(without, data, sp["test"], items), explain(shipped, data, sp["test"], items)):
        for reasons, plain_reasons in zip(row, plain_row):
            assert reasons[0]["kind"] == "rerank" and "what other customers buy" not in reasons[0]["text"]
            assert "when and how regularly the customer bought the item" in reasons[0]["text"]
            assert reasons[2:] == plain_reasons[1:] and all(r["kind"] != "bought_with" for r in reasons)


@pytest.mark.parametrize("user_context", [False, True])  # the shared form, and dense scores
def test_on_two_threads_each_part_is_searched_then_scored_at_its_candidates(user_context, monkeypatch):
    """Each part runs whole on its thread: the search, then the forward of its own customers at
    their candidates alone; a configuration without the shared form keeps the parts' searches
    and orders them by the dense scores. The rows are the one-thread ones either way, and a
    part's error goes up."""
    data = planted_data(n_users=120, n_items=40)
    sp = make_split(data, "temporal")
    rec = model(data, user_context)
    stage, _ = reranked.learn(rec, data, sp["train"], sp["validate"], TifuParams(k=10, m=2))
    stage = rerank.RerankStage(stage.scorer, stage.item_stats, stage.net, 8, stage.pairs)
    want = RerankedRecommender(rec, stage).rank(data, sp["test"], 5)
    monkeypatch.setattr(reranked, "PART", 9)
    monkeypatch.setattr(reranked, "LAST_PART", 2)
    rec.with_threads(2)
    log: list[tuple] = []
    prepare, plan_of = stage.prepare, rec.shared_plan
    monkeypatch.setattr(stage, "prepare", lambda d, inst: log.append(("search", len(inst))) or prepare(d, inst))

    def plan_logged(d, inst):
        plan = plan_of(d, inst)
        forward = plan.forward
        plan.forward = lambda idx, wanted=None: log.append(("forward", len(inst), wanted)) or forward(idx, wanted)
        return plan

    monkeypatch.setattr(rec, "shared_plan", plan_logged)
    got = RerankedRecommender(rec, stage).rank(data, sp["test"], 5)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    searched = [entry[1] for entry in log if entry[0] == "search"]
    # Every part searched once, also without the shared form (its preparation is kept).
    assert sorted(searched) == sorted(reranked.part_sizes(len(sp["test"]), 2)) and len(searched) > 3
    forwards = [entry for entry in log if entry[0] == "forward"]
    assert forwards and all(w.shape[1] == 8 and len(w) <= n for _, n, w in forwards)  # at the candidates
    # Each part's own forward; without the shared form, then the dense scores of everyone's.
    assert all(n <= 9 for _, n, _ in forwards) != user_context

    def fail(d, inst):
        raise RuntimeError("search failed")

    monkeypatch.setattr(stage, "prepare", fail)
    with pytest.raises(RuntimeError, match="search failed"):
        RerankedRecommender(rec, stage).rank(data, sp["test"], 5)


@pytest.mark.parametrize("threads", [0, 1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 2, 4, 65, 100, 386, 1025, 2829, 20_000])
def test_part_sizes_are_few_and_shrink_to_the_end(n, threads):
    sizes = reranked.part_sizes(n, threads)
    assert sum(sizes) == n and all(s > 0 for s in sizes) and sizes == sorted(sizes, reverse=True)
    assert all(s <= reranked.PART for s in sizes)
    t = max(threads, 1)
    floor = min(reranked.LAST_PART, -(-n // t))
    assert all(s >= floor for s in sizes[:-1])  # only the last part is what remains
    if n >= t * reranked.LAST_PART:  # every thread has a part
        assert len(sizes) >= t
    if n >= 2 * t * reranked.PART:  # many customers: full parts, then shorter ones
        assert sizes[0] == reranked.PART and sizes[-1] < reranked.PART
