"""Load on `basketgnn serve` over loopback: requests/s, customers/s, latency and memory.

    # the DC checkpoint (its data is recorded in it), every scenario, reasons off and on:
    python benchmarks/bench_serve.py --checkpoint /work/after/dc/best.pt
    # a smoke run: 2 s per scenario, nothing recorded
    python benchmarks/bench_serve.py --checkpoint runs/demo/dnntsp/best.pt --duration 2 \\
        --scenarios customer batch --clients 1 8 --batch-clients 1 --reasons off --no-record
    # the Markdown table of the last run recorded (or --run ID)
    python benchmarks/bench_serve.py --table

The real server runs as a subprocess (``python -m basketgnn serve --checkpoint ... --port P``
on 127.0.0.1, a free port; PYTHONPATH: yours, else this checkout), started once and stopped at
the end, also on errors and Ctrl-C (SIGTERM, then SIGKILL after 15 s; on Linux it also gets
SIGTERM should this script die). Its memory is read from /proc/PID/status: VmRSS once /ready
answers 200 (``rss_ready_mb``: the model and data loaded), VmHWM (peak RSS) then and after every
scenario (``peak_rss_mb``).

The load generator is a hand-written HTTP/1.1 client on asyncio streams (uvloop when installed;
``--loop asyncio`` to avoid it): one keep-alive connection per client, requests pre-encoded,
responses read by Content-Length (or chunked), so it spends little CPU per request on the
shared cores. Clients run a closed loop: each sends its next request when the previous answer
has arrived, for ``--warmup`` seconds, or longer until every client has had an answer (the
server's queue then holds every client's request, as it will), not counted; then for
``--duration`` seconds, or longer
until ``--min-answers`` answers have finished in that window (slow batches; at most
``--max-duration`` seconds); a client sends nothing after that, and the requests in flight are awaited (their status checked) but
count only for the part of them inside the window.

Before any is timed, each kind of request (scenario and reasons) is sent once on its own
(``first_request_s``: the server's first call of a kind pays one-time costs such as compiling
kernels, which would otherwise fill a short window).

Scenarios (each at every ``--clients`` count, batch at every ``--batch-clients`` count; each
with reasons off and on, ``--reasons``):

- ``customer``: GET /v1/customers/{id}/next-basket?k=10&reasons=..., a random stored customer
  of the data (``--pool`` of them, drawn once with ``--seed``) per request;
- ``history``: POST /v1/next-basket {"history": [[item ids]], "k": 10, "reasons": ...}, the
  full stored history (its last 1,000 baskets at most, the API's limit) of such a customer, in
  original item ids, so the server does the customer's work plus parsing the history;
- ``batch``: POST /v1/next-baskets {"customers": [{"customer_id": ...} x --batch-size], ...}
  (16 pre-drawn batches of distinct customers; drawn with replacement when the data has fewer);
- ``health`` (only when named): GET /health, the HTTP stack without scoring (a sync endpoint,
  which FastAPI runs on its thread pool), at the ``--clients`` counts, once.

Measured per scenario, in the ``--duration`` window: requests/s (each 200 answer counted for
the share of its time inside the window, so long batch requests count exactly), customers/s
(requests/s x customers per request), latency p50 / p95 / p99 / max (ms) of the 200 answers
that finished inside the window, errors (every response's status is checked: anything but 200, a
timeout, a broken connection; warm-up and the tail included), and the CPU used during the
window, in cores: the server (/proc/PID/stat), this generator (process time) and everything else
on the machine (/proc/stat busy time less those two: other jobs sharing the cores).
The first request of each kind, every 200 answer of the warm-up, and then every
``--verify-every``-th answer of a client are parsed and checked (k items each, reasons present
exactly when asked for, one answer per customer of a batch); a wrong one counts as an error
too. Parsing a large answer costs the generator CPU, hence only a sample inside the window.

One JSON line per scenario (``kind: scenario``) and one for the server's memory at the end
(``kind: server``) go to ``--out`` (default benchmarks/results/serve.jsonl), all with the run's
id and the exact command; ``--no-record`` prints only. The Markdown table for BENCHMARKS.md is
printed at the end (and by ``--table``). Time it under ``flock /tmp/basketgnn-timing.lock``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from basketgnn.serve.launch import HOST, ServedProcess  # noqa: E402
from benchmarks.common import PROJECT, RESULTS  # noqa: E402

SCENARIOS = ("customer", "history", "batch")
#: Not run unless named: the HTTP stack alone (a sync endpoint, on FastAPI's thread pool).
EXTRA = ("health",)
TITLES = {"customer": "GET one stored customer", "history": "POST one history", "batch": "POST a batch",
          "health": "GET /health (no scoring)"}  # fmt: skip
#: Status codes this client gives to failures without an HTTP answer.
TIMEOUT, BROKEN, INVALID = -1, -2, -3
STOP_GRACE_S = 15.0
N_BATCHES = 16  # distinct batch bodies drawn per run


# --- requests -------------------------------------------------------------------------------

@dataclass
class Scenario:
    """One kind of request with reasons off or on: its pre-encoded requests and a check of an
    answer (None when right, else what is wrong)."""

    name: str
    reasons: bool
    customers_per_request: int
    requests: list[bytes]
    check: Callable[[bytes], str | None]


def _get(path: str, port: int) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()


def _post(path: str, body: Any, port: int) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")  # fmt: skip
    return head.encode() + data


def _check_items(answer: dict[str, Any], k: int, reasons: bool) -> str | None:
    items = answer.get("items")
    if not isinstance(items, list) or len(items) != k:
        return f"expected {k} items, got {None if items is None else len(items)}"
    if any(("reasons" in it) != reasons for it in items):
        return f"reasons {'missing' if reasons else 'present'} in an item"
    return None


def _checker(kind: str, k: int, reasons: bool, batch: int) -> Callable[[bytes], str | None]:
    def check(body: bytes) -> str | None:
        try:
            answer = json.loads(body)
        except ValueError as e:
            return f"not JSON ({e})"
        if kind == "health":
            return None if answer == {"status": "ok"} else f"unexpected {answer}"
        if kind != "batch":
            return _check_items(answer, k, reasons)
        answers = answer.get("answers")
        if not isinstance(answers, list) or len(answers) != batch:
            return f"expected {batch} answers, got {None if answers is None else len(answers)}"
        return next((p for a in answers if (p := _check_items(a, k, reasons)) is not None), None)

    return check


@dataclass
class Pool:
    """Stored customers drawn from the served data: their ids and histories (item ids)."""

    data: str
    n_customers: int
    ids: list[str]
    histories: list[list[list[str]]]


def data_path(checkpoint: Path, data: Path | None) -> str:
    """``--data``, else the data the checkpoint records (as `basketgnn serve` finds it)."""
    if data is not None:
        return str(data)
    from basketgnn.engine.checkpoint import read_state

    recorded = read_state(checkpoint)["extras"].get("data")
    if recorded is None:
        sys.exit(f"{checkpoint} records no data; pass --data (the prepared data it was trained on)")
    return str(recorded)


def draw_pool(path: str, size: int, seed: int, max_baskets: int) -> Pool:
    """``size`` random stored customers of the data at ``path`` (all when it has fewer)."""
    from basketgnn.data.ingest import load_data

    d = load_data(path)
    rng = random.Random(seed)
    rows = rng.sample(range(d.n_users), min(size, d.n_users))
    ids, histories = [], []
    item_ids = d.item_ids.astype(str)
    for u in rows:
        lo, hi = int(d.user_offsets[u]), int(d.user_offsets[u + 1])
        lo = max(lo, hi - max_baskets)
        histories.append([item_ids[d.items[d.basket_offsets[b] : d.basket_offsets[b + 1]]].tolist() for b in range(lo, hi)])
        ids.append(str(d.user_ids[u]))
    return Pool(path, d.n_users, ids, histories)


def build_scenario(kind: str, reasons: bool, pool: Pool, port: int, k: int, n_items: int,
                   batch_size: int, seed: int) -> Scenario:  # fmt: skip
    flag = "true" if reasons else "false"
    want = min(k, n_items)
    if kind == "customer":
        requests = [_get(f"/v1/customers/{urllib.parse.quote(c, safe='')}/next-basket?k={k}&reasons={flag}", port)
                    for c in pool.ids]  # fmt: skip
    elif kind == "health":
        requests = [_get("/health", port)]
    elif kind == "history":
        requests = [_post("/v1/next-basket", {"history": h, "k": k, "reasons": reasons}, port) for h in pool.histories]
    else:
        rng = random.Random(seed + 1)
        requests = []
        for _ in range(N_BATCHES):
            ids = rng.sample(pool.ids, batch_size) if batch_size <= len(pool.ids) else rng.choices(pool.ids, k=batch_size)
            body = {"customers": [{"customer_id": c} for c in ids], "k": k, "reasons": reasons}
            requests.append(_post("/v1/next-baskets", body, port))
    per = {"batch": batch_size, "health": 0}.get(kind, 1)
    return Scenario(kind, reasons, per, requests, _checker(kind, want, reasons, batch_size))


# --- the HTTP/1.1 client --------------------------------------------------------------------

class Connection:
    """One keep-alive HTTP/1.1 connection: send a pre-encoded request, read its answer."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port, limit=1 << 24)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        self.writer.write(raw)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length, chunked, close = None, False, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if chunked:
            body = await self._chunked()
        elif length is not None:
            body = await self.reader.readexactly(length)
        else:  # the body ends with the connection
            body, close = await self.reader.read(), True
        if close:
            self.close()
        return status, body

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await self.reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)


