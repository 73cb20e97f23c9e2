"""The commands that use a trained checkpoint (basketgnn/cli/predict.py): `predict` one
customer's next basket (or a typed history's), and `recommend` top-k rows for every customer:
DNNTSP fused with TIFU-KNN and the sequential models, shards and torchrun ranks against one
process, thread counts, and bad --shard values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from basketgnn.workflow.recommendations import MANIFEST
from tests.support.cli import make_checkpoint, run

ZOO = ["sasrec", "bert4rec", "din"]


def parts(folder) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("part-*.parquet"))], ignore_index=True)


# --- predict ---------------------------------------------------------------------------------


def test_predict_for_a_customer_and_for_a_typed_history(monkeypatch, capsys, trained, log_csv):
    customer = str(pd.read_csv(log_csv)["customer_id"].iloc[0])
    code, out, err = run(monkeypatch, capsys, "predict", "--checkpoint", str(trained / "best.pt"),
                         "--user", customer, "--k", "5")
    assert code == 0, err
    assert out.count("\n") >= 5 and "next basket" in out
    item = str(pd.read_csv(log_csv)["item_id"].iloc[0])
    code, out, err = run(monkeypatch, capsys, "predict", "--checkpoint", str(trained / "best.pt"),
                         "--history", json.dumps([[item, "no-such-item"], [item]]), "--k", "3")
    assert code == 0 and "1 item id(s) the model does not know were ignored: no-such-item" in " ".join(err.split())
    assert "next basket (2 past baskets)" in out


def test_predict_explain_and_recommend_reasons_give_the_same_reasons(monkeypatch, capsys, checkpoint, tmp_path):
    ckpt, data = checkpoint
    customer = str(data.user_ids[2])
    code, out, err = run(monkeypatch, capsys, "predict", "--checkpoint", str(ckpt), "--user", customer,
                         "--k", "3", "--explain")  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.replace("│", " ").split())
    assert "why" in flat and "score" in flat and "most similar customers" in flat
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt), "--k", "3",
                       "--out", str(tmp_path / "recs.parquet"), "--reasons")  # fmt: skip
    assert code == 0, err
    recs = pd.read_parquet(tmp_path / "recs.parquet")
    assert list(recs.columns) == ["customer_id", "item_id", "rank", "score", "reasons"]
    for _, row in recs.iterrows():
        reasons = json.loads(row["reasons"])
        assert reasons[0]["kind"] == "score" and np.isclose(reasons[0]["score"], row["score"], rtol=1e-6)
        assert reasons[1]["kind"] == "repeat"
    mine = recs[recs.customer_id == customer]
    for text in (json.loads(r)[2]["text"] for r in mine["reasons"]):  # the neighbours' line
        assert " ".join(text.split()) in flat


def test_predict_k_below_1_is_exit_2(monkeypatch, capsys):
    code, _, _ = run(monkeypatch, capsys, "predict", "--checkpoint", "x.pt", "--user", "u", "--k", "0")
    assert code == 2


# --- recommend: a trained DNNTSP and the sequential models -------------------------------------


def test_recommend_writes_top_k_for_every_customer(monkeypatch, capsys, trained, log_csv, tmp_path):
    out = tmp_path / "recs.parquet"
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(trained / "best.pt"),
                       "--out", str(out), "--k", "7")
    assert code == 0, err
    recs = pd.read_parquet(out)
    customers = pd.read_csv(log_csv)["customer_id"].astype(str).unique()
    assert list(recs.columns) == ["customer_id", "item_id", "rank", "score"]
    assert len(recs) == 7 * len(customers) and set(recs["customer_id"].astype(str)) == set(customers)
    assert (recs.groupby("customer_id")["score"].diff().dropna() <= 0).all()


@pytest.mark.parametrize("model", ZOO)
def test_recommend_with_each_zoo_checkpoint(monkeypatch, capsys, zoo_trained, log_csv, tmp_path, model):
    run_dir, _ = zoo_trained(model)
    recs = tmp_path / f"{model}-recs.csv"
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(run_dir / "best.pt"),
                       "--out", str(recs), "--k", "5")
    assert code == 0, err
    customers = pd.read_csv(log_csv)["customer_id"].astype(str).unique()
    assert len(pd.read_csv(recs)) == 5 * len(customers)


# --- recommend: shards, ranks and threads (an untrained fused checkpoint) ----------------------


def test_shards_under_any_scheduler_equal_one_process(monkeypatch, capsys, checkpoint, tmp_path):
    ckpt, data = checkpoint
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    common = ["recommend", "--checkpoint", str(ckpt), "--k", "6", "--chunk", "7"]
    code, out, err = run(monkeypatch, capsys, *common, "--out", str(tmp_path / "one"))
    assert code == 0, err
    whole = parts(tmp_path / "one")
    assert len(whole) == 6 * data.n_users and f"{6 * data.n_users:,} rows" in out

    for i in range(3):
        code, out, err = run(monkeypatch, capsys, *common, "--out", str(tmp_path / "ds"), "--shard", f"{i}/3")
        assert code == 0, err
        assert ("complete:" in out) == (i == 2)
    assert parts(tmp_path / "ds").equals(whole)  # rows and scores, exactly
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    assert manifest["customers"] == data.n_users and manifest["rows"] == len(whole)
    assert manifest["source"]["checkpoint"] == str(ckpt) and len(manifest["source"]["checkpoint_sha256"]) == 64
    assert len(manifest["parts"]) == -(-data.n_users // 7)

    # One file, all customers in one chunk: the model sees other batches, so scores may differ
    # in the last float bits (and items whose scores are that close may swap), nothing more.
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt), "--k", "6",
                       "--out", str(tmp_path / "recs.parquet"))  # fmt: skip
    assert code == 0, err
    single = pd.read_parquet(tmp_path / "recs.parquet")
    assert single["customer_id"].tolist() == whole["customer_id"].tolist()
    assert np.allclose(single["score"], whole["score"], rtol=1e-5, atol=1e-6)


def test_torchrun_ranks_take_their_shard(monkeypatch, capsys, checkpoint, tmp_path):
    ckpt, data = checkpoint
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        code, out, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt),
                             "--out", str(tmp_path / "ds"), "--k", "4", "--chunk", "10")  # fmt: skip
        assert code == 0, err
        assert f"shard {rank}/2" in out
    monkeypatch.delenv("WORLD_SIZE")
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt),
                       "--out", str(tmp_path / "one"), "--k", "4", "--chunk", "10")  # fmt: skip
    assert code == 0, err
    assert parts(tmp_path / "ds").equals(parts(tmp_path / "one"))
    assert (tmp_path / "ds" / MANIFEST).is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "3/3"], r"--shard '3/3': expected i/n"),
        (["--shard", "two"], r"--shard 'two': expected i/n"),
        (["--shard", "0/2", "--out-file"], r"needs a folder"),
    ],
)
def test_bad_shard_is_one_message_and_exit_2(monkeypatch, capsys, checkpoint, tmp_path, args, message):
    ckpt, _ = checkpoint
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    out = tmp_path / ("recs.parquet" if "--out-file" in args else "ds")
    args = [a for a in args if a != "--out-file"]
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt), "--out", str(out), *args)
    assert code == 2 and "Traceback" not in err
    assert re.search(message, " ".join(err.split()))
    assert not out.exists()


def test_torchrun_with_two_processes_writes_the_one_process_parts(monkeypatch, capsys, checkpoint, tmp_path):
    """The real launcher: two ranks of `torchrun -m basketgnn recommend` share one folder.
    About 10 CPU-seconds (two fresh interpreters importing torch): the slowest test here."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.is_file():
        pytest.skip(f"{torchrun} not found")
    ckpt, _ = checkpoint
    common = ["recommend", "--checkpoint", str(ckpt), "--k", "5", "--chunk", "9"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "basketgnn",
                           *common, "--out", str(tmp_path / "ranks")],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, _, err = run(monkeypatch, capsys, *common, "--out", str(tmp_path / "one"))
    assert code == 0, err
    assert parts(tmp_path / "ranks").equals(parts(tmp_path / "one"))
    shard_manifests = sorted(p.name for p in (tmp_path / "ranks").glob("_manifest.shard-*"))
    assert shard_manifests == ["_manifest.shard-00000-of-00002.json", "_manifest.shard-00001-of-00002.json"]
    assert json.loads((tmp_path / "ranks" / MANIFEST).read_text())["shards"] == 2


