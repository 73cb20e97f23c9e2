"""The ``basketgnn`` command line. Only this module reads argv.

User errors (:class:`basketgnn.errors.UserError`) print one message and exit with status 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from basketgnn import registry
from basketgnn.data.ingest import DEFAULT_MAX_BASKET_ITEMS
from basketgnn.errors import UserError

#: Customer id of a history typed into `predict --history` (never a real id: it holds a NUL).
TYPED_HISTORY_ID = "\x00typed-history"

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Graph-temporal next-basket recommendation: prepare data, evaluate, train, predict.",
    rich_markup_mode="markdown",
)
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


@app.command()
def synth(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Output .csv or .parquet file, or a folder (a name without those suffixes): "
            "a big log written as Parquet parts, --chunk-customers customers at a time.",
        ),
    ],
    customers: Annotated[int, typer.Option(help="Number of customers.")] = 1000,
    items: Annotated[int, typer.Option(help="Catalogue size.")] = 200,
    mean_baskets: Annotated[float, typer.Option(help="Mean baskets per customer.")] = 8.0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    preset: Annotated[
        str,
        typer.Option(
            help="'': the knobs above; 'realistic': a raw retail export (long-tailed baskets and "
            "histories, cancellations, guests, non-product codes, float-written customer ids; "
            "the knobs above are ignored, see data/README.md); 'realistic-clean': the realistic "
            "generator settings for --customers customers, without the export's dirt (the shape "
            "of the cleaned twin, for big logs)."
        ),
    ] = "",
    clean_out: Annotated[
        Path | None,
        typer.Option(help="With --preset realistic: also write the cleaned twin of the export here."),
    ] = None,
    chunk_customers: Annotated[
        int, typer.Option(help="With a folder --out: customers per Parquet part (bounds memory).")
    ] = 50_000,
) -> None:
    """Generate a synthetic transaction log with planted structure.

    Example: `basketgnn synth --out log.csv --customers 5000 --items 500`, or
    `basketgnn synth --preset realistic --out export.csv --clean-out clean.csv`, or a million
    customers as Parquet parts: `basketgnn synth --preset realistic-clean --customers 1000000
    --out big_log/`
    """
    from basketgnn.data.synth import (
        REALISTIC,
        generate_log,
        realistic_export,
        write_log,
        write_log_parts,
    )

    if preset not in ("", "realistic", "realistic-clean"):
        raise UserError(
            f"synth: unknown --preset {preset!r}; use 'realistic', 'realistic-clean' or leave it out."
        )
    if clean_out is not None and preset != "realistic":
        raise UserError("synth: --clean-out needs --preset realistic (only it has a cleaned twin).")
    folder = out.suffix.lower() not in (".csv", ".parquet")
    if folder and preset == "realistic":
        raise UserError(
            f"synth: --out {out} is a folder, which only plain and realistic-clean logs can be "
            "written as; give a .csv or .parquet file for --preset realistic."
        )
    if preset == "realistic-clean":
        settings: dict[str, Any] = {k: v for k, v in REALISTIC.items() if k != "n_customers"}
    else:
        settings = {"n_items": items, "mean_baskets": mean_baskets}
    t0 = time.perf_counter()
    try:
        if folder:
            rows = 0

            def on_part(index: int, count: int, n_rows: int) -> None:
                nonlocal rows
                rows += n_rows
                console.print(f"  part {index + 1}/{count}: {n_rows:,} rows")

            parts = write_log_parts(
                out, customers, chunk_customers, seed, on_part=on_part, **settings
            )
            console.print(
                f"wrote {out}/: {len(parts)} Parquet part(s), {customers:,} customers"
                + (f", {rows:,} rows written now" if rows else "")
                + f" ({time.perf_counter() - t0:.1f}s)"
            )
            return
        if preset == "realistic":
            export = realistic_export(seed)
            df = export.export
            if clean_out is not None:
                write_log(export.clean, clean_out)
        else:
            df = generate_log(n_customers=customers, seed=seed, **settings)
        write_log(df, out)
    except ValueError as e:
        raise UserError(f"synth: {e}") from None
    console.print(
        f"wrote {out}: {len(df):,} rows, {df['customer_id'].nunique():,} customers, "
        f"{df['item_id'].nunique():,} items ({time.perf_counter() - t0:.1f}s)"
    )
    if clean_out is not None:
        console.print(f"wrote {clean_out}: {len(export.clean):,} rows (cleaned twin)")


# prepare's options that act on a transaction log; a DNNTSP .json split has no columns to name
# and is imported as published, so they have no meaning there.
LOG_ONLY_OPTIONS = (
    "customer_col", "item_col", "basket_col", "time_col", "min_item_baskets", "min_baskets",
    "max_baskets", "last_n", "on_bad_rows", "quantity_col", "keep_returns", "where",
    "max_basket_items", "time_format",
)  # fmt: skip


def _given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The flags (e.g. ``--min-baskets``) among the parameters ``names`` that the user passed,
    even when set to their default value."""
    # Compared by name: click's ParameterSource lives in click or, in newer typer, in typer._click.
    return [
        param.opts[0]
        for param in ctx.command.params
        if param.name in names
        and getattr(ctx.get_parameter_source(param.name), "name", "DEFAULT")
        not in ("DEFAULT", "DEFAULT_MAP")
    ]


