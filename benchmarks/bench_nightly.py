"""The nightly pipeline on a big log, stage by stage: wall time, CPU time and peak memory.

    # a log of N customers as Parquet parts (see data/README.md), then the job on it:
    basketgnn synth --preset realistic-clean --customers 166000 --out /tmp/scale/log-166000
    .venv/bin/python benchmarks/bench_nightly.py --config benchmarks/nightly_big.yaml \\
        --log /tmp/scale/log-166000 --run-dir /tmp/scale/run-166000 --label 100k
    .venv/bin/python benchmarks/bench_nightly.py --summary
    # another checkout's code (old against new): its package first on the path, its own run_dir
    PYTHONPATH=OLD_CHECKOUT .venv/bin/python benchmarks/bench_nightly.py ... --run-dir /tmp/scale/run-166000-old

The job is ``basketgnn pipeline`` in this process, on the YAML ``--config`` with its
``input.path`` and ``run_dir`` replaced by ``--log`` and ``--run-dir`` (other keys as written;
``--set key.sub=value`` overrides one more, value as YAML). A thread samples the process's
resident memory every 0.1 s, and every stage line the pipeline prints marks a stage boundary, so
each stage gets its wall seconds, CPU seconds (user + system, all threads) and peak RSS (the
highest sample inside the stage; the job's exact peak is ``ru_maxrss``), and the peak of its
anonymous part (resident memory less the file pages mapped in: the prepared data is read
memory-mapped, and those pages are the system's cache, dropped under pressure). The row, with the
load average and the job's metrics.json summary, is appended to
benchmarks/results/nightly.jsonl, with the folder and commit of the ``basketgnn`` package that
ran (the one ``import basketgnn`` finds: PYTHONPATH first). Resumable: the pipeline's stage
cache keeps finished stages (they show as ``cached``), so a killed run goes on where it stopped;
give each code its own ``--run-dir``, so that no stage is reused from the other code's run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from common import RESULTS, append_result
from rich.console import Console

from basketgnn.pipeline.run import run_pipeline

_STAGE = re.compile(r"\[stage \d+/\d+\] (\S+): (running|resuming|clearing|cached|done)")


def rss_mb() -> float:
    """Current resident memory of this process, MB."""
    return memory_mb()[0]


def memory_mb() -> tuple[float, float]:
    """(resident, anonymous resident) memory of this process, MB: the second leaves out the
    file pages mapped in (the memory-mapped prepared data, which the system can drop)."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    page = os.sysconf("SC_PAGE_SIZE") / 2**20
    return int(fields[1]) * page, (int(fields[1]) - int(fields[2])) * page


