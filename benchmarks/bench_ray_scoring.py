"""`basketgnn recommend --out DIR` in one process against the same command with `--ray`, same
chunk: the wall time of each whole command and whether the files are the same bytes.

    flock /tmp/basketgnn-timing.lock .venv/bin/python benchmarks/bench_ray_scoring.py \
        --checkpoint /work/after/dc/best.pt --chunk 1000 --rounds 2

Per round, in turn: one process (`--threads` threads), `--ray` (a new local Ray cluster of this
machine's CPUs, started and stopped by the command), and `--ray auto` on a cluster that
`ray start --head` brought up before the clock starts (what a standing cluster costs), then
`ray stop`. The checkpoint's recorded data is scored. One JSON line per command to
benchmarks/results/ray_scoring.jsonl, with the 1-minute load before and after. Needs the `ray`
extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import PROJECT, append_result


def run(cmd: list[str]) -> tuple[float, str]:
    """Wall seconds and stdout of a command (stopping on failure)."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=PROJECT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0, done.stdout


def same_files(a: Path, b: Path) -> tuple[int, bool]:
    """(parts in a, whether b holds the same part files, byte for byte)."""
    names = sorted(p.name for p in a.glob("part-*.parquet"))
    same = names == sorted(p.name for p in b.glob("part-*.parquet")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )
    return len(names), same


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2, help="the one process's threads")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/bgnn-ray-scoring")
    args = ap.parse_args()
    work = Path(args.workdir)
    bin_dir = Path(sys.executable).parent
    common = [sys.executable, "-m", "basketgnn", "recommend", "--checkpoint", args.checkpoint,
              "--k", str(args.k), "--chunk", str(args.chunk)]  # fmt: skip
    ray = str(bin_dir / "ray")
    for r in range(args.rounds):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        runs = [
            ("one process", common + ["--out", str(work / "one"), "--threads", str(args.threads)]),
            ("ray, local cluster started by the command", common + ["--out", str(work / "ray"), "--ray"]),
            ("ray auto, cluster already up", common + ["--out", str(work / "ray-auto"), "--ray", "auto"]),
        ]
        for label, cmd in runs:
            if "auto" in cmd:
                subprocess.run([ray, "start", "--head", "--num-cpus", str(os.cpu_count()),
                                "--include-dashboard", "false", "--disable-usage-stats"],
                               check=True, capture_output=True)  # fmt: skip
            load_before = os.getloadavg()[0]
            try:
                wall, out = run(cmd)
            finally:
                if "auto" in cmd:
                    subprocess.run([ray, "stop", "--force"], capture_output=True)
            folder = Path(cmd[cmd.index("--out") + 1])
            parts, same = same_files(work / "one", folder)
            record = {
                "bench": "ray_scoring", "round": r, "run": label, "checkpoint": args.checkpoint,
                "k": args.k, "chunk": args.chunk, "parts": parts, "wall_s": round(wall, 2),
                "same_bytes_as_one_process": same, "stdout": out.strip().splitlines(),
                "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                "cpus": os.cpu_count(),
            }  # fmt: skip
            print(f"round {r}  {label:45s} {wall:6.2f} s  {parts} parts  same bytes: {same}")
            append_result("ray_scoring", record)


if __name__ == "__main__":
    main()