@app.command()
def prepare(
    ctx: typer.Context,
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
    quantity_col: Annotated[
        str,
        typer.Option(
            help="Quantity column; rows with quantity <= 0 are returns or cancellations and are "
            "excluded (and counted). '' (the default): no quantity column, every row is a "
            "purchase."
        ),
    ] = "",
    keep_returns: Annotated[
        bool,
        typer.Option(
            "--keep-returns",
            help="With --quantity-col: keep rows with quantity <= 0 as ordinary rows (the item "
            "was in the basket) instead of excluding them; they are still counted.",
        ),
    ] = False,
    where: Annotated[
        str | None,
        typer.Option(
            help="DuckDB condition over the log's columns; rows where it is not true are dropped "
            "(and counted). In a CSV every column is text. "
            "E.g. `--where \"StockCode NOT IN ('POST', 'M', 'BANK CHARGES')\"`."
        ),
    ] = None,
    max_basket_items: Annotated[
        int | None,
        typer.Option(
            help="Cap every basket at its N most popular items (popularity over the whole log); "
            "the baskets capped and items dropped are counted. 0 or left out: no cap."
        ),
    ] = DEFAULT_MAX_BASKET_ITEMS,
    time_format: Annotated[
        str | None,
        typer.Option(
            help="strptime format of the timestamps when they are not ISO "
            "(2024-01-31 12:00:00), e.g. '%m/%d/%Y %H:%M' for 12/1/2010 8:26."
        ),
    ] = None,
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

    A DNNTSP .json split is imported as published: the column and filter options apply only to
    transaction logs and are refused with it.

    Rows go through, in this order: `--where`, returns (`--quantity-col`), bad rows
    (`--on-bad-rows`), duplicates in a basket, `--min-item-baskets`, `--max-basket-items`,
    `--last-n`, `--min-baskets` / `--max-baskets`; meta.json counts what each step dropped.

    Example: `basketgnn prepare data/demo_transactions.csv --out runs/demo/data`

    A retail export (returns as negative quantities, non-product codes, US dates):
    `basketgnn prepare export/ --out runs/shop/data --customer-col CustomerID
    --item-col StockCode --basket-col InvoiceNo --time-col InvoiceDate --quantity-col Quantity
    --time-format '%m/%d/%Y %H:%M' --where "StockCode NOT IN ('POST', 'M', 'BANK CHARGES')"
    --on-bad-rows skip`
    """
    from basketgnn.data.ingest import (
        Columns,
        PrepareOptions,
        prepare_log,
        read_dnntsp_json,
        report_lines,
    )
    from basketgnn.data.split import random_user_split, save_split

    if log.suffix == ".json" and (given := _given_options(ctx, LOG_ONLY_OPTIONS)):
        raise UserError(
            f"{log}: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only to "
            "transaction logs (CSV/Parquet). A DNNTSP .json split is used as published, with its "
            "own users, items and train/validate/test parts. Remove "
            f"{'that option' if len(given) == 1 else 'those options'}, or prepare the "
            "transaction log the split was made from instead."
        )
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
                quantity=quantity_col or None,
            ),
            PrepareOptions(
                min_item_baskets=min_item_baskets,
                last_n_baskets=last_n,
                min_baskets=min_baskets,
                max_baskets=max_baskets,
                on_bad_rows=on_bad_rows,  # type: ignore[arg-type]
                where=where,
                keep_returns=keep_returns,
                max_basket_items=max_basket_items or None,
                time_format=time_format,
            ),
        )
    data.save(out)
    seconds = time.perf_counter() - t0
    console.print(
        f"prepared {out}: {data.n_users:,} customers, {data.n_items:,} items, "
        f"{data.n_baskets:,} baskets ({seconds:.2f}s)"
    )
    report = data.meta.get("report", {})
    if dropped := report_lines(report):
        console.print("\n".join(f"  {line}" for line in dropped), highlight=False)
    skipped = report.get("rows_skipped")
    if skipped:
        err_console.print(f"[yellow]skipped {skipped:,} bad row(s):[/] "
                          + "; ".join(report["skipped_because"]))
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
    data: Annotated[
        Path | None,
        typer.Option(
            help="Prepared dataset folder or DNNTSP .json (with --checkpoint, default: the data "
            "it was trained on)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help=f"Model to fit on the split's training part: {registry.help_text()}."),
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="A trained model's checkpoint (best.pt) instead of --model.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML options of a neural --model (see `basketgnn config`).")
    ] = None,
    split: Annotated[str, typer.Option(help="Part to evaluate on: test or validate.")] = "test",
    split_kind: SplitOpt = "auto",
    seed: Annotated[int, typer.Option(help="Seed of a random split.")] = 0,
    device: Annotated[str | None, typer.Option(help="torch device (a checkpoint or a neural --model).")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
    fused: Annotated[
        bool,
        typer.Option(
            "--fused/--model-only",
            help="With --checkpoint: rank as trained (with the fusion with TIFU-KNN that "
            "validation chose), or by the model's own scores alone.",
        ),
    ] = True,
) -> None:
    """Metrics of a model fitted on the split's training part (neural models choose their best
    epoch on its validation part), or of a trained checkpoint (`--model-only`: without its
    fusion with TIFU-KNN).

    Examples: `basketgnn evaluate --data TaFeng.json --model p-topfreq --output pt.json`,
    `basketgnn evaluate --data TaFeng.json --model dnntsp --config small.yaml` and
    `basketgnn evaluate --checkpoint runs/tafeng/best.pt --output dnntsp.json`
    """
    from basketgnn import workflow
    from basketgnn.io_utils import write_json

    if (model is None) == (checkpoint is None):
        raise UserError(
            f"Name exactly one model: --model ({', '.join(registry.names())}) or --checkpoint FILE."
        )
    if config is not None and (model is None or not registry.is_neural(model)):
        raise UserError("--config sets the options of a neural --model; remove it here.")
    t0 = time.perf_counter()
    if checkpoint is not None:
        recommender, dataset, data = _checkpoint_and_data(checkpoint, data, device, model_only=not fused)
        if split_kind == "auto":
            split_kind = recommender.checkpoint.get("split_spec", "auto")
        entry = workflow.ModelEntry(recommender.name, label=None if fused else f"{recommender.name} (model only)")
    else:
        if not fused:
            raise UserError("--model-only applies to a --checkpoint; train with `fusion: off` instead.")
        assert model is not None
        registry.check_name(model, "--model: ")
        if data is None:
            raise UserError("--data is required with --model.")
        options = workflow.load_config(config, model=model, device=device) if registry.is_neural(model) else None
        entry = workflow.ModelEntry(model, options)
        dataset = _load(data)
    sp = workflow.split(dataset, split_kind, seed)
    _ = sp[split]  # an unknown part stops here, before any fitting
    load_s = time.perf_counter() - t0
    if checkpoint is not None:  # trained already
        outcome = workflow.FitOutcome(entry, recommender, 0.0)
    else:  # fitted on the training part here, like every model
        outcome = workflow.train(entry, dataset, sp, progress=True, on_epoch=_epoch_printer(t0))
    result = workflow.evaluate(outcome, dataset, sp, split, str(data))
    record = result.to_json()
    record["timing_s"] = {"load": round(load_s, 3), **record["timing_s"]}
    print_results([record])
    if output is not None:
        write_json(output, record)
        console.print(f"wrote {output}")


def _load(path: Path) -> Any:
    from basketgnn.data.ingest import load_data

    return load_data(path)


def _checkpoint_and_data(
    checkpoint: Path, data: Path | None, device: str | None, model_only: bool = False
) -> tuple[Any, Any, Path]:
    """The checkpoint's recommender and the data aligned to its catalogue."""
    from basketgnn.workflow import load_trained

    recommender = load_trained(checkpoint, device, model_only=model_only)
    if data is None:
        if "data" not in recommender.checkpoint:
            raise UserError(f"{checkpoint} does not record its data; pass --data.")
        data = Path(recommender.checkpoint["data"])
    dataset, dropped = _load(data).aligned_to(recommender.item_ids)
    if dropped:
        err_console.print(
            f"[yellow]warning:[/] {dropped} basket entries of {data} hold items the checkpoint "
            "does not know; they are ignored."
        )
    return recommender, dataset, data


