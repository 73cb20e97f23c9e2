"""The one result-table renderer (basketgnn/results_table.py): rows from result records in the
asked column order, the best value per column at the printed precision (ties all best, nothing
best with one row unless asked), missing metrics, and the Markdown, rich, HTML and log-line
forms, each checked against text written out by hand."""

from __future__ import annotations

import math

from basketgnn.results_table import (
    ResultTable,
    from_records,
    to_html,
    to_line,
    to_markdown,
    to_rich,
)

RECORDS = [
    {"model": "g-topfreq", "metrics": {"recall@10": 0.1, "ndcg@10": 0.30004, "recall@20": 0.2}},
    {"model": "dnntsp", "metrics": {"recall@10": 0.25, "ndcg@10": 0.29996, "phr@10": None}},
    {"model": "p-topfreq", "metrics": {"recall@10": 0.2, "ndcg@10": 0.1, "recall@20": math.nan}},
]
COLUMNS = ["ndcg@10", "recall@10", "recall@20", "phr@10"]


def test_from_records_keeps_record_and_column_order_and_missing_metrics():
    table = from_records(RECORDS, COLUMNS)
    assert table.rows == ["g-topfreq", "dnntsp", "p-topfreq"] and table.columns == COLUMNS
    assert table.values[0] == [0.30004, 0.1, 0.2, None]  # phr@10 absent: None
    assert table.values[1] == [0.29996, 0.25, None, None]  # recall@20 absent, phr@10 null
    assert math.isnan(table.values[2][2])
    variants = from_records([{"variant": "full", "metrics": {"x": 1.0}}], ["x"], label="variant")
    assert variants.rows == ["full"] and variants.values == [[1.0]]


def test_best_is_the_highest_printed_value_and_ties_are_all_best():
    table = from_records(RECORDS, COLUMNS)
    # ndcg@10: 0.30004 and 0.29996 both print 0.3000: both best, p-topfreq's 0.1000 not.
    assert [table.cell(i, 0)[1] for i in range(3)] == [True, True, False]
    assert [table.cell(i, 1) for i in range(3)] == [("0.1000", False), ("0.2500", True), ("0.2000", False)]
    # recall@20: NaN and missing values are "–" and never best; the one value left is best.
    assert [table.cell(i, 2) for i in range(3)] == [("0.2000", True), ("–", False), ("–", False)]
    assert table.best(3) is None and table.cell(0, 3, missing="n/a") == ("n/a", False)
    lone = ResultTable(["only"], ["m"], [[0.5]])
    assert lone.best(0) is None and lone.cell(0, 0) == ("0.5000", False)  # nothing to compare
    assert ResultTable(["only"], ["m"], [[0.5]], best_of_one=True).cell(0, 0) == ("0.5000", True)
    assert ResultTable(["a", "b"], ["m"], [[0.123], [0.124]], digits=2).best(0) == 0.12  # a tie at 2 digits


def test_markdown_marks_best_cells_bold_with_counts_and_spread():
    table = from_records(RECORDS, COLUMNS)
    assert to_markdown(table) == [
        "| model | ndcg@10 | recall@10 | recall@20 | phr@10 |",
        "|---|---:|---:|---:|---:|",
        "| g-topfreq | **0.3000** | 0.1000 | **0.2000** | – |",
        "| dnntsp | **0.3000** | **0.2500** | – | – |",
        "| p-topfreq | 0.1000 | 0.2000 | – | – |",
    ]
    runs = ResultTable(["full", "p-topfreq"], ["recall@10"], [[0.31], [0.29]],
                       spread=[[0.01414], [None]], counts=[2, 1])  # fmt: skip
    assert to_markdown(runs, first="variant") == [
        "| variant | n | recall@10 |",
        "|---|---:|---:|",
        "| full | 2 | **0.3100 ± 0.0141** |",
        "| p-topfreq | 1 | 0.2900 |",
    ]


def test_rich_table_has_metrics_as_rows_models_as_columns_and_a_section_per_cut_off():
    table = from_records(RECORDS, ["recall@10", "ndcg@10", "recall@20"])
    out = to_rich(table, [("fit+score s", ["1.00", "2.00", "3.00"])])
    assert [c.header for c in out.columns] == ["metric", "g-topfreq", "dnntsp", "p-topfreq"]
    cells = [list(c.cells) for c in out.columns]
    assert cells[0] == ["recall@10", "ndcg@10", "recall@20", "fit+score s"]
    assert [column[0] for column in cells[1:]] == ["0.1000", "[bold]0.2500[/]", "0.2000"]
    assert [column[1] for column in cells[1:]] == ["[bold]0.3000[/]", "[bold]0.3000[/]", "0.1000"]
    assert [column[2] for column in cells[1:]] == ["[bold]0.2000[/]", "-", "-"]
    assert [column[3] for column in cells[1:]] == ["1.00", "2.00", "3.00"]
    # A section ends where the cut-off changes (after ndcg@10) and after the last metric.
    assert [row.end_section for row in out.rows] == [False, True, True, False]


def test_log_line_leaves_undefined_metrics_out():
    table = from_records(RECORDS, COLUMNS)
    assert to_line(table, 0) == " g-topfreq: ndcg@10 0.3000  recall@10 0.1000  recall@20 0.2000"
    assert to_line(table, 2, width=0) == "p-topfreq: ndcg@10 0.1000  recall@10 0.2000"


def test_html_escapes_names_and_bolds_best_cells():
    table = ResultTable(["<a>", "b"], ["m&n"], [[0.5], [None]])
    assert to_html(table, [("note", ["x<y", "z"])]) == (
        "<table><tr><th>model</th><th>m&amp;n</th><th>note</th></tr>"
        "<tr><th>&lt;a&gt;</th><td><b>0.5000</b></td><td>x&lt;y</td></tr>"
        "<tr><th>b</th><td>n/a</td><td>z</td></tr></table>"
    )
