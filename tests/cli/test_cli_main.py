"""The command line's app and entry point (basketgnn/cli/__init__.py, `python -m basketgnn`):
the commands in their listed order, and one clean message + exit 2 for every user error while
any other exception keeps its traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import basketgnn.cli as cli
from basketgnn.errors import UserError
from tests.support.cli import make_checkpoint, run, run_status

COMMANDS = ["synth", "prepare", "evaluate", "train", "predict", "recommend", "serve", "pipeline", "ablate",
            "config", "demo"]  # fmt: skip


def test_help_lists_every_command_in_order(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0
    listed = [m.group(1) for line in out.splitlines() if (m := re.match(r"│ (\w+)\s{2,}\S", line))]
    assert listed == COMMANDS


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "--data", "{ds}", "--model", "nope"], "unknown model 'nope'; choose one of .*dnntsp"),
        (["evaluate", "--data", "{tmp}/missing", "--model", "p-topfreq"], "no such file or folder"),
        (["evaluate", "--data", "{ds}"], "Name exactly one model"),
        (["prepare", "{log}", "--out", "{tmp}/o", "--customer-col", "cust"], "missing column"),
        (["prepare", "{tmp}/bad.txt", "--out", "{tmp}/o"], "not a CSV or Parquet file"),
        (["prepare", "{log}", "--out", "{tmp}/o", "--min-baskets", "50"], "No customer is left"),
        (["evaluate", "--checkpoint", "{tmp}/none.pt"], "no such checkpoint"),
        (["train", "--data", "{ds}", "--config", "{tmp}/bad.yaml"], "invalid config .*embed_dims"),
    ],
)
def test_user_errors_exit_2_with_one_message_and_no_output(
    monkeypatch, capsys, log_csv, tmp_path, args, message
):
    ds = tmp_path / "ds"
    run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(ds))
    (tmp_path / "bad.txt").write_text("a,b\n1,2\n")
    (tmp_path / "bad.yaml").write_text("embed_dims: 8\n")
    filled = [a.format(ds=ds, tmp=tmp_path, log=log_csv) for a in args]
    code, _, err = run(monkeypatch, capsys, *filled)
    assert code == 2
    assert "error:" in err and "Traceback" not in err
    assert re.search(message, " ".join(err.split()))
    assert not (tmp_path / "o").exists()


def test_main_turns_only_user_errors_into_exit_2(monkeypatch, capsys):
    def raising(error: Exception):
        def app() -> None:
            raise error

        return app

    monkeypatch.setattr(cli, "app", raising(UserError("the one message")))
    assert run_status() == 2
    assert "error: the one message" in capsys.readouterr().err
    monkeypatch.setattr(cli, "app", raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # a bug keeps its traceback
        cli.main()


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "basketgnn", "recommend", "--help"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "--shard" in done.stdout


def test_scoring_a_checkpoint_prints_no_warning_of_numpy(tmp_path):
    """Scoring flushes denormal floats (setup_torch); numpy then warns on its first use of its
    float limits unless they were worked out before. A fresh process: the limits not yet known."""
    checkpoint, _ = make_checkpoint(tmp_path)
    done = subprocess.run([sys.executable, "-W", "default", "-m", "basketgnn", "evaluate", "--checkpoint", str(checkpoint)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and "recall@10" in done.stdout
    assert "Warning" not in done.stderr, done.stderr