@app.command()
def train(
    data: DataOpt,
    model: Annotated[
        str, typer.Option(help=f"Model to train: {registry.help_text('neural')}.")
    ] = registry.DEFAULT_MODEL,
    config: Annotated[
        Path | None, typer.Option(help="YAML file of the model's options (see `basketgnn config --model NAME`).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Run folder: best.pt, train_log.jsonl, resume.pt.")] = Path(
        "runs/dnntsp"
    ),
    split_kind: SplitOpt = "auto",
    epochs: Annotated[int | None, typer.Option(help="Override the config's epochs.")] = None,
    seed: Annotated[int | None, typer.Option(help="Override the config's seed.")] = None,
    device: Annotated[str | None, typer.Option(help="torch device, e.g. cpu or cuda.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (at a terminal).")] = True,
    warm_start: Annotated[
        Path | None,
        typer.Option(
            help="Start from an earlier run's best.pt of the same model and architecture "
            "(nightly runs): weights loaded, item rows mapped by item id, new items freshly "
            "initialised, items gone dropped; kept unless an epoch validates better."
        ),
    ] = None,
    sample_customers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Train and validate on a seeded sample of this many customers (drawn by id); "
            "predict / recommend still score every customer.",
        ),
    ] = None,
    sample_seed: Annotated[int, typer.Option(help="Seed of --sample-customers.")] = 0,
) -> None:
    """Train a neural model; keeps the epoch with the best mean validation NDCG as OUT/best.pt.

    An interrupted run resumes from OUT/resume.pt when started again with the same settings.

    Example: `basketgnn train --model dnntsp --data TaFeng.json --out runs/tafeng --epochs 60`

    Nightly, from yesterday's model on a sample of customers:
    `basketgnn train --data today/ --out runs/today --warm-start runs/yesterday/best.pt
    --sample-customers 50000`

    On several processes or machines (DistributedDataParallel; rank 0 writes and prints):
    `torchrun --standalone --nproc-per-node 2 -m basketgnn train --data TaFeng.json --out runs/tafeng`
    """
    from basketgnn import workflow
    from basketgnn.data.split import make_split, save_split
    from basketgnn.engine.distributed import env_rank
    from basketgnn.engine.trainer import describe_left_out
    from basketgnn.workflow.harness import evaluate_model

    rank = env_rank()  # under torchrun: every rank trains, rank 0 alone prints and writes
    console.quiet = rank != 0
    registry.check_name(model, "--model: ", "neural")
    settings = workflow.load_config(config, model=model, epochs=epochs, seed=seed, device=device)
    dataset = _load(data)
    sp = make_split(dataset, split_kind, settings.model.seed)
    if sample_customers is not None:
        from basketgnn.data.sample import sample_split

        sp, sampled = sample_split(sp, dataset, sample_customers, sample_seed)
        console.print(sampled.describe(), highlight=False)
    t0 = time.perf_counter()
    console.print(
        f"training {model} on {data} ({sp.name}: {len(sp['train']):,} train / "
        f"{len(sp['validate']):,} validate users) -> {out}"
    )
    # The exact split travels with the checkpoint, so evaluation never sees training users.
    stamp = workflow.data_stamp(data, (out / "split.json").resolve())
    outcome = workflow.train(
        workflow.ModelEntry(model, settings, out_dir=out, warm_start=warm_start, stamp=stamp),
        dataset, sp, progress=progress, on_epoch=_epoch_printer(t0),
    )
    if rank != 0:
        return
    result = outcome.training
    save_split(sp, dataset, out / "split.json")
    if result.warm_start is not None:
        console.print(result.warm_start.describe(), highlight=False)
    if outcome.fusion is not None:
        console.print(outcome.fusion["description"], highlight=False)
    if result.left_out_baskets:
        console.print(describe_left_out(result.left_out_baskets), highlight=False)
    metrics, _ = evaluate_model(outcome.recommender, dataset, sp["validate"])
    k = _first_k(metrics)
    console.print(
        f"best epoch {result.best_epoch} of {result.epochs_run} "
        f"({result.seconds:.0f}s); validation recall@{k} {metrics[f'recall@{k}']:.4f} "
        f"ndcg@{k} {metrics[f'ndcg@{k}']:.4f}; checkpoint {out / 'best.pt'}"
    )


