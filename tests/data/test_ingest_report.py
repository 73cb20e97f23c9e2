"""The record of a prepared dataset (``data/ingest/report.py``): its meta and the report's lines."""

from __future__ import annotations

from basketgnn.data.dataset import from_sequences
from basketgnn.data.ingest.options import Columns, PrepareOptions
from basketgnn.data.ingest.report import record_source, report_lines


def test_report_lines_only_for_the_steps_that_ran():
    assert report_lines({"rows_read": 10, "duplicate_items_in_basket": 0}) == []
    report = {
        "rows_read": 1000, "rows_dropped_where": 12, "returns_excluded": 3, "baskets_capped": 2,
        "items_dropped_basket_cap": 7, "baskets_dropped_last_n": 40, "rows_dropped_rare_items": 5,
        "customers_dropped_basket_count": 0,
    }  # fmt: skip
    assert report_lines(report) == [
        "rows dropped by where: 12 of 1,000 read",
        "returns excluded (quantity <= 0): 3 rows",
        "basket cap: 2 baskets capped, 7 items dropped",
        "last-N cap: 40 older baskets dropped",
        "rare items (--min-item-baskets): 5 rows dropped",
    ]
    assert report_lines({"returns_kept": 1234, "customers_dropped_basket_count": 2}) == [
        "returns kept as purchases (quantity <= 0): 1,234 rows",
        "customers dropped for their number of baskets (--min-baskets / --max-baskets): 2",
    ]


def test_record_source_stores_the_options_under_their_names():
    data = from_sequences([[[0], [1]]], n_items=2)
    record_source(data, "log.csv", Columns(basket=None), PrepareOptions(last_n=3), {"rows_read": 2}, engine="x")
    assert data.meta["source"] == "log.csv" and data.meta["source_kind"] == "log"
    assert data.meta["engine"] == "x" and data.meta["report"] == {"rows_read": 2}
    assert data.meta["columns"]["basket"] is None and data.meta["options"]["last_n"] == 3
    assert PrepareOptions(**data.meta["options"]) == PrepareOptions(last_n=3)
    assert Columns(**data.meta["columns"]) == Columns(basket=None)