def cpu_s() -> float:
    """CPU seconds of this process so far (user + system, all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class StageClock(io.TextIOBase):
    """A console file that passes text on to stdout and times the stages it announces.

    ``stages`` gets one record per stage: name, status (ran / cached), wall_s, cpu_s,
    peak_rss_mb (highest 0.1 s sample while it ran).
    """

    def __init__(self) -> None:
        self.stages: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._peak = 0.0
        self._peak_anon = 0.0
        self.job_peak_anon = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            value, anon = memory_mb()
            with self._lock:
                self._peak = max(self._peak, value)
                self._peak_anon = max(self._peak_anon, anon)
                self.job_peak_anon = max(self.job_peak_anon, anon)

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        sys.stdout.flush()
        for name, what in _STAGE.findall(text):
            now, cpu, (mem, anon) = time.perf_counter(), cpu_s(), memory_mb()
            with self._lock:
                if what in ("running", "resuming", "clearing") and self._open is None:
                    self._open = {"name": name, "t": now, "cpu": cpu}
                    self._peak, self._peak_anon = mem, anon
                elif what == "done" and self._open is not None:
                    o, self._open = self._open, None
                    self.stages.append({
                        "name": name, "status": "ran", "wall_s": round(now - o["t"], 2),
                        "cpu_s": round(cpu - o["cpu"], 2), "peak_rss_mb": round(max(self._peak, mem)),
                        "peak_anon_mb": round(max(self._peak_anon, anon)),
                    })  # fmt: skip
                elif what == "cached":
                    self.stages.append({"name": name, "status": "cached"})
        return len(text)

    def open_stage(self) -> dict[str, Any] | None:
        """The stage running now, if any: its name, wall and CPU seconds so far, peak RSS."""
        if self._open is None:
            return None
        o = self._open
        return {"name": o["name"], "wall_s": round(time.perf_counter() - o["t"], 2),
                "cpu_s": round(cpu_s() - o["cpu"], 2), "peak_rss_mb": round(self._peak)}  # fmt: skip

    def close(self) -> None:
        if not self.closed:
            self._stop.set()
            self._thread.join()
        super().close()


def package() -> dict[str, str | None]:
    """The basketgnn package this process runs: its folder and (when in a git checkout) commit."""
    import basketgnn

    folder = str(Path(basketgnn.__file__).resolve().parent)
    done = subprocess.run(["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"package": folder, "commit": done.stdout.strip() or None}


def record_row(args: argparse.Namespace, record: dict[str, Any]) -> None:
    if not args.no_record:
        append_result("nightly", record)


def job_file(config: Path, log: Path, run_dir: Path, sets: list[str], out: Path) -> dict[str, Any]:
    """Write the job YAML to ``out`` and return it as read."""
    spec = yaml.safe_load(config.read_text())
    spec["run_dir"] = str(run_dir.resolve())
    spec["input"]["path"] = str(log.resolve())
    for item in sets:
        key, _, value = item.partition("=")
        node = spec
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = yaml.safe_load(value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def run(args: argparse.Namespace) -> None:
    run_dir = Path(args.run_dir)
    job = run_dir.with_name(run_dir.name + ".yaml")
    spec = job_file(Path(args.config), Path(args.log), run_dir, args.set or [], job)
    # A job started in the background ignores SIGINT (the shell's doing): restore it, and stop
    # on SIGTERM the same way, so that a stopped run still records its finished stages.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    load_before = os.getloadavg()
    code = package()
    clock = StageClock()
    t0, c0 = time.perf_counter(), cpu_s()
    try:
        summary = run_pipeline(job, progress=False, console=Console(file=clock, soft_wrap=True))
    except KeyboardInterrupt:
        # Stopped (Ctrl-C / SIGINT): the finished stages' figures are kept, marked incomplete;
        # rerunning the same command resumes the job from its stage cache.
        clock.close()
        record_row(args, {
            "label": args.label, **code, "log": str(Path(args.log).resolve()), "job": spec, "complete": False,
            "interrupted_in": clock.open_stage(), "stages": clock.stages,
            "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu_s() - c0, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        })  # fmt: skip
        raise
    finally:
        clock.close()
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    metrics = json.loads(Path(summary["outputs"]["metrics"]).read_text())
    record = {
        "label": args.label, **code, "log": str(Path(args.log).resolve()), "config": str(args.config),
        "job": spec, "customers": metrics["data"]["customers"], "items": metrics["data"]["items"],
        "baskets": metrics["data"]["baskets"], "rows_read": metrics["data"]["report"].get("rows_read"),
        "stages": clock.stages, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "peak_anon_mb": round(clock.job_peak_anon),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "models": {
            m["model"]: {k: m["metrics"][k] for k in m["metrics"] if k.endswith(("@10", "@20"))}
            for m in metrics["models"]
        },
        "metrics_summary": {k: v for k, v in metrics.items() if k not in ("models", "job")},
    }  # fmt: skip
    record_row(args, record)
    print(json.dumps({k: record[k] for k in ("label", "commit", "customers", "stages", "wall_s", "cpu_s", "peak_rss_mb")}))


def summary() -> None:
    for line in (RESULTS / "nightly.jsonl").read_text().splitlines():
        r = json.loads(line)
        if not r.get("complete", True):
            print(f"\n{r['label']}: stopped in {r['interrupted_in']} after {r['wall_s']:.0f} s")
            for s in r["stages"]:
                print(f"| {s['name']} | {s['status']} | {s.get('wall_s', '')} | {s.get('cpu_s', '')} | "
                      f"{s.get('peak_rss_mb', '')} |")  # fmt: skip
            continue
        print(
            f"\n{r['label']}{' (' + r['commit'] + ')' if r.get('commit') else ''}: {r['customers']:,} customers, {r['baskets']:,} baskets, "
            f"{r.get('rows_read') or 0:,} rows; {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU, "
            f"peak {r['peak_rss_mb']:,} MB; load {r['load_before']} -> {r['load_after']}"
        )
        print("| stage | status | wall s | CPU s | peak RSS MB | peak anonymous MB |\n|---|---|---|---|---|---|")
        for s in r["stages"]:
            print(
                f"| {s['name']} | {s['status']} | {s.get('wall_s', '')} | {s.get('cpu_s', '')} | "
                f"{s.get('peak_rss_mb', '')} | {s.get('peak_anon_mb', '')} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="pipeline YAML (input.path and run_dir are replaced)")
    ap.add_argument("--log", help="the transaction log (file or folder)")
    ap.add_argument("--run-dir", help="the job's run_dir")
    ap.add_argument("--label", default="", help="name of the row, e.g. 100k")
    ap.add_argument("--set", action="append", help="key.sub=value (YAML) overriding the config")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    args = ap.parse_args()
    if args.summary:
        summary()
    elif args.config and args.log and args.run_dir:
        run(args)
    else:
        ap.error("give --config, --log and --run-dir, or --summary")


if __name__ == "__main__":
    main()
