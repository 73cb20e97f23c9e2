"""The JSON split files (``data/ingest/json_splits.py``) in the DNNTSP format, whose user keys
repeat across parts ("user0" in train, validate and test, as the authors' own files do): each
part's user is its own customer, ``"<part>:<key>"``, and the whole chain train -> evaluate
--checkpoint -> predict --user -> recommend works on them."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.dataset import PARTS
from basketgnn.data.ingest import read_dnntsp_json
from basketgnn.errors import UserError
from tests.support.cli import run_ok, run_status


def _repeated_keys(n_per_part: dict[str, int], seed: int = 0) -> dict[str, dict[str, list[list[int]]]]:
    """Every part numbers its users from "user0"; each user re-buys a favourite item (their
    number mod 12) in every basket, so a model has something to learn."""
    rng = random.Random(seed)
    return {
        part: {
            f"user{u}": [sorted({u % 12, *rng.sample(range(12, 20), rng.randint(0, 2))})
                         for _ in range(rng.randint(2, 5))]
            for u in range(n)
        }
        for part, n in n_per_part.items()
    }  # fmt: skip


def test_repeated_keys_become_part_prefixed_ids_in_the_predefined_split(tmp_path):
    raw = _repeated_keys({"train": 5, "validate": 2, "test": 3})
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(raw))
    data = read_dnntsp_json(path)
    expected = [f"{p}:user{u}" for p in PARTS for u in range(len(raw[p]))]
    assert data.user_ids.tolist() == expected
    assert np.bincount(data.user_part).tolist() == [5, 2, 3]
    assert data.meta["user_ids_prefixed_with_part"] is True
    for u, uid in enumerate(data.user_ids):
        part, key = uid.split(":")
        assert [sorted(data.item_ids[b].astype(int).tolist()) for b in data.user_baskets(u)] == raw[part][key]
    np.testing.assert_array_equal(read_dnntsp_json(path).user_ids, data.user_ids)  # stable


def test_unique_keys_are_kept_as_they_are(tmp_path):
    raw = _repeated_keys({"train": 2, "validate": 1, "test": 1})
    raw = {p: {f"{p}-{k}": v for k, v in users.items()} for p, users in raw.items()}
    path = tmp_path / "uniq.json"
    path.write_text(json.dumps(raw))
    data = read_dnntsp_json(path)
    assert data.user_ids.tolist() == ["train-user0", "train-user1", "validate-user0", "test-user0"]
    assert data.meta["user_ids_prefixed_with_part"] is False


def test_a_key_repeated_within_one_part_is_an_error(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"train": {"u1": [[1], [2]], "u1": [[3], [4]]}, "validate": {}, "test": {}}')
    with pytest.raises(UserError, match=r"dup\.json: the key 'u1' appears twice in the same object"):
        read_dnntsp_json(path)


def test_train_evaluate_predict_recommend_chain(tmp_path, capsys):
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(_repeated_keys({"train": 40, "validate": 12, "test": 12})))
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nbatch_size: 16\nfusion: off\n")
    out = tmp_path / "out"
    run_ok("train", "--data", str(path), "--config", str(config), "--out", str(out),
           "--epochs", "1", "--no-progress")  # fmt: skip
    split = json.loads((out / "split.json").read_text())
    assert split["parts"]["test"][:2] == ["test:user0", "test:user1"]

    run_ok("evaluate", "--checkpoint", str(out / "best.pt"), "--output", str(tmp_path / "e.json"))
    result = json.loads((tmp_path / "e.json").read_text())
    assert result["n_users"] == 12 and 0 <= result["metrics"]["recall@10"] <= 1

    capsys.readouterr()
    run_ok("predict", "--checkpoint", str(out / "best.pt"), "--user", "validate:user3", "--k", "3")
    shown = capsys.readouterr().out
    # validate:user3 is a different customer from train:user3 / test:user3: its own history.
    n_baskets = len(_repeated_keys({"train": 40, "validate": 12, "test": 12})["validate"]["user3"])
    assert f"next basket ({n_baskets} past baskets)" in shown

    assert run_status("predict", "--checkpoint", str(out / "best.pt"), "--user", "user3") == 2
    assert "ids are '<part>:<key>', e.g. 'train:user0'" in " ".join(capsys.readouterr().err.split())

    recs_path = tmp_path / "recs.csv"
    run_ok("recommend", "--checkpoint", str(out / "best.pt"), "--out", str(recs_path), "--k", "2")
    recs = pd.read_csv(recs_path, dtype=str)
    assert len(recs) == 2 * 64 and recs["customer_id"].nunique() == 64
    assert {"train:user0", "validate:user0", "test:user0"} <= set(recs["customer_id"])
