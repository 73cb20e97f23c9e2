"""Running the ``basketgnn`` command line in-process, as a user would, a small transaction log to
run it on, and the checkpoints the command tests share. The ``log_csv`` fixture (tests/conftest.py)
writes that log once per module (once per session under tests/cli/, see its conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from basketgnn.cli import main


def run_status(*args: str) -> int:
    """Exit status of ``basketgnn ARGS`` (0 on success, 2 on a user error); output stays in
    pytest's capture for the caller to read."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["basketgnn", *args])
        with pytest.raises(SystemExit) as exc:
            main()
    return int(exc.value.code or 0)


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``basketgnn ARGS``: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["basketgnn", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def run_ok(*args: str) -> None:
    """``basketgnn ARGS``, asserting it succeeds (usable in module-scoped fixtures)."""
    assert run_status(*args) == 0, args


def small_log(path: Path) -> Path:
    """A synthetic log of 150 customers over 40 items, written to ``path`` (CSV or Parquet)."""
    from basketgnn.data.synth import generate_log, write_log

    write_log(generate_log(n_customers=150, n_items=40, mean_baskets=6, seed=3), path)
    return path


#: One-epoch settings of the sequential models for `train --model NAME` on the small log.
ZOO_TINY = {
    "sasrec": "dim: 8\nffn_dim: 8\nblocks: 1\n",
    "bert4rec": "dim: 8\nffn_dim: 16\nblocks: 1\n",
    "din": "dim: 8\nattention_hidden: [8]\nhidden: [16]\n",
}


def train_zoo(monkeypatch, capsys, folder: Path, model: str, fusion: str) -> str:
    """One epoch of MODEL with the add-on FUSION on ``folder/data`` into ``folder/MODEL-FUSION``;
    the command's stdout."""
    config = folder / f"{model}-{fusion}.yaml"
    config.write_text(ZOO_TINY[model] + f"batch_size: 64\nthreads: 1\nfusion: {fusion}\n")
    code, out, err = run(monkeypatch, capsys, "train", "--model", model, "--data", str(folder / "data"),
                         "--config", str(config), "--out", str(folder / f"{model}-{fusion}"),
                         "--epochs", "1", "--seed", "0", "--no-progress")  # fmt: skip
    assert code == 0, err
    assert f"training {model} on" in out and "best epoch" in out
    return out


def make_checkpoint(
    folder: Path, n_customers: int = 60, n_items: int = 25, weight: float = 0.3, record_data: bool = True,
    rerank: bool = False,
):  # fmt: skip
    """A prepared dataset and an untrained DNNTSP checkpoint fused with TIFU-KNN at ``weight``
    (scoring costs and paths are those of a trained one; no training needed for a test). With
    ``record_data`` False the checkpoint does not name its dataset; with ``rerank``, a
    re-ranking stage (its network untrained, over TIFU-KNN's top 10) orders what the fusion
    ships, as where validation keeps it."""
    import torch

    from basketgnn.data.ingest import prepare_log
    from basketgnn.data.split import make_split
    from basketgnn.data.synth import generate_log
    from basketgnn.engine.checkpoint import save_checkpoint, set_section
    from basketgnn.models.dnntsp import DNNTSP, DNNTSPConfig
    from basketgnn.scoring.fusion import ScoreFusion, TifuScorer
    from basketgnn.scoring.tifu import TifuParams

    log = folder / "log.csv"
    generate_log(n_customers=n_customers, n_items=n_items, mean_baskets=5, seed=2).to_csv(log, index=False)
    data = prepare_log(log)
    data.save(folder / "data")
    # One torch thread: tiny tensors gain nothing from two, and lose much on a loaded machine.
    torch.manual_seed(0)
    config = DNNTSPConfig(embed_dim=8, seed=0, threads=1)
    model = DNNTSP.from_config(data.n_items, config)
    train = make_split(data, "temporal")["train"]
    fusion = ScoreFusion(weight, "sigmoid", TifuScorer.build(data, train, TifuParams(k=5)))
    extras = {"data": str(folder / "data")} if record_data else {}
    save_checkpoint(folder / "best.pt", "dnntsp", model, config, data.item_ids, extras)
    options = {"fusion": "tifu", "rerank": rerank}
    set_section(folder / "best.pt", "fusion", {"options": options, "choice": {"weight": weight, "k": 5}, "state": fusion.state()})
    if rerank:
        from basketgnn.nn.candidate_mlp import CandidateMLP
        from basketgnn.scoring.rerank import RerankStage
        from basketgnn.scoring.rerank_features import FEATURES, ItemStats

        net = CandidateMLP(len(FEATURES), 16)
        with torch.no_grad():
            net.layers[-1].weight.normal_(0, 1.0)  # orders other than TIFU-KNN's
        stage = RerankStage(fusion.scorer, ItemStats.of(data, train), net.eval(), 10)
        set_section(folder / "best.pt", "rerank", {"choice": {"kind": "rerank", "kept": True}, "state": stage.state()})
    return folder / "best.pt", data