@dataclass
class Window:
    """The timed window of a scenario: it starts after the warm-up; its end is set once
    ``--duration`` has passed and enough answers have finished in it."""

    start: float
    stop: float = math.inf
    finished: int = 0  # answers (of any status) finished inside it so far
    answered: int = 0  # clients that have had an answer


@dataclass
class ClientLog:
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checked: int = 0


async def client(conn: Connection, sc: Scenario, rng: random.Random, window: Window, timeout: float,
                 verify_every: int, log: ClientLog) -> None:  # fmt: skip
    """A closed loop: the next request when the previous answer is in, until the window ends.
    Every answer of the warm-up is checked, then every ``verify_every``-th."""
    requests, n_ok = sc.requests, 0
    while time.perf_counter() < window.stop:
        raw = requests[rng.randrange(len(requests))]
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                status, body = await conn.request(raw)
        except TimeoutError:
            status, body = TIMEOUT, f"no answer in {timeout} s".encode()
            conn.close()
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            status, body = BROKEN, f"{type(e).__name__}: {e}".encode()
            conn.close()
        end = time.perf_counter()
        if not log.status:
            window.answered += 1
        if window.start <= end < window.stop:
            window.finished += 1
        if status == 200:
            if end < window.start or (n_ok + 1) % verify_every == 0:
                log.checked += 1
                problem = sc.check(body)
                if problem is not None:
                    status, body = INVALID, problem.encode()
            n_ok += 1
        if status != 200 and len(log.problems) < 5:
            log.problems.append(f"{status}: {body[:300].decode(errors='replace')}")
        log.starts.append(start)
        log.ends.append(end)
        log.status.append(status)
        if status == BROKEN:
            await asyncio.sleep(0.05)  # a server gone: do not spin


