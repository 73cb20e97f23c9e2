"""The real ``basketgnn serve`` in a subprocess on a free loopback port, as users run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> str:
        """Stop the server (SIGTERM, then SIGKILL) and return its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.log.read_text()


def start_server(*args: str, log: Path, env: dict[str, str] | None = None, timeout: float = 120) -> Server:
    """``basketgnn serve ARGS --port <free>``, returned once ``/ready`` answers 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "basketgnn", "serve", *args, "--port", str(port)]
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=full_env)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{server.url}/ready", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the server was not ready after {timeout}s:\n{log.read_text()}")
