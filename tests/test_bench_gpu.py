"""benchmarks/bench_gpu.py without a GPU: how it compares two devices' ranked rows (identical
rows, equal top-k sets per customer, the score difference) and reads its NAME=VALUE arguments."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.benchmarks import load_script


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    yield from load_script(monkeypatch, "bench_gpu.py", "_bench_gpu")


def _rows(folder: Path, rows: list[tuple[str, str, int, float]]) -> Path:
    """One part of a recommendation dataset: (customer_id, item_id, rank, score) rows."""
    folder.mkdir(parents=True)
    c, i, r, s = zip(*rows)
    table = pa.table({"customer_id": list(c), "item_id": list(i), "rank": pa.array(r, pa.int32()),
                      "score": pa.array(s, pa.float32())})  # fmt: skip
    pq.write_table(table, folder / "part-00000.parquet")
    return folder


BASE = [("a", "x", 1, 0.9), ("a", "y", 2, 0.5), ("b", "z", 1, 0.7), ("b", "x", 2, 0.6)]


def test_identical_rows_agree_fully(bench, tmp_path: Path) -> None:
    got = bench.agreement(_rows(tmp_path / "a", BASE), _rows(tmp_path / "b", BASE))
    assert got["identical_row_share"] == 1.0 and got["same_topk_set_share"] == 1.0
    assert got["max_score_diff_where_identical"] == 0.0 and got["max_score"] == pytest.approx(0.9)


def test_a_rank_swap_keeps_the_set_and_a_new_item_does_not(bench, tmp_path: Path) -> None:
    swapped = [("a", "x", 1, 0.9), ("a", "y", 2, 0.5), ("b", "x", 1, 0.65), ("b", "z", 2, 0.65)]
    got = bench.agreement(_rows(tmp_path / "a", BASE), _rows(tmp_path / "b", swapped))
    assert got["identical_row_share"] == 0.5 and got["same_topk_set_share"] == 1.0
    other = [("a", "x", 1, 0.9), ("a", "w", 2, 0.5), ("b", "z", 1, 0.7), ("b", "x", 2, 0.6000001)]
    got = bench.agreement(_rows(tmp_path / "c", BASE), _rows(tmp_path / "d", other))
    assert got["identical_row_share"] == 0.75 and got["same_topk_set_share"] == 0.5
    assert 0 < got["max_score_diff_where_identical"] < 1e-6


def test_different_row_counts_are_reported(bench, tmp_path: Path) -> None:
    got = bench.agreement(_rows(tmp_path / "a", BASE), _rows(tmp_path / "b", BASE[:3]))
    assert got == {"same_row_count": False, "rows_a": 4, "rows_b": 3}


def test_named_arguments_need_a_value(bench) -> None:
    assert bench.named(["TaFeng=a.json", "r=b,c"]) == [("TaFeng", "a.json"), ("r", "b,c")]
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        bench.named(["TaFeng"])
