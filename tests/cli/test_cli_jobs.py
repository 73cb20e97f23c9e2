"""The whole-job commands (basketgnn/cli/jobs.py): `demo` publishes metrics and recommendations
together and logs one line per epoch without a terminal; `pipeline` runs a job YAML and reports
what ran and what was cached; `ablate` runs a grid and rebuilds its table."""

from __future__ import annotations

import json
import re

import pandas as pd
import yaml

from tests.support.cli import run, run_ok
from tests.support.pipeline import BASELINES_ONLY, torch_threads_kept, write_job


def test_demo_publishes_metrics_and_recommendations_together(tmp_path, log_csv, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nepochs: 2\n")
    out = tmp_path / "demo"
    run_ok("demo", "--out", str(out), "--log", str(log_csv), "--config", str(config), "--no-progress")
    out_text = capsys.readouterr().out
    assert "fusion with TIFU-KNN: " in out_text and "re-ranking of TIFU-KNN's top" in out_text  # the validation choices
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "recommendations.parquet", "recommendations.csv", "data", "dnntsp"} == names
    records = json.loads((out / "metrics.json").read_text())
    assert [r["model"] for r in records][-1] == "dnntsp"
    recs = pd.read_parquet(out / "recommendations.parquet")
    assert len(recs) == len(pd.read_csv(out / "recommendations.csv")) > 0


def test_demo_without_a_terminal_writes_one_line_per_epoch_and_no_redraws(tmp_path, log_csv, capsys):
    # Progress stays on (the default): with no TTY on stdout / stderr (pytest captures both)
    # there are no bars, only lines, as in `basketgnn demo > log 2>&1`.
    config = tmp_path / "tiny.yaml"
    config.write_text("embed_dim: 8\nepochs: 6\npatience: 100\n")
    run_ok("demo", "--out", str(tmp_path / "demo"), "--log", str(log_csv), "--config", str(config))
    captured = capsys.readouterr()
    log = captured.out + captured.err
    assert "\r" not in log and len(log.encode()) < 20_000
    epoch_lines = [line for line in log.splitlines() if line.lstrip().startswith("epoch ")]
    assert len(epoch_lines) == 6 and all(line.rstrip().endswith(("s]", "best")) for line in epoch_lines)
    assert all(re.search(r"\[\s*\d+s\]", line) for line in epoch_lines)  # elapsed time


def test_pipeline_runs_a_job_then_reuses_every_stage(monkeypatch, capsys, log_csv, tmp_path):
    job = write_job(tmp_path, log_csv, **BASELINES_ONLY)
    with torch_threads_kept():
        code, out, err = run(monkeypatch, capsys, "pipeline", str(job), "--no-progress")
        assert code == 0, err
        done = " ".join(out.split())
        assert re.search(r"done in \d+s: ran prepare, split, .*report; cached nothing; report ", done)
        assert (tmp_path / "run" / "report.html").is_file()
        assert len(pd.read_parquet(tmp_path / "run" / "recommendations.parquet")) > 0
        code, out, err = run(monkeypatch, capsys, "pipeline", str(job), "--no-progress")
    assert code == 0, err
    assert "ran nothing; cached prepare, split" in " ".join(out.split())


def test_ablate_runs_the_grid_then_rebuilds_the_table_only(monkeypatch, capsys, log_csv, tmp_path):
    assert run(monkeypatch, capsys, "prepare", str(log_csv), "--out", str(tmp_path / "ds"))[0] == 0
    spec = tmp_path / "ablation.yaml"
    spec.write_text(yaml.safe_dump({
        "out": "out", "datasets": {"synth": str(tmp_path / "ds")}, "baselines": ["g-topfreq", "p-topfreq"],
        "metrics_in_table": ["recall@10"],
    }))  # fmt: skip
    code, out, err = run(monkeypatch, capsys, "ablate", str(spec), "--table-only")
    assert code == 2 and "no results of this spec yet" in " ".join(err.split())
    code, out, err = run(monkeypatch, capsys, "ablate", str(spec))
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("synth  g-topfreq  seed -  recall@10 ") for line in lines)
    assert any(line.startswith("synth  p-topfreq  seed -  recall@10 ") for line in lines)
    table = tmp_path / "out" / "table.md"
    assert f"wrote {table} and {tmp_path / 'out' / 'chart.png'}" in " ".join(out.split())
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 2
    written = table.read_text()
    table.unlink()
    code, out, err = run(monkeypatch, capsys, "ablate", str(spec), "--table-only")
    assert code == 0, err
    assert table.read_text() == written and "seed -" not in out  # nothing run again
    code, _, err = run(monkeypatch, capsys, "ablate", str(spec), "--dataset", "DC")
    assert code == 2 and "Unknown dataset(s) ['DC']; the spec has synth" in " ".join(err.split())
