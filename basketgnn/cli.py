"""The ``basketgnn`` command line. Only this module reads argv.

User errors (:class:`basketgnn.errors.UserError`) print one message and exit with status 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console

from basketgnn.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Graph-temporal next-basket recommendation: prepare data, evaluate, train, predict.",
    rich_markup_mode="markdown",
)
console = Console()
err_console = Console(stderr=True)

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


@app.command()
def synth(
    out: Annotated[Path, typer.Option("--out", help="Output .csv or .parquet file.")],
    customers: Annotated[int, typer.Option(help="Number of customers.")] = 1000,
    items: Annotated[int, typer.Option(help="Catalogue size.")] = 200,
    mean_baskets: Annotated[float, typer.Option(help="Mean baskets per customer.")] = 8.0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Generate a synthetic transaction log with planted structure.

    Example: `basketgnn synth --out log.csv --customers 5000 --items 500`
    """
    from basketgnn.data.synth import generate_log, write_log

    t0 = time.perf_counter()
    df = generate_log(n_customers=customers, n_items=items, mean_baskets=mean_baskets, seed=seed)
    write_log(df, out)
    console.print(
        f"wrote {out}: {len(df):,} rows, {df['customer_id'].nunique():,} customers, "
        f"{df['item_id'].nunique():,} items ({time.perf_counter() - t0:.1f}s)"
    )


@app.command()
def prepare(
    log: Annotated[
        Path, typer.Argument(help="Transaction log: CSV/Parquet file or folder, or DNNTSP .json.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the prepared dataset to.")],
    customer_col: Annotated[str, typer.Option(help="Customer id column.")] = "customer_id",
    item_col: Annotated[str, typer.Option(help="Item id column.")] = "item_id",
    basket_col: Annotated[
        str, typer.Option(help="Basket id column; '' if the log has none.")
    ] = "basket_id",
    time_col: Annotated[
        str, typer.Option(help="Timestamp column; '' if the log has none.")
    ] = "timestamp",
    min_item_baskets: Annotated[
        int, typer.Option(help="Drop items bought in fewer baskets than this.")
    ] = 1,
    min_baskets: Annotated[
        int, typer.Option(help="Drop customers with fewer baskets than this (>= 2).")
    ] = 2,
    max_baskets: Annotated[
        int | None, typer.Option(help="Drop customers with more baskets than this.")
    ] = None,
    last_n: Annotated[
        int | None, typer.Option(help="Keep only each customer's last N baskets.")
    ] = None,
    on_bad_rows: Annotated[
        str, typer.Option(help="error: stop on a bad row; skip: drop bad rows and report them.")
    ] = "error",
    split_out: Annotated[
        Path | None,
        typer.Option(help="Also write a seeded random user split (JSON) to this file."),
    ] = None,
    split_fractions: Annotated[
        str, typer.Option(help="train/validate/test fractions for --split-out.")
    ] = "0.8/0.1/0.1",
    seed: Annotated[int, typer.Option(help="Seed of the random user split.")] = 0,
) -> None:
    """Read a transaction log into a prepared dataset folder.

    Example: `basketgnn prepare data/demo_transactions.csv --out runs/demo/data`
    """
    from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log, read_dnntsp_json
    from basketgnn.data.split import random_user_split, save_split

    if on_bad_rows not in ("error", "skip"):
        raise UserError(f"--on-bad-rows must be 'error' or 'skip', not {on_bad_rows!r}.")
    if min_baskets < 2:
        raise UserError("--min-baskets must be at least 2 (a history and a target basket).")
    t0 = time.perf_counter()
    if log.suffix == ".json":
        data = read_dnntsp_json(log)
    else:
        data = prepare_log(
            log,
            Columns(
                customer=customer_col,
                item=item_col,
                basket=basket_col or None,
                timestamp=time_col or None,
            ),
            PrepareOptions(
                min_item_baskets=min_item_baskets,
                last_n_baskets=last_n,
                min_baskets=min_baskets,
                max_baskets=max_baskets,
                on_bad_rows=on_bad_rows,  # type: ignore[arg-type]
            ),
        )
    data.save(out)
    seconds = time.perf_counter() - t0
    console.print(
        f"prepared {out}: {data.n_users:,} customers, {data.n_items:,} items, "
        f"{data.n_baskets:,} baskets ({seconds:.2f}s)"
    )
    skipped = data.meta.get("report", {}).get("rows_skipped")
    if skipped:
        err_console.print(f"[yellow]skipped {skipped} bad row(s):[/] "
                          + "; ".join(data.meta["report"]["skipped_because"]))
    if split_out is not None:
        try:
            fractions = tuple(float(f) for f in split_fractions.split("/"))
        except ValueError:
            raise UserError(
                f"--split-fractions must look like 0.8/0.1/0.1, not {split_fractions!r}."
            ) from None
        split = random_user_split(data, fractions, seed)  # type: ignore[arg-type]
        save_split(split, data, split_out)
        console.print(f"wrote split {split.name} to {split_out}")


