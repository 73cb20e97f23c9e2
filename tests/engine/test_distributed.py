"""DistributedDataParallel training with 2 gloo processes on CPU: only rank 0 writes, every rank
ends with the same weights and the same decisions, resume continues exactly; the launcher
(torchrun -m basketgnn train) end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from basketgnn.engine.batching import BatchPlan
from basketgnn.errors import UserError

WORLD = 2
# Tiny and fast; patience 2 so that early stopping can act within the epochs run.
OPTIONS = dict(lr=1e-2, batch_size=16, embed_dim=8, patience=2, threads=1)
# "cut": killed after 1 epoch, then resumed; "warm": warm-started from whole's best.pt, which
# rank 0 alone reads.
RUNS = (("whole", 3), ("cut", 1), ("cut", 3), ("warm", 1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, root: str, ports: list[int]) -> None:
    """One rank: the engine opens the group itself from torchrun's environment variables."""
    from basketgnn.data.split import make_split
    from basketgnn.engine import callbacks, trainer
    from basketgnn.models.dnntsp import SPEC, DNNTSPConfig
    from tests.support.planted import planted_data

    written: list[str] = []
    if rank != 0:  # record (and do not perform) any write a non-zero rank attempts
        def record(path, *a, **k):
            written.append(str(path))
            raise AssertionError(f"rank {rank} writes {path}")

        for name in ("save_checkpoint", "add_extras", "write_text", "atomic_path", "open"):
            setattr(callbacks, name, record)
    data = planted_data(n_users=60, n_items=30)
    sp = make_split(data, "temporal")
    for (name, epochs), port in zip(RUNS, ports):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
                          RANK=str(rank), LOCAL_RANK=str(rank))
        calls: list[int] = []
        config = DNNTSPConfig(**OPTIONS, epochs=epochs)
        module, result = trainer.train_model(
            SPEC, data, sp["train"], sp["validate"], config, Path(root) / name,
            progress=False, on_epoch=lambda r, calls=calls: calls.append(r["epoch"]),
            warm_start=Path(root) / "whole" / "best.pt" if name == "warm" else None,
        )
        assert not torch.distributed.is_initialized()  # the engine closed its group
        torch.save(
            {"state": module.state_dict(), "history": result.history, "best_epoch": result.best_epoch,
             "epochs_run": result.epochs_run, "on_epoch": calls, "written": list(written),
             "warm_start": result.warm_start,
             "best_validation": result.best_validation},
            Path(root) / f"{name}-{epochs}-rank{rank}.pt",
        )


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    procs = mp.spawn(_worker, args=(str(root), [_free_port() for _ in RUNS]), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 600
    while not procs.join(timeout=5):  # raises if a rank failed
        if time.monotonic() > deadline:  # a hang must fail the test, never stall CI
            for p in procs.processes:
                p.kill()
            pytest.fail("the 2-process training did not finish within 600 s (a rank hangs)")

    def result(name: str, epochs: int, rank: int) -> dict:
        return torch.load(root / f"{name}-{epochs}-rank{rank}.pt", weights_only=False)

    return root, result


def test_only_rank_0_writes_files_and_reports_epochs(ddp_runs):
    root, result = ddp_runs
    r0, r1 = result("whole", 3, 0), result("whole", 3, 1)
    assert r1["written"] == [] and r1["on_epoch"] == []
    assert r0["on_epoch"] == [r["epoch"] for r in r0["history"]]
    assert sorted(p.name for p in (root / "whole").iterdir()) == ["best.pt", "resume.pt", "train_log.jsonl"]
    log = [json.loads(line) for line in (root / "whole" / "train_log.jsonl").read_text().splitlines()]
    assert log == r0["history"]  # one line per epoch: nobody else appended
    assert all(r["processes"] == WORLD for r in log)


def test_ranks_end_with_identical_weights_and_decisions(ddp_runs):
    _, result = ddp_runs
    r0, r1 = result("whole", 3, 0), result("whole", 3, 1)
    for k, v in r0["state"].items():
        assert torch.equal(v, r1["state"][k]), k
    # Losses, validation metrics, the best epoch and the stopping epoch: the same on both.
    drop_times = [{k: v for k, v in r.items() if not k.endswith("_s")} for r in r0["history"]]
    assert drop_times == [{k: v for k, v in r.items() if not k.endswith("_s")} for r in r1["history"]]
    assert (r0["best_epoch"], r0["epochs_run"]) == (r1["best_epoch"], r1["epochs_run"])
    losses = [r["train_loss"] for r in r0["history"]]
    assert losses[-1] < losses[0]  # it learns


def test_resume_under_two_processes_continues_exactly(ddp_runs):
    root, result = ddp_runs
    whole, resumed = result("whole", 3, 0), result("cut", 3, 0)
    assert [r["epoch"] for r in result("cut", 1, 0)["history"]] == [1]
    key = ["epoch", "train_loss", "lr", "val_mean_ndcg", "best"]
    assert [[r[k] for k in key] for r in resumed["history"]] == [[r[k] for k in key] for r in whole["history"]]
    for rank in range(WORLD):
        state = result("cut", 3, rank)["state"]
        for k, v in whole["state"].items():
            assert torch.equal(v, state[k]), (rank, k)
    log = [json.loads(line)["epoch"] for line in (root / "cut" / "train_log.jsonl").read_text().splitlines()]
    assert log == [r["epoch"] for r in whole["history"]]


def test_a_warm_start_read_by_rank_0_reaches_every_rank(ddp_runs):
    _, result = ddp_runs
    r0, r1 = result("warm", 1, 0), result("warm", 1, 1)
    assert r0["warm_start"] is not None and r1["warm_start"] is None  # only rank 0 read the file
    for k, v in r0["state"].items():
        assert torch.equal(v, r1["state"][k]), k
    assert (r0["best_epoch"], r0["epochs_run"]) == (r1["best_epoch"], r1["epochs_run"])
    # Epoch 0 (the warm model) is the one to beat: the kept model validates at least as well as
    # the checkpoint it started from.
    # (the history keeps 6 decimals, so compare to its rounding)
    best_whole = max(r["val_mean_ndcg"] for r in result("whole", 3, 0)["history"])
    assert r0["best_validation"]["mean_ndcg"] >= best_whole - 5e-7
    assert r1["best_validation"] == r0["best_validation"]


def test_every_rank_runs_the_same_steps_and_every_row_once():
    lengths = np.random.default_rng(1).integers(1, 9, size=115)  # 12 batches of 10, the last of 5
    for world in (2, 3, 7):
        whole = BatchPlan(10).epoch(lengths, 0, 1)
        ranks = [BatchPlan(10, world_size=world, rank=r).epoch(lengths, 0, 1) for r in range(world)]
        steps = {len(r) for r in ranks}
        assert len(steps) == 1  # the same number of steps on every rank
        assert all(len(b) >= 1 for r in ranks for b in r)  # no rank has an empty step
        rows = np.concatenate([b for r in ranks for b in r])
        assert sorted(rows.tolist()) == list(range(115))  # every row exactly once
        # Step s of all ranks together is one batch of the one-process plan (or two, when the
        # plan's short batch joined its predecessor).
        for s in range(steps.pop()):
            step_rows = set(np.concatenate([r[s] for r in ranks]).tolist())
            assert any(set(b.tolist()) <= step_rows for b in whole)
        if world == 7:  # the short batch of 5 (< 7 rows) was joined to the one before it
            assert len(ranks[0]) == len(whole) - 1
        else:
            assert len(ranks[0]) == len(whole)


def test_too_few_rows_for_the_processes_is_a_clear_error():
    with pytest.raises(UserError, match="batch_size 2 .* over 3 processes.*Raise batch_size"):
        BatchPlan(2, world_size=3, rank=0).epoch(np.ones(10), 0, 1)


def test_no_process_group_without_torchrun(monkeypatch):
    from test_trainer import fit

    from tests.support.planted import planted_data

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rec, _ = fit(planted_data(n_users=40), epochs=1)
    assert not torch.distributed.is_initialized()
    assert "processes" not in rec.result.history[0]


def test_torchrun_train_command(tmp_path):
    """`torchrun -m basketgnn train` with 2 processes: one console, one run folder, a checkpoint
    that `evaluate` reads."""
    from tests.support.planted import planted_data

    planted_data(n_users=60, n_items=30).save(tmp_path / "data")
    (tmp_path / "small.yaml").write_text("".join(f"{k}: {v}\n" for k, v in OPTIONS.items()))
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "basketgnn", "train",
         "--data", str(tmp_path / "data"), "--config", str(tmp_path / "small.yaml"),
         "--epochs", "2", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("training dnntsp on") == 1  # rank 1 printed nothing
    assert out.stdout.count("epoch   1") == 1
    assert "best epoch" in out.stdout
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "best.pt", "resume.pt", "split.json", "train_log.jsonl"]