def _epoch_printer(t0: float, indent: str = "") -> Any:
    """One line per epoch (with the time since ``t0``): the whole record where no bar is drawn."""

    def show(r: dict[str, Any]) -> None:
        k = _first_k(r, "val_")
        console.print(
            f"{indent}epoch {r['epoch']:3d}  loss {r['train_loss']:.4f}  "
            f"val recall@{k} {r[f'val_recall@{k}']:.4f}  ndcg@{k} {r[f'val_ndcg@{k}']:.4f}  "
            f"mean ndcg {r['val_mean_ndcg']:.4f}  {r['train_s']:.1f}s  "
            f"[{time.perf_counter() - t0:.0f}s]" + ("  [green]best[/]" if r["best"] else ""),
            highlight=False,
        )

    return show


def _first_k(metrics: dict[str, Any], prefix: str = "") -> int:
    """The smallest cut-off present (10, or less for a tiny catalogue)."""
    return min(int(k.split("@")[1]) for k in metrics if k.startswith(f"{prefix}recall@"))


@app.command()
def predict(
    checkpoint: Annotated[Path, typer.Option(help="A trained model's checkpoint (best.pt).")],
    user: Annotated[
        str | None, typer.Option(help="A customer id of --data; predicts from their full history.")
    ] = None,
    history: Annotated[
        str | None,
        typer.Option(help='Baskets of original item ids as JSON, oldest first: \'[["a","b"],["c"]]\'.'),
    ] = None,
    data: Annotated[
        Path | None, typer.Option(help="Dataset holding --user (default: the checkpoint's data).")
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="How many items to predict.")] = 10,
    device: Annotated[str | None, typer.Option(help="torch device.")] = None,
) -> None:
    """Print the predicted next basket (original item ids, with scores).

    Examples: `basketgnn predict --checkpoint runs/demo/dnntsp/best.pt --user C000042` and
    `basketgnn predict --checkpoint best.pt --history '[["I0001","I0007"],["I0001"]]' --k 5`
    """
    import json

    import numpy as np

    from basketgnn.data.dataset import from_sequences
    from basketgnn.data.split import Instances
    from basketgnn.workflow.harness import rank_items

    if (user is None) == (history is None):
        raise UserError("Give exactly one of --user ID or --history JSON.")
    if user is not None:
        rec, dataset, _ = _checkpoint_and_data(checkpoint, data, device)
        index = dataset.user_index()
        if user not in index:
            hint = ""
            if dataset.meta.get("user_ids_prefixed_with_part"):  # see read_dnntsp_json
                hint = (f" This DNNTSP file repeats user keys across its parts, so its ids are "
                        f"'<part>:<key>', e.g. {str(dataset.user_ids[0])!r}.")  # fmt: skip
            raise UserError(f"Customer {user!r} is not in the data; check the id.{hint}")
        u = index[user]
        n_hist = int(dataset.n_baskets_per_user[u])
    else:
        from basketgnn.workflow import load_trained

        rec = load_trained(checkpoint, device)
        try:
            baskets = json.loads(history or "")
            ok = isinstance(baskets, list) and all(isinstance(b, list) for b in baskets)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise UserError('--history must be a JSON list of baskets, e.g. \'[["a","b"],["c"]]\'.')
        lookup = {str(i): n for n, i in enumerate(rec.item_ids.tolist())}
        unknown = sorted({str(i) for b in baskets for i in b if str(i) not in lookup})
        if unknown:
            err_console.print(
                f"[yellow]warning:[/] {len(unknown)} unknown item id(s) ignored: "
                + ", ".join(unknown[:10])
            )
        seq = [[lookup[str(i)] for i in b if str(i) in lookup] for b in baskets]
        dataset = from_sequences([seq], n_items=len(rec.item_ids))
        # The typed-in history belongs to no known customer: its id (with a NUL, which no
        # CSV or Parquet id holds) must not match any customer of the checkpoint's pool.
        dataset = type(dataset)(
            **{**dataset.__dict__, "item_ids": rec.item_ids, "user_ids": np.array([TYPED_HISTORY_ID])}
        )
        u, n_hist = 0, int(dataset.n_baskets_per_user[0])
    items, scores = rank_items(
        rec, dataset, Instances(np.array([u]), np.array([n_hist])), k
    )
    from rich.table import Table

    table = Table(title=f"next basket ({n_hist} past baskets)")
    table.add_column("rank", justify="right")
    table.add_column("item_id")
    table.add_column("score", justify="right")
    for r, (i, s) in enumerate(zip(items[0], scores[0]), start=1):
        table.add_row(str(r), str(dataset.item_ids[i]), f"{s:.4f}")
    console.print(table)