# --- CPU and memory from /proc --------------------------------------------------------------

def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``serve --workers N``: the parent and its N workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (kB) and Threads of a process and its descendants, summed (the peak is the
    sum of each process's own peak); {} where /proc has none."""
    out: dict[str, int] = {}
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "Threads"):
                    out[key] = out.get(key, 0) + int(value.split()[0])
    return out


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process and its descendants (all their threads)."""
    total, found = 0, False
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        found = True
    return total / os.sysconf("SC_CLK_TCK") if found else None


def machine_busy_s() -> float | None:
    """CPU seconds all cores spent busy since boot (/proc/stat: everything but idle and iowait)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(values[:8]) - values[3] - values[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def cpu_sample(pid: int) -> tuple[float, float | None, float, float | None]:
    return time.perf_counter(), proc_cpu_s(pid), time.process_time(), machine_busy_s()


# --- one scenario ---------------------------------------------------------------------------

def percentile(sorted_values: list[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation, as numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


async def run_scenario(sc: Scenario, clients: int, port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    conns = [Connection(port) for _ in range(clients)]
    await asyncio.gather(*(c.open() for c in conns))
    logs = [ClientLog() for _ in range(clients)]
    begin = time.perf_counter()
    window = Window(math.inf)  # the warm-up until it is set
    tasks = [
        asyncio.create_task(client(c, sc, random.Random(args.seed * 7919 + n), window, args.request_timeout,
                                   args.verify_every, log))  # fmt: skip
        for n, (c, log) in enumerate(zip(conns, logs))
    ]
    try:
        await asyncio.sleep(args.warmup)
        while window.answered < clients and time.perf_counter() < begin + args.max_duration:
            await asyncio.sleep(0.05)  # every client answered once: the queue is in its steady state
        a = cpu_sample(pid)
        window.start = a[0]
        await asyncio.sleep(max(0.0, a[0] + args.duration - time.perf_counter()))
        while window.finished < args.min_answers and time.perf_counter() < a[0] + args.max_duration:
            await asyncio.sleep(0.05)
        b = cpu_sample(pid)
        window.stop = b[0]
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        for c in conns:
            c.close()
    w0, w1 = a[0], b[0]
    span = w1 - w0
    counted, latencies, statuses, problems = 0.0, [], {}, []
    for log in logs:
        problems.extend(log.problems)
        for s, e, st in zip(log.starts, log.ends, log.status):
            statuses[st] = statuses.get(st, 0) + 1
            if st != 200:
                continue
            if e > w0 and s < w1:
                counted += (min(e, w1) - max(s, w0)) / max(e - s, 1e-9)
            if w0 <= e <= w1:
                latencies.append(e - s)
    latencies.sort()
    errors = sum(n for st, n in statuses.items() if st != 200)

    def ms(q: float) -> float | None:
        v = percentile(latencies, q)
        return None if v is None else round(v * 1000, 2)

    def cores(i: int) -> float | None:
        return None if a[i] is None or b[i] is None else round((b[i] - a[i]) / span, 3)

    server, generator, busy = cores(1), cores(2), cores(3)
    other = None if None in (server, generator, busy) else round(busy - server - generator, 3)
    mem = proc_status(pid)
    rps = counted / span
    return {
        "kind": "scenario", "scenario": sc.name, "reasons": sc.reasons, "clients": clients,
        "customers_per_request": sc.customers_per_request, "duration_s": round(span, 3),
        "warmup_s": round(w0 - begin, 3),
        "requests_per_s": round(rps, 2), "customers_per_s": round(rps * sc.customers_per_request, 1),
        "latency_ms": {"p50": ms(50), "p95": ms(95), "p99": ms(99), "max": ms(100),
                       "mean": round(sum(latencies) / len(latencies) * 1000, 2) if latencies else None},
        "finished_in_window": len(latencies), "responses": sum(statuses.values()), "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())}, "checked_answers": sum(g.checked for g in logs),
        "problems": problems[:5], "cpu_cores": {"server": server, "generator": generator, "other": other},
        "server_rss_mb": _mb(mem.get("VmRSS")), "peak_rss_mb": _mb(mem.get("VmHWM")),
        "server_threads": mem.get("Threads"), "load_1m_end": round(os.getloadavg()[0], 2),
    }  # fmt: skip


# --- the server -----------------------------------------------------------------------------

def make_server(args: argparse.Namespace, log: Path, cwd: Path) -> ServedProcess:
    """`basketgnn serve` as a subprocess on a free (or the given) loopback port, its output in
    ``log``; it serves the package PYTHONPATH names, else this checkout's."""
    extra = ["--checkpoint", str(args.checkpoint.resolve())]  # the server runs in another cwd
    if args.data is not None:
        extra += ["--data", str(args.data.resolve())]
    if args.threads is not None:
        extra += ["--threads", str(args.threads)]
    if args.workers > 1:
        extra += ["--workers", str(args.workers)]
    # cwd is not the project root: `-m` puts the cwd before PYTHONPATH
    return ServedProcess(extra, log, port=args.port, cwd=cwd,
                         env={"PYTHONPATH": os.environ.get("PYTHONPATH") or str(PROJECT)})  # fmt: skip


# --- the run --------------------------------------------------------------------------------

def plan(args: argparse.Namespace) -> list[tuple[str, bool, int]]:
    reasons = {"both": (False, True), "off": (False,), "on": (True,)}[args.reasons]
    return [(kind, r, c) for kind in args.scenarios for r in ((False,) if kind == "health" else reasons)
            for c in (args.batch_clients if kind == "batch" else args.clients)]  # fmt: skip


async def first_request(sc: Scenario, port: int, timeout: float) -> dict[str, Any]:
    """One request of ``sc`` on a fresh connection before any is timed: the server's first call
    of a kind pays one-time costs (compiling kernels) that would fill a short window."""
    conn = Connection(port)
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            status, body = await conn.request(sc.requests[0])
    except TimeoutError:
        status, body = TIMEOUT, f"no answer in {timeout} s".encode()
    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
        status, body = BROKEN, f"{type(e).__name__}: {e}".encode()
    finally:
        conn.close()
    seconds = time.perf_counter() - t0
    if status == 200 and (problem := sc.check(body)) is not None:
        status, body = INVALID, problem.encode()
    out = {"first_request_s": round(seconds, 3), "first_request_status": status}
    if status != 200:
        out["first_request_problem"] = body[:300].decode(errors="replace")
    return out


async def run_all(args: argparse.Namespace, server: ServedProcess, pool: Pool, ready: dict[str, Any],
                  base: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    records = []
    built: dict[tuple[str, bool], Scenario] = {}
    firsts: dict[tuple[str, bool], dict[str, Any]] = {}
    for kind, reasons, _ in plan(args):  # every kind once, untimed, before the first is timed
        if (kind, reasons) not in built:
            sc = build_scenario(kind, reasons, pool, server.port, args.k, ready["items"], args.batch_size, args.seed)
            built[(kind, reasons)] = sc
            firsts[(kind, reasons)] = first = await first_request(sc, server.port, args.request_timeout)
            print(f"first {kind} request, reasons {'on' if reasons else 'off'}: {first}", flush=True)
    for kind, reasons, clients in plan(args):
        sc = built[(kind, reasons)]
        if not server.alive():
            raise RuntimeError(f"the server died (exit code {server.proc.returncode if server.proc else None})")
        load = round(os.getloadavg()[0], 2)
        record = {**base, "load_1m": load, **firsts[(kind, reasons)],
                  **await run_scenario(sc, clients, server.port, server.proc.pid, args)}  # fmt: skip
        records.append(record)
        lat = record["latency_ms"]
        print(f"{kind:8} reasons {'on ' if reasons else 'off'} clients {clients:3}: "
              f"{record['requests_per_s']:9.1f} req/s {record['customers_per_s']:10.1f} customers/s  "
              f"p50 {lat['p50']} p95 {lat['p95']} p99 {lat['p99']} ms  errors {record['errors']}  "
              f"cpu {record['cpu_cores']}", flush=True)  # fmt: skip
        for p in record["problems"]:
            print(f"    {p}")
        write(args, record)
    return records


def write(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """One JSON line to --out (as common.append_result, any file)."""
    if args.no_record:
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}) + "\n")


def _fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def table(records: list[dict[str, Any]]) -> str:
    """The Markdown table of one run's records (the ``scenario`` rows, then a line of memory)."""
    rows = [r for r in records if r.get("kind") == "scenario"]
    if not rows:
        return "(no scenario rows)"
    first = rows[0]
    lines = [
        f"```bash\n{first['command']}\n```\n",
        "| scenario | reasons | clients | requests/s | customers/s | p50 ms | p95 ms | p99 ms | errors / responses "
        "| timed answers (s) | CPU cores: server / generator / other |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lat, cpu = r["latency_ms"], r["cpu_cores"]
        title = TITLES[r["scenario"]] + (f" of {r['customers_per_request']:,}" if r["scenario"] == "batch" else "")
        lines.append(
            f"| {title} | {'—' if r['scenario'] == 'health' else 'on' if r['reasons'] else 'off'} | {r['clients']} "
            f"| {_fmt(r['requests_per_s'])} | {_fmt(r['customers_per_s'] if r['customers_per_request'] else None, 0)} | {_fmt(lat['p50'])} | {_fmt(lat['p95'])} | {_fmt(lat['p99'])} "
            f"| {r['errors']:,} / {r['responses']:,} | {r['finished_in_window']:,} ({r['duration_s']:.0f}) "
            f"| {_fmt(cpu['server'], 2)} / {_fmt(cpu['generator'], 2)} / {_fmt(cpu['other'], 2)} |"
        )
    end = next((r for r in records if r.get("kind") == "server"), None)
    peak = end["peak_rss_mb"] if end else max((r["peak_rss_mb"] or 0) for r in rows)
    lines.append(
        f"\n{first['model']} on {first['data']} ({first['customers']:,} customers, {first['items']:,} items), "
        f"run {first['run']}; server RSS {_fmt(first['rss_ready_mb'], 0)} MB once ready, peak "
        f"{_fmt(peak, 0)} MB; {first['duration_s_asked']:g} s per scenario (longer until {first.get('min_answers')} answers "
        f"finished, at most {first.get('max_duration_s'):g} s) after at least {first['warmup_s_asked']:g} s of warm-up; "
        f"client: {first['client']}; server: {first['server']}; load (1 min) {first['load_1m']} at the start."
    )
    return "\n".join(lines)


def print_table(args: argparse.Namespace) -> None:
    if not args.out.is_file():
        sys.exit(f"{args.out}: no results yet")
    rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
    run = args.run or next((r["run"] for r in reversed(rows) if "run" in r), None)
    chosen = [r for r in rows if r.get("run") == run]
    if not chosen:
        sys.exit(f"{args.out}: no rows of run {run}")
    print(table(chosen))


def _git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, help="the best.pt to serve")
    ap.add_argument("--data", type=Path, help="the served customers (default: the data the checkpoint records)")
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per scenario (default 10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each (default 2)")
    ap.add_argument("--min-answers", type=int, default=20,
                    help="a window lasts until this many answers finished in it (default 20) ...")
    ap.add_argument("--max-duration", type=float, default=120.0,
                    help="... or until it lasted this many seconds (default 120)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64],
                    help="concurrent clients of the customer and history scenarios (default 1 8 64)")
    ap.add_argument("--batch-clients", type=int, nargs="+", default=[1, 8],
                    help="concurrent clients of the batch scenario (default 1 8)")
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS + EXTRA, default=list(SCENARIOS),
                    help="default: customer history batch; health: the HTTP stack alone, GET /health")
    ap.add_argument("--reasons", choices=["both", "off", "on"], default="both")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1000, help="customers per batch request (default 1000)")
    ap.add_argument("--pool", type=int, default=10_000, help="stored customers drawn for the requests (default 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, help="the server's --threads (default: its own, 1)")
    ap.add_argument("--workers", type=int, default=1, help="the server's --workers (processes; memory and CPU are summed over them)")
    ap.add_argument("--port", type=int, default=0, help="the server's port (default: a free one)")
    ap.add_argument("--request-timeout", type=float, default=300.0, help="seconds before a request counts as an error")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for /ready")
    ap.add_argument("--verify-every", type=int, default=20, help="parse and check every Nth answer of a client")
    ap.add_argument("--loop", choices=["auto", "asyncio"], default="auto", help="auto: uvloop when installed")
    ap.add_argument("--out", type=Path, default=RESULTS / "serve.jsonl", help="JSON lines file (appended)")
    ap.add_argument("--no-record", action="store_true", help="print only (a smoke run)")
    ap.add_argument("--server-log", type=Path, help="keep the server's output here (default: shown on failure only)")
    ap.add_argument("--tag", default="", help="free text recorded with the result")
    ap.add_argument("--table", action="store_true", help="print the Markdown table of a recorded run from --out and stop")
    ap.add_argument("--run", help="with --table: the run id (default: the last)")
    args = ap.parse_args()
    if args.table:
        print_table(args)
        return
    if args.checkpoint is None:
        ap.error("--checkpoint is required")
    if min(args.clients + args.batch_clients) < 1 or args.verify_every < 1:
        ap.error("--clients, --batch-clients and --verify-every take numbers >= 1")
    if args.max_duration < args.duration:
        ap.error("--max-duration is less than --duration")

    from basketgnn.serve.schemas import MAX_BASKETS, MAX_CUSTOMERS

    if not 1 <= args.batch_size <= MAX_CUSTOMERS:
        ap.error(f"--batch-size: 1 to {MAX_CUSTOMERS} (the API's limit)")
    t0 = time.perf_counter()
    from basketgnn.errors import UserError

    try:
        path = data_path(args.checkpoint, args.data)
        pool = draw_pool(path, args.pool, args.seed, MAX_BASKETS)
    except UserError as e:
        sys.exit(str(e))
    print(f"{len(pool.ids):,} of {pool.n_customers:,} stored customers of {path} drawn ({time.perf_counter() - t0:.1f} s)")
    use_uvloop = args.loop == "auto" and _has("uvloop")
    run_id = time.strftime("%Y%m%dT%H%M%S")
    command = shlex.join(["python", *sys.argv])

    stop = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops the server
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as work:
        server = make_server(args, args.server_log or Path(work) / "server.log", Path(work))
        records: list[dict[str, Any]] = []
        try:
            ready, start_s = server.start(args.ready_timeout)
            assert server.proc is not None
            mem = proc_status(server.proc.pid)
            print(f"server ready on port {server.port} in {start_s:.1f} s: {ready['model']}, {ready['items']:,} items, "
                  f"{ready['customers']:,} customers; RSS {_mb(mem.get('VmRSS'))} MB (peak {_mb(mem.get('VmHWM'))} MB)")  # fmt: skip
            base = {
                "run": run_id, "command": command, "tag": args.tag, "commit": _git_commit(),
                "checkpoint": str(args.checkpoint), "checkpoint_sha256": ready.get("checkpoint_sha256"),
                "model": ready["model"], "data": path, "customers": ready["customers"], "items": ready["items"],
                "pool": len(pool.ids), "k": args.k, "duration_s_asked": args.duration, "warmup_s_asked": args.warmup,
                "min_answers": args.min_answers, "max_duration_s": args.max_duration,
                "server_threads_option": args.threads, "server_workers": args.workers, "server_cmd": shlex.join(server.cmd),
                "server_pythonpath": server.env["PYTHONPATH"], "server_start_s": round(start_s, 2),
                "rss_ready_mb": _mb(mem.get("VmRSS")), "peak_rss_ready_mb": _mb(mem.get("VmHWM")),
                "server": "uvicorn" + (" (uvloop" if _has("uvloop") else " (asyncio")
                          + (", httptools)" if _has("httptools") else ", h11)"),
                "client": "hand-written asyncio HTTP/1.1 keep-alive client" + (" on uvloop" if use_uvloop else ""),
                "cpus": os.cpu_count(),
            }  # fmt: skip
            runner = asyncio.run
            if use_uvloop:
                import uvloop

                runner = uvloop.run
            records = runner(run_all(args, server, pool, ready, base))
            mem = proc_status(server.proc.pid)
            end = {**base, "kind": "server", "server_rss_mb": _mb(mem.get("VmRSS")), "peak_rss_mb": _mb(mem.get("VmHWM")),
                   "server_threads": mem.get("Threads"), "errors": sum(r["errors"] for r in records)}  # fmt: skip
            records.append(end)
            write(args, end)
        except Exception:
            if server.proc is not None:
                print(f"--- the server's output (last lines of {server.log}):\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            code = server.stop(STOP_GRACE_S)
            signal.signal(signal.SIGTERM, stop)
        print(f"server stopped (exit code {code})")
    print()
    print(table(records))
    if any(r["errors"] or r["first_request_status"] != 200 for r in records if r["kind"] == "scenario"):
        sys.exit("errors: see the problems printed above and the 'statuses' of the records")


if __name__ == "__main__":
    main()
