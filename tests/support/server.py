"""The real ``basketgnn serve`` in a subprocess on a free loopback port, as users run it
(the package's own starter, :class:`basketgnn.serve.launch.ServedProcess`)."""

from __future__ import annotations

from pathlib import Path

from basketgnn.serve.launch import ServedProcess, free_port

__all__ = ["free_port", "start_server"]


def start_server(*args: str, log: Path, env: dict[str, str] | None = None, timeout: float = 120) -> ServedProcess:
    """``basketgnn serve ARGS --port <free>``, returned once ``/ready`` answers 200."""
    server = ServedProcess(args, log, env=env)
    server.start(timeout)
    return server
