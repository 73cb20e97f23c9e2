"""The package as a user installs it: a wheel built from the repository, installed in a fresh
virtual environment, runs `basketgnn demo` from anywhere (the demo's data ships inside it)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_wheel_installs_in_a_fresh_venv_and_runs_the_demo(tmp_path):
    # Built from a copy of what the wheel is made of, so no build folder lands in the checkout.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "basketgnn", source / "basketgnn", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "--disable-pip-version-check", "-w", str(dist), str(source)], check=True)  # fmt: skip
    (wheel,) = dist.glob("basketgnn-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "basketgnn/demo/transactions.csv" in names and "basketgnn/demo/config.yaml" in names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(wheel)], check=True)  # fmt: skip
    # The dependencies (torch, dgl, ...) come from this environment's site-packages, appended
    # after the fresh environment's own: the wheel's basketgnn is the one imported.
    venv_site = next((venv / "lib").glob("python3*/site-packages"))
    (venv_site / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    elsewhere = tmp_path / "elsewhere"  # not the repository: nothing found by a relative path
    elsewhere.mkdir()
    (elsewhere / "quick.yaml").write_text("epochs: 2\nembed_dim: 8\nthreads: 1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE")}
    where = subprocess.run([str(python), "-c", "import basketgnn; print(basketgnn.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert where.stdout.startswith(str(venv_site))
    run = subprocess.run([str(venv / "bin" / "basketgnn"), "demo", "--out", "demo", "--config", "quick.yaml",
                          "--no-progress"], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "800 customers" in run.stdout
    for name in ("metrics.json", "recommendations.parquet", "recommendations.csv", "dnntsp/best.pt"):
        assert (elsewhere / "demo" / name).is_file(), name
