"""Progress bars only at a terminal; a log file gets no carriage returns."""

from __future__ import annotations

import io

from basketgnn.engine import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_without_a_terminal(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    bar = progress.progress_bar(range(5), desc="epoch 1")
    assert list(bar) == list(range(5))
    bar.set_postfix(loss="0.1")
    assert stream.getvalue() == "" and not progress.is_terminal()


def test_a_bar_at_a_terminal_unless_switched_off(monkeypatch):
    stream = _Tty()
    monkeypatch.setattr("sys.stderr", stream)
    assert progress.is_terminal()
    assert list(progress.progress_bar(range(3), desc="epoch 1", enabled=False)) == [0, 1, 2]
    assert stream.getvalue() == ""
    bar = progress.progress_bar(range(3), desc="epoch 1")
    assert list(bar) == [0, 1, 2] and "epoch 1" in stream.getvalue()