@app.command()
def recommend(
    checkpoint: Annotated[Path, typer.Option(help="A trained model's checkpoint (best.pt).")],
    out: Annotated[
        Path,
        typer.Option(
            help="A .parquet or .csv file, or any other name: a folder for a partitioned Parquet "
            "dataset (part-XXXXX.parquet files + _manifest.json)."
        ),
    ],
    data: Annotated[
        Path | None, typer.Option(help="Customers to recommend for (default: the checkpoint's data).")
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="Items per customer (at most the catalogue).")] = 20,
    device: Annotated[str | None, typer.Option(help="torch device.")] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="i/n: write only shard i of n (counted from 0) of the partitioned dataset in the "
            "--out folder; run all n (any machines, any order) for the whole set. Under torchrun "
            "the default is RANK/WORLD_SIZE."
        ),
    ] = None,
    chunk: Annotated[
        int, typer.Option(min=1, help="Customers per part: scored, held and written together.")
    ] = 100_000,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="CPU threads for scoring (default: the model's `threads`, else torch's). 2 or "
            "more: the TIFU-KNN search runs on two worker threads beside the model; 1: one "
            "after the other. The rows are the same either way.",
        ),
    ] = None,
) -> None:
    """Top-k for every customer from their full history: rows (customer_id, item_id, rank, score).

    Rows are streamed a chunk of customers at a time, never all in memory. Into a folder they
    form a partitioned Parquet dataset; part p holds customers [p·chunk, (p+1)·chunk) of the
    prepared data, and shard i of n writes a contiguous run of parts. A killed run leaves only
    complete parts; the same command again skips them and writes the rest. `_manifest.json` is
    written last, when every shard is done.

    Examples:
    `basketgnn recommend --checkpoint runs/demo/dnntsp/best.pt --out recs.parquet --k 20`;
    `basketgnn recommend --checkpoint best.pt --out recs/ --shard 2/8` (one job of eight);
    `torchrun --nproc-per-node 2 -m basketgnn recommend --checkpoint best.pt --out recs/`.
    """
    import os

    from basketgnn.workflow.recommendations import (
        Shard,
        write_recommendation_file,
        write_recommendation_parts,
    )

    one_file = out.name.endswith((".parquet", ".csv"))
    where = Shard.parse(shard) if shard is not None else Shard.from_env(os.environ)
    if one_file and out.is_dir():
        raise UserError(f"{out} is a folder; name a new .parquet/.csv file, or drop the extension for a dataset folder.")
    if one_file and where is not None and where.count > 1:
        raise UserError(
            f"--out {out}: shard {where} writes part of a partitioned dataset, which needs a folder; "
            f"give --out a folder name without .parquet/.csv, e.g. --out {out.with_suffix('')}."
        )
    if not one_file and out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is an existing file; a partitioned dataset needs a folder.")
    t0 = time.perf_counter()
    rec, dataset, data_path = _checkpoint_and_data(checkpoint, data, device)
    rec.with_threads(threads)
    if one_file:
        rows = write_recommendation_file(rec, dataset, k, out, chunk)
        console.print(
            f"wrote {out}: {rows:,} rows for {dataset.n_users:,} customers ({time.perf_counter() - t0:.1f}s)"
        )
        return
    from basketgnn.io_utils import file_sha256

    source = {"checkpoint": str(checkpoint), "checkpoint_sha256": file_sha256(checkpoint), "data": str(data_path)}
    done = write_recommendation_parts(
        rec, dataset, k, out, shard=where or Shard(), chunk=chunk, source=source
    )
    names = f"{done.parts[0].file}..{done.parts[-1].file}" if done.parts else "no parts"
    console.print(
        f"wrote {out}: shard {done.shard}, {names} ({done.written} written, {done.skipped} already "
        f"complete), {done.rows:,} rows for {done.customers:,} customers ({time.perf_counter() - t0:.1f}s)"
    )
    if done.manifest is not None:
        console.print(f"complete: {done.manifest}")
    else:
        console.print("waiting for other shards: the manifest is written when all are done")


