"""What the commands share: the consoles, option types, loading data and checkpoints, the line
printed per training epoch, and the results table.

Nothing here imports torch or a model at import time: ``basketgnn --help`` stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

DataOpt = Annotated[
    Path, typer.Option("--data", help="A prepared dataset folder or a DNNTSP .json file.")
]
SplitOpt = Annotated[
    str,
    typer.Option(
        "--split-kind",
        help="auto (predefined if the data has one, else temporal), predefined, temporal, "
        "random, or a split .json file written by `prepare --split-out`.",
    ),
]
CheckpointOpt = Annotated[Path, typer.Option(help="A trained model's checkpoint (best.pt).")]
DeviceOpt = Annotated[str | None, typer.Option(help="torch device.")]


def load_data(path: Path) -> Any:
    """A prepared dataset folder or a DNNTSP .json file, read as :class:`BasketData`."""
    from basketgnn.data.ingest import load_data as load

    return load(path)


def checkpoint_and_data(
    checkpoint: Path, data: Path | None, device: str | None, model_only: bool = False
) -> tuple[Any, Any, Path]:
    """The checkpoint's recommender, the data aligned to its catalogue, and that data's path
    (``data``, else the one the checkpoint records); unknown items are reported in a warning."""
    from basketgnn.workflow.training import load_trained_with_data

    recommender, dataset, data, dropped = load_trained_with_data(checkpoint, data, device, model_only=model_only)
    if dropped:
        err_console.print(
            f"[yellow]warning:[/] {dropped} basket entries of {data} hold items the checkpoint "
            "does not know; they are ignored."
        )
    return recommender, dataset, data


def epoch_printer(t0: float, indent: str = "") -> Any:
    """One line per epoch (with the time since ``t0``): the whole record where no bar is drawn."""

    def show(r: dict[str, Any]) -> None:
        k = first_k(r, "val_")
        console.print(
            f"{indent}epoch {r['epoch']:3d}  loss {r['train_loss']:.4f}  "
            f"val recall@{k} {r[f'val_recall@{k}']:.4f}  ndcg@{k} {r[f'val_ndcg@{k}']:.4f}  "
            f"mean ndcg {r['val_mean_ndcg']:.4f}  {r['train_s']:.1f}s  "
            f"[{time.perf_counter() - t0:.0f}s]" + ("  [green]best[/]" if r["best"] else ""),
            highlight=False,
        )

    return show


def first_k(metrics: dict[str, Any], prefix: str = "") -> int:
    """The smallest cut-off present (10, or less for a tiny catalogue)."""
    return min(int(k.split("@")[1]) for k in metrics if k.startswith(f"{prefix}recall@"))


def print_results(records: list[dict[str, Any]]) -> None:
    """A readable table: one row per metric@K, one column per model (best value in bold)."""
    from basketgnn.results_table import from_records, to_rich

    first = records[0]
    console.print(
        f"[bold]{first['data']}[/] · split {first['split']} · part {first['part']} "
        f"({first['n_users']:,} users)",
        highlight=False,
    )
    ks = sorted({int(k.split("@")[1]) for k in first["metrics"] if "@" in k and "_" not in k})
    columns = [f"{m}@{k}" for k in ks for m in ("recall", "ndcg", "phr")]
    seconds = [f"{r['timing_s'].get('fit', 0) + r['timing_s'].get('score', 0):.2f}" for r in records]
    console.print(to_rich(from_records(records, columns), [("fit+score s", seconds)]))
