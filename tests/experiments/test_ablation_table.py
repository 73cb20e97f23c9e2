"""The ablation's table and chart (basketgnn/experiments/ablation_table.py): mean ± std per
variant, one best cell per column (ties all best), a section per dataset, settings of one name
kept apart."""

from __future__ import annotations

from basketgnn.experiments.ablation_table import write_chart, write_table


def bold_cells_per_column(table: str, dataset: str) -> list[int]:
    section = table.split(f"## {dataset}\n", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r][1:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    return [sum(c[j].startswith("**") for c in cells) for j in range(2, len(cells[0]))]


def fake_record(dataset: str, variant: str, seed: int | None, recall: float, ndcg: float) -> dict:
    return {
        "dataset": dataset, "variant": variant, "seed": seed, "config_hash": variant,
        "kind": "baseline" if seed is None else "dnntsp", "split": "predefined",
        "metrics": {"recall@10": recall, "ndcg@10": ndcg, "phr@10": None},
    }  # fmt: skip


def test_table_marks_one_best_cell_per_column_and_omits_std_of_single_runs(tmp_path):
    results = [
        fake_record("DC", "full", 0, 0.30, 0.20),
        fake_record("DC", "full", 1, 0.32, 0.22),
        fake_record("DC", "no-gcn", 0, 0.28, 0.25),
        fake_record("DC", "no-gcn", 1, 0.26, 0.27),
        fake_record("DC", "p-topfreq", None, 0.29, 0.10),
        fake_record("TaFeng", "full", 0, 0.10, 0.05),
        fake_record("TaFeng", "p-topfreq", None, 0.12, 0.04),
    ]
    metrics = ["recall@10", "ndcg@10", "phr@10"]
    table = write_table(results, tmp_path / "t.md", metrics)
    assert (tmp_path / "t.md").read_text() == table
    assert "| full | 2 | **0.3100 ± 0.0141** | 0.2100 ± 0.0141 | – |" in table
    assert "| no-gcn | 2 | 0.2700 ± 0.0141 | **0.2600 ± 0.0141** | – |" in table
    assert "| p-topfreq | 1 | 0.2900 | 0.1000 | – |" in table
    assert bold_cells_per_column(table, "DC") == [1, 1, 0]  # phr@10 undefined everywhere
    assert bold_cells_per_column(table, "TaFeng") == [1, 1, 0]
    assert table.index("## DC") < table.index("## TaFeng")

    # Cells that print equal are equally best.
    tie = write_table(results + [fake_record("TaFeng", "no-gcn", 0, 0.12, 0.01)], tmp_path / "t.md")
    assert bold_cells_per_column(tie, "TaFeng")[0] == 2

    write_chart(results, tmp_path / "c.png", metrics)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_table_keeps_two_settings_of_one_name_apart(tmp_path):
    old = fake_record("DC", "full", 0, 0.1, 0.1) | {"config_hash": "aaaaaaaa"}
    new = fake_record("DC", "full", 0, 0.2, 0.2) | {"config_hash": "bbbbbbbb"}
    table = write_table([old, new], tmp_path / "t.md", ["recall@10"])
    assert (
        "| full [aaaaaa] | 1 | 0.1000 |" in table and "| full [bbbbbb] | 1 | **0.2000** |" in table
    )