@app.command()
def pipeline(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML (see pipelines/example.yaml).")],
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Run a whole nightly job from one YAML: ingest -> prepare -> split -> train the named models
    (DNNTSP by default) and the baselines -> evaluate -> top-k for every customer -> report.

    Every stage is cached under the run folder by a hash of its inputs and settings: an
    unchanged rerun takes seconds, and a killed run resumes (mid-training too).

    Example: `basketgnn pipeline pipelines/example.yaml`
    """
    from basketgnn.pipeline.run import run_pipeline

    summary = run_pipeline(config, progress=progress)
    console.print(
        f"done in {summary['seconds']:.0f}s: ran {', '.join(summary['ran']) or 'nothing'}; "
        f"cached {', '.join(summary['cached']) or 'nothing'}; report {summary['outputs']['report']}"
    )


@app.command()
def ablate(
    spec: Annotated[Path, typer.Argument(help="Ablation YAML (see pipelines/ablation.yaml).")],
    datasets: Annotated[
        list[str] | None, typer.Option("--dataset", help="Only this dataset (repeatable).")
    ] = None,
    table_only: Annotated[
        bool, typer.Option(help="Only rebuild table.md and chart.png from results.jsonl.")
    ] = False,
) -> None:
    """Run a grid of model variants (DNNTSP by default) x datasets x seeds plus baselines;
    finished runs are skipped.

    Every run appends one JSON line to OUT/results.jsonl; OUT/table.md (mean ± std, best in
    bold) and OUT/chart.png are made from those lines.

    Example: `basketgnn ablate pipelines/ablation.yaml --dataset DC`
    """
    from basketgnn.experiments.ablation import ablate as run_ablation
    from basketgnn.experiments.ablation import describe_event

    outputs = run_ablation(
        spec, only_datasets=datasets, table_only=table_only,
        progress=lambda e: console.print(describe_event(e), highlight=False),
    )
    console.print(f"wrote {outputs.table} and {outputs.chart}")


@app.command("config")
def show_config(
    model: Annotated[
        str, typer.Option(help=f"Model: {registry.help_text('neural')}.")
    ] = registry.DEFAULT_MODEL,
) -> None:
    """Print every option of a model with its default, as a YAML file to edit for
    `train --config`.

    Example: `basketgnn config --model dnntsp > my.yaml`
    """
    from basketgnn.workflow.config import config_reference

    registry.check_name(model, "--model: ", "neural")
    print(config_reference(model), end="")


DEFAULT_LOG = Path(__file__).resolve().parent.parent / "data" / "demo_transactions.csv"


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder for every output.")] = Path(
        "runs/demo"
    ),
    log: Annotated[Path, typer.Option(help="Transaction log to run on.")] = DEFAULT_LOG,
    model: Annotated[
        str, typer.Option(help=f"Neural model to train: {registry.help_text('neural')}.")
    ] = registry.DEFAULT_MODEL,
    config: Annotated[
        Path | None,
        typer.Option(help="The model's options (YAML); default for dnntsp: data/demo_config.yaml."),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars (at a terminal).")] = True,
) -> None:
    """The main job on the embedded default data: prepare the log, evaluate the baselines,
    train a neural model (DNNTSP), compare all on the same test customers, and write top-20
    recommendations.

    Writes OUT/data/ (prepared dataset), OUT/MODEL/ (best.pt, train_log.jsonl),
    OUT/metrics.json (one record per model) and OUT/recommendations.{parquet,csv}.

    Example: `basketgnn demo --out runs/demo`
    """
    from basketgnn import workflow
    from basketgnn.io_utils import publish_files, write_json
    from basketgnn.workflow.recommendations import write_recommendations

    registry.check_name(model, "--model: ", "neural")
    t_start = time.perf_counter()

    def say(message: str) -> None:
        console.print(f"[{time.perf_counter() - t_start:5.0f}s] {message}", highlight=False)

    data = workflow.prepare(log)
    data.save(out / "data")
    say(
        f"[bold]1. prepare[/] {log} -> {out / 'data'}: {data.n_users:,} customers, "
        f"{data.n_items:,} items, {data.n_baskets:,} baskets"
    )
    sp = workflow.split(data, "temporal")
    say(
        f"[bold]2. split[/] {sp.name}: each customer's last basket is the test target, the one "
        f"before it the validation target"
    )
    baselines = registry.names("baseline")
    if config is None and model == registry.DEFAULT_MODEL:
        config = DEFAULT_LOG.parent / "demo_config.yaml"
    cfg = workflow.load_config(config, model=model)
    entries = [workflow.ModelEntry(name) for name in baselines]
    entries.append(workflow.ModelEntry(model, cfg, out_dir=out / model,
                                       stamp=workflow.data_stamp(out / "data", "temporal")))

    def on_model(result: Any) -> None:
        if result.model in baselines:
            say(f"[bold]3. baseline[/] {result.model} fitted and evaluated")
            if result.model == baselines[-1]:
                say(f"[bold]4. train {model}[/] -> {out / model}")
        else:
            say(f"   best epoch {result.best_epoch} of {result.epochs_run} ({result.timing_s['fit']:.0f}s)")

    experiment = workflow.Experiment(
        data, sp, entries, data_label=str(out / "data"), progress=progress,
        on_epoch=lambda entry, r: _epoch_printer(t_start, "   ")(r), on_model=on_model,
    )
    results = experiment.run()
    trained = experiment.fitted[model]
    if trained.fusion is not None:
        say(f"   {trained.fusion['description']}")
    records = [r.to_json() for r in results]
    print_results(records)

    recs = workflow.recommend(trained.recommender, data, 20)
    # The three results are published as one set: a crash never mixes old and new files.
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        write_json(Path(tmp) / "metrics.json", records)
        write_recommendations(recs, Path(tmp) / "recommendations.parquet")
        write_recommendations(recs, Path(tmp) / "recommendations.csv")
        publish_files(
            out, [Path(tmp) / n for n in ("metrics.json", "recommendations.parquet", "recommendations.csv")]
        )
    say(
        f"[bold]5. recommend[/] top-20 for all {data.n_users:,} customers -> "
        f"{out / 'recommendations.parquet'} (and .csv)"
    )
    console.print(f"   e.g. {workflow.first_customer_line(recs)}", highlight=False)
    console.print(
        f"done in {time.perf_counter() - t_start:.0f}s; metrics in {out / 'metrics.json'}. Next: "
        f"`basketgnn predict --checkpoint {out / model / 'best.pt'} --user "
        f"{recs['customer_id'].iloc[0]}`"
    )


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


def main() -> None:
    """Console-script entry point: user errors become one clean message and exit status 2."""
    try:
        app()
    except UserError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