def test_fused_checkpoint_ranks_the_same_on_one_and_two_threads(monkeypatch, capsys, tmp_path):
    """The default fusion with TIFU-KNN (0 < λ < 1) through `recommend`: the candidate path on one
    thread and on two (search on worker threads) writes the rows of the dense ranking."""
    from basketgnn.data.dataset import BasketData
    from basketgnn.data.split import Instances
    from basketgnn.metrics import top_k
    from basketgnn.recommenders.fused import FusedRecommender
    from basketgnn.workflow import load_trained

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ckpt, data = make_checkpoint(tmp_path, weight=0.4)
    assert isinstance(load_trained(ckpt), FusedRecommender)
    written = {}
    for n in (1, 2):
        out = tmp_path / f"recs{n}.parquet"
        code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt), "--out", str(out),
                           "--k", "6", "--threads", str(n))  # fmt: skip
        assert code == 0, err
        written[n] = pd.read_parquet(out)
    pd.testing.assert_frame_equal(written[1], written[2])
    everyone = Instances(np.arange(data.n_users), BasketData.load(tmp_path / "data").n_baskets_per_user.astype(np.int64))
    scores = load_trained(ckpt).score(data, everyone)
    want = top_k(scores, 6)
    got = written[1]["item_id"].map({str(i): j for j, i in enumerate(data.item_ids)}).to_numpy().reshape(-1, 6)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(written[1]["score"].to_numpy().reshape(-1, 6),
                                  np.take_along_axis(scores, want, 1).astype(np.float32))  # fmt: skip
