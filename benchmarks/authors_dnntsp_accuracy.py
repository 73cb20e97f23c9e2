"""The DNNTSP authors' own code, trained and tested on a published split: does it reach the
paper's table on this machine? One run per seed.

    # a clone of yule-BUAA/DNNTSP (../shared/tools/README.md says how to fetch it and make its venv)
    /work/venv-authors/bin/python benchmarks/authors_dnntsp_accuracy.py --repo /tmp/tk/DNNTSP --data DC \\
        --seed 0 --epochs 60

Each run copies the clone to ``--work/DATA-sSEED`` (their scripts write beside themselves), sets
their ``utils/config.json`` (data, epochs; everything else theirs: Adam lr 1e-3, 64 users a
batch in the file's order, ReduceLROnPlateau on the training loss, the model saved whenever the
mean validation NDCG over K = 10..40 improves), seeds Python, NumPy and torch with ``--seed``
and runs their ``train.train_main.train`` on one thread. Then it loads the last model saved (the
best by their criterion) and evaluates it on the split's test users with their
``utils.metric.evaluate``. One JSON line per run (the seed, the best epoch, the training
seconds, their test metrics) is appended to benchmarks/results/authors_dnntsp.jsonl.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "authors_dnntsp.jsonl"

#: Run inside their train/ folder (their paths are relative to it).
SEEDED = """
import sys, random, numpy, torch
sys.path.insert(0, '..')
torch.set_num_threads(1); random.seed({seed}); numpy.random.seed({seed}); torch.manual_seed({seed})
"""
TRAIN = "from train.train_main import train\ntrain()\n"
TEST = """
import json
from utils.metric import evaluate
from utils.data_container import get_data_loader
from utils.load_config import get_attribute
from utils.util import load_model
from train.train_main import create_model
model = load_model(create_model(), {model!r})
loader = get_data_loader(data_path=get_attribute('data_path'), data_type='test',
                         batch_size=get_attribute('batch_size'), item_embedding_matrix=model.item_embedding)
print('RESULT', json.dumps(evaluate(model, loader)))
"""


def run(repo: Path, data: str, seed: int, epochs: int, work: Path) -> dict:
    dst = work / f"{data}-s{seed}"
    if not dst.exists():
        shutil.copytree(repo, dst, ignore=shutil.ignore_patterns("runs", "save_model_folder", ".git"))
    config = json.loads((repo / "utils" / "config.json").read_text())
    config.update(data=data, epochs=epochs, save_model_folder=f"DNNTSP-s{seed}")
    (dst / "utils" / "config.json").write_text(json.dumps(config, indent=2))
    t0 = time.time()
    with open(dst / "train.log", "w") as log:
        subprocess.run([sys.executable, "-c", SEEDED.format(seed=seed) + TRAIN], cwd=dst / "train",
                       stdout=log, stderr=subprocess.STDOUT, check=True)  # fmt: skip
    train_s = time.time() - t0
    folder = dst / "save_model_folder" / data / f"DNNTSP-s{seed}"
    best = max(folder.iterdir(), key=lambda f: int(re.findall(r"\d+", f.name)[0]))
    done = subprocess.run([sys.executable, "-c", SEEDED.format(seed=seed) + TEST.format(model=str(best))],
                          cwd=dst / "train", capture_output=True, text=True, check=True)  # fmt: skip
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return {"data": data, "seed": seed, "epochs": epochs, "best_model": best.name, "train_s": round(train_s),
            "test": json.loads(line[len("RESULT "):])}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a clone of yule-BUAA/DNNTSP")
    ap.add_argument("--data", default="DC")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--work", type=Path, default=Path("/tmp/auth"))
    args = ap.parse_args()
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **run(args.repo, args.data, args.seed, args.epochs, args.work)}
    print(json.dumps(row))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
