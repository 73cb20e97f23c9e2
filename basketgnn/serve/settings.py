"""What a server serves, as options or environment variables; importing it imports neither
torch nor the web framework (``basketgnn serve --workers N``'s parent process stays small)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from basketgnn.errors import UserError

#: The environment variable holding the admin API key (admin endpoints are off without it).
ADMIN_KEY_ENV = "BASKETGNN_ADMIN_KEY"
#: Set by ``basketgnn serve --workers N`` in each of its N worker processes.
WORKERS_ENV = "BASKETGNN_WORKERS"


@dataclass(frozen=True)
class ServeSettings:
    """What a server serves: a checkpoint, the data whose customers it looks up (None: the data
    the checkpoint records), items never recommended, the torch device and scoring threads,
    and the batching limits (``worker.Scorer``)."""

    checkpoint: str
    data: str | None = None
    blocked: str | None = None
    device: str | None = None
    threads: int | None = 1
    max_batch: int = 2048
    max_pending: int = 20_000

    def to_env(self) -> dict[str, str]:
        """The environment variables :meth:`from_env` reads back."""
        named = {"CHECKPOINT": self.checkpoint, "DATA": self.data, "BLOCKED": self.blocked,
                 "DEVICE": self.device, "THREADS": None if self.threads is None else str(self.threads),
                 "MAX_PENDING": str(self.max_pending)}  # fmt: skip
        return {f"BASKETGNN_{k}": v for k, v in named.items() if v is not None}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ServeSettings:
        """BASKETGNN_CHECKPOINT (required), BASKETGNN_DATA, BASKETGNN_BLOCKED,
        BASKETGNN_DEVICE, BASKETGNN_THREADS (default 1), BASKETGNN_MAX_PENDING."""
        env = dict(os.environ if env is None else env)
        if not env.get("BASKETGNN_CHECKPOINT"):
            raise UserError("set BASKETGNN_CHECKPOINT to the best.pt to serve (and BASKETGNN_DATA to its data).")
        threads, pending = env.get("BASKETGNN_THREADS"), env.get("BASKETGNN_MAX_PENDING")
        return cls(
            env["BASKETGNN_CHECKPOINT"], env.get("BASKETGNN_DATA") or None, env.get("BASKETGNN_BLOCKED") or None,
            env.get("BASKETGNN_DEVICE") or None, int(threads) if threads else 1,
            max_pending=int(pending) if pending else cls.max_pending,
        )  # fmt: skip

