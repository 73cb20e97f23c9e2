"""The report (basketgnn.pipeline.report): report.html with its PNG charts next to it, and the
metrics.json block of a nightly run."""

from __future__ import annotations

import re

from basketgnn.pipeline.report import nightly_summary
from tests.support.pipeline import OUTPUTS, PNG_SIGNATURE


def test_report_references_valid_pngs_next_to_it(first):
    config, _ = first
    run_dir = config.parent / "run"
    page = (run_dir / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert sorted(images) == sorted(f for f in OUTPUTS if f.endswith(".png"))
    for name in images:
        assert (run_dir / name).read_bytes().startswith(PNG_SIGNATURE), name
    assert "<table>" in page and "<b>" in page and "temporal" in page
    assert "http" not in page  # self-contained: no external assets


def test_the_nightly_block_holds_what_a_run_sampled_and_reused_and_is_empty_otherwise():
    sample = {"sampled": 80, "customers": 150, "seed": 1}
    fits = {"dnntsp": {"best_epoch": 1, "warm_start": {"checkpoint": "/r/best.pt"}}, "sasrec": {}}
    assert nightly_summary({"sample": sample}, fits, 1000) == {
        "sample": sample,
        "warm_start": {"dnntsp": {"checkpoint": "/r/best.pt"}},
        "neighbour_pool_cap": 1000,
    }
    assert nightly_summary({"name": "temporal"}, {"dnntsp": {"best_epoch": 1}}, None) == {}