@app.command()
def evaluate(
    data: DataOpt,
    model: Annotated[
        str | None, typer.Option(help="Baseline name: g-topfreq, p-topfreq, tifu-knn.")
    ] = None,
    split: Annotated[str, typer.Option(help="Part to evaluate on: test or validate.")] = "test",
    split_kind: SplitOpt = "auto",
    seed: Annotated[int, typer.Option(help="Seed (random split, models).")] = 0,
    output: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """Fit a baseline on the training part and print its metrics on the chosen part.

    Example: `basketgnn evaluate --data TaFeng.json --model p-topfreq --output pt.json`
    """
    from basketgnn.data.ingest import load_data
    from basketgnn.data.split import make_split
    from basketgnn.evaluate import evaluate_model, result_record
    from basketgnn.io_utils import write_json
    from basketgnn.recommenders.registry import make_baseline

    if model is None:
        raise UserError("Name a model with --model (g-topfreq, p-topfreq, tifu-knn).")
    recommender = make_baseline(model)
    t0 = time.perf_counter()
    dataset = load_data(data)
    sp = make_split(dataset, split_kind, seed)
    instances = sp[split]
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    recommender.fit(dataset, sp["train"], sp["validate"])
    fit_s = time.perf_counter() - t0
    metrics, score_s = evaluate_model(recommender, dataset, instances)
    record = result_record(
        recommender, str(data), sp, split, metrics,
        {"load": load_s, "fit": fit_s, "score": score_s}, len(instances),
    )
    print_results([record])
    if output is not None:
        write_json(output, record)
        console.print(f"wrote {output}")

DEFAULT_LOG = Path(__file__).resolve().parent.parent / "data" / "demo_transactions.csv"


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder for every output.")] = Path(
        "runs/demo"
    ),
    log: Annotated[Path, typer.Option(help="Transaction log to run on.")] = DEFAULT_LOG,
) -> None:
    """The main job on the embedded default data: prepare, evaluate every model, print a table.

    Writes `OUT/data/` (prepared dataset) and `OUT/metrics.json` (one record per model).

    Example: `basketgnn demo --out runs/demo`
    """
    from basketgnn.data.ingest import prepare_log
    from basketgnn.data.split import make_split
    from basketgnn.evaluate import evaluate_model, result_record
    from basketgnn.io_utils import write_json
    from basketgnn.recommenders.registry import BASELINES, make_baseline

    t0 = time.perf_counter()
    data = prepare_log(log)
    data.save(out / "data")
    console.print(
        f"[bold]prepare[/] {log} -> {out / 'data'}: {data.n_users:,} customers, "
        f"{data.n_items:,} items, {data.n_baskets:,} baskets ({time.perf_counter() - t0:.1f}s)"
    )
    sp = make_split(data, "temporal")
    records = []
    for name in BASELINES:
        model = make_baseline(name)
        t0 = time.perf_counter()
        model.fit(data, sp["train"], sp["validate"])
        fit_s = time.perf_counter() - t0
        metrics, score_s = evaluate_model(model, data, sp["test"])
        records.append(
            result_record(model, str(out / "data"), sp, "test", metrics,
                          {"fit": fit_s, "score": score_s}, len(sp["test"]))
        )
    print_results(records)
    write_json(out / "metrics.json", records)
    console.print(f"wrote {out / 'metrics.json'}")


def print_results(records: list[dict]) -> None:
    """A readable table: one row per model, Recall / NDCG / PHR at each K."""
    from rich.table import Table

    ks = sorted({int(k.split("@")[1]) for r in records for k in r["metrics"] if "@" in k})
    first = records[0]
    table = Table(
        title=f"{first['data']} · split {first['split']} · part {first['part']} "
        f"({first['n_users']:,} users)"
    )
    table.add_column("model")
    for k in ks:
        table.add_column(f"R/N/P@{k}", justify="right")
    table.add_column("fit+score s", justify="right")
    for r in records:
        m = r["metrics"]
        cells = [
            "/".join(f"{m[f'{x}@{k}']:.4f}" if m[f"{x}@{k}"] is not None else "-"
                     for x in ("recall", "ndcg", "phr"))
            for k in ks
        ]
        t = r["timing_s"]
        table.add_row(r["model"], *cells, f"{t.get('fit', 0) + t.get('score', 0):.2f}")
    console.print(table)


def main() -> None:
    """Console-script entry point: user errors become one clean message and exit status 2."""
    try:
        app(standalone_mode=False)
    except UserError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.exceptions.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
