"""``basketgnn serve`` started in a child process on a loopback port, as users run it: the one
starter the server's tests, its benchmark and the README's screenshot share.

The child is the real command line (``python -m basketgnn serve ...``); :meth:`ServedProcess.start`
returns once ``GET /ready`` answers 200, and :meth:`ServedProcess.stop` sends SIGTERM (uvicorn's
graceful shutdown), then SIGKILL after a grace period. On Linux the child is asked to receive
SIGTERM when its parent dies, so an interrupted test or benchmark leaves no server behind.
Standard library only (no HTTP client, no torch): importing it costs nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now (the OS's choice for port 0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when its parent dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ServedProcess:
    """``basketgnn serve ARGS --host 127.0.0.1 --port PORT`` in a child process, its output in ``log``.

    ``env`` adds to this process's environment; ``PYTHONPATH`` defaults to the checkout this
    module is imported from, so the child serves the same code. ``cwd`` should not be a
    checkout's root when another checkout is meant: ``python -m`` puts the cwd first on the path.
    """

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.cmd = [sys.executable, "-m", "basketgnn", "serve", *args, "--host", HOST, "--port", str(self.port)]
        self.env = {**os.environ, **(env or {})}
        self.env.setdefault("PYTHONPATH", str(PACKAGE_ROOT))
        self.log, self.cwd = Path(log), cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> tuple[dict[str, Any], float]:
        """Start the child and wait for ``/ready``: (its JSON answer, seconds until then).

        Raises RuntimeError with the log's last lines if the child exits first or is not ready
        within ``timeout`` seconds (it is stopped then)."""
        t0 = time.perf_counter()
        with open(self.log, "wb") as out:  # the child keeps its own handle
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.cwd,
                                         preexec_fn=_die_with_parent())  # fmt: skip
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode} before it was "
                                   f"ready:\n{self.log_tail()}")  # fmt: skip
            if time.perf_counter() - t0 > timeout:
                self.stop()
                raise RuntimeError(f"the server was not ready after {timeout:.0f} s:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as r:
                    if r.status == 200:
                        return json.loads(r.read()), time.perf_counter() - t0
            except OSError:  # refused (not listening yet), 503 (loading), a timeout
                pass
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
