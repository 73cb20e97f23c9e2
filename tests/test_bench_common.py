"""benchmarks/common.py's order of an alternating timing: each code or variant goes first in
turn, so drift within a round does not always fall on the same one."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import load_script


@pytest.fixture
def common(monkeypatch: pytest.MonkeyPatch):
    yield from load_script(monkeypatch, "common.py", "_bench_common")


def test_alternating_rounds_flip_the_order(common):
    codes = (("old", "/a"), ("new", "/b"), ("third", "/c"))
    orders = [[label for label, _ in common.in_turn(codes, r)] for r in range(4)]
    assert orders == [["old", "new", "third"], ["third", "new", "old"]] * 2
    assert common.in_turn([], 1) == []
