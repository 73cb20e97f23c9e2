"""benchmarks/bench_scoring_ways.py's ways and their order: each way goes first in turn and the
order flips every other round, so drift within a round does not always fall on the same one."""

from __future__ import annotations

import argparse

import pytest

from tests.support.benchmarks import load_script


@pytest.fixture
def ways(monkeypatch: pytest.MonkeyPatch):
    yield from load_script(monkeypatch, "bench_scoring_ways.py", "_bench_scoring_ways")


def test_every_way_leads_in_turn_and_odd_rounds_reverse(ways):
    order = [ways.round_order(["a", "b", "c"], r) for r in range(6)]
    assert order == [["a", "b", "c"], ["a", "c", "b"], ["c", "a", "b"], ["c", "b", "a"], ["b", "c", "a"], ["b", "a", "c"]]
    assert {o[0] for o in order} == {"a", "b", "c"} and all(sorted(o) == ["a", "b", "c"] for o in order)


def test_a_way_is_a_label_a_code_folder_and_a_checkpoint(ways, tmp_path):
    label, code, checkpoint = ways.parse_way(f"stage={tmp_path}=runs/x/best.pt")
    assert label == "stage" and code == tmp_path.resolve() and checkpoint.name == "best.pt" and checkpoint.is_absolute()
    for bad in ("stage", "stage=/a", "=/a=/b", "a=b=c=d"):
        with pytest.raises(argparse.ArgumentTypeError, match="LABEL=CODE=CHECKPOINT"):
            ways.parse_way(bad)
