"""Data commands: ``synth`` writes a synthetic transaction log, ``prepare`` reads a log (or a
DNNTSP .json split) into a prepared dataset folder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from basketgnn.cli.common import console, err_console
from basketgnn.data.ingest.options import DEFAULT_MAX_BASKET_ITEMS, Columns, PrepareOptions
from basketgnn.errors import UserError


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
            "of the cleaned twin, for big logs); 'grocery': a clean grocery-chain log whose "
            "customers drop and take up favourites, calibrated so that TIFU-KNN leads P-TopFreq "
            "as on real grocery logs (--customers 2600 is the calibrated size)."
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
    from basketgnn.data.synth import GROCERY, REALISTIC, generate_log, realistic_export, write_log

    if preset not in ("", "realistic", "realistic-clean", "grocery"):
        raise UserError(
            f"synth: unknown --preset {preset!r}; use 'realistic', 'realistic-clean', 'grocery' or leave it out."
        )
    if clean_out is not None and preset != "realistic":
        raise UserError("synth: --clean-out needs --preset realistic (only it has a cleaned twin).")
    folder = out.suffix.lower() not in (".csv", ".parquet")
    if folder and preset == "realistic":
        raise UserError(
            f"synth: --out {out} is a folder, which only plain, realistic-clean and grocery logs can be "
            "written as; give a .csv or .parquet file for --preset realistic."
        )
    if preset in ("realistic-clean", "grocery"):
        chosen = REALISTIC if preset == "realistic-clean" else GROCERY
        settings: dict[str, Any] = {k: v for k, v in chosen.items() if k != "n_customers"}
    else:
        settings = {"n_items": items, "mean_baskets": mean_baskets}
    t0 = time.perf_counter()
    try:
        if folder:
            _write_parts(out, customers, chunk_customers, seed, settings, t0)
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


def _write_parts(
    out: Path, customers: int, chunk_customers: int, seed: int, settings: dict[str, Any], t0: float
) -> None:
    """A log too big for memory: Parquet parts of ``chunk_customers`` customers in folder ``out``,
    one line per part written and a summary (parts already complete are not counted in rows)."""
    from basketgnn.data.synth import write_log_parts

    rows = 0

    def on_part(index: int, count: int, n_rows: int) -> None:
        nonlocal rows
        rows += n_rows
        console.print(f"  part {index + 1}/{count}: {n_rows:,} rows")

    parts = write_log_parts(out, customers, chunk_customers, seed, on_part=on_part, **settings)
    console.print(
        f"wrote {out}/: {len(parts)} Parquet part(s), {customers:,} customers"
        + (f", {rows:,} rows written now" if rows else "")
        + f" ({time.perf_counter() - t0:.1f}s)"
    )


# prepare's options that act on a transaction log; a DNNTSP .json split has no columns to name
# and is imported as published, so they have no meaning there.
LOG_ONLY_OPTIONS = (
    "customer_col", "item_col", "basket_col", "time_col", "min_item_baskets", "min_baskets",
    "max_baskets", "last_n", "on_bad_rows", "quantity_col", "keep_returns", "where",
    "max_basket_items", "time_format",
)  # fmt: skip

# prepare's options, one alias each: flag names from the parameter names, help texts, defaults
# and checks from the one declaration of the ingestion options (data/ingest/options.py).
def _column_help(name: str) -> str:
    return Columns.model_fields[name].description + " ('' for none)"


def _option_help(name: str) -> str:
    return PrepareOptions.model_fields[name].description


LogArg = Annotated[
    Path, typer.Argument(help="Transaction log: CSV/Parquet file or folder, or DNNTSP .json.")
]
PreparedOut = Annotated[Path, typer.Option("--out", help="Folder to write the prepared dataset to.")]
CustomerCol = Annotated[str, typer.Option(help=Columns.model_fields["customer"].description)]
ItemCol = Annotated[str, typer.Option(help=Columns.model_fields["item"].description)]
BasketCol = Annotated[str, typer.Option(help=_column_help("basket"))]
TimeCol = Annotated[str, typer.Option(help=_column_help("timestamp"))]
QuantityCol = Annotated[str, typer.Option(help=_column_help("quantity"))]
MinItemBaskets = Annotated[int, typer.Option(help=_option_help("min_item_baskets"))]
MinBaskets = Annotated[int, typer.Option(help=_option_help("min_baskets"))]
MaxBaskets = Annotated[int | None, typer.Option(help=_option_help("max_baskets"))]
LastN = Annotated[int | None, typer.Option(help=_option_help("last_n"))]
OnBadRows = Annotated[str, typer.Option(help=_option_help("on_bad_rows"))]
KeepReturns = Annotated[bool, typer.Option("--keep-returns", help=_option_help("keep_returns"))]
Where = Annotated[
    str | None,
    typer.Option(help=_option_help("where") + " E.g. \"StockCode NOT IN ('POST', 'M')\"; in a CSV every column is text."),
]
MaxBasketItems = Annotated[int | None, typer.Option(help=_option_help("max_basket_items") + " 0: no cap.")]
TimeFormat = Annotated[
    str | None, typer.Option(help=_option_help("time_format") + " E.g. '%m/%d/%Y %H:%M' for 12/1/2010 8:26.")
]
SplitOut = Annotated[
    Path | None, typer.Option(help="Also write a seeded random user split (JSON) to this file.")
]
SplitFractions = Annotated[str, typer.Option(help="train/validate/test fractions for --split-out.")]
SplitSeed = Annotated[int, typer.Option(help="Seed of the random user split.")]
Items = Annotated[
    Path | None,
    typer.Option(
        "--items",
        help="Item catalogue (CSV or Parquet, one row per item): an id column and categorical "
        "columns (department, category, brand, ...) kept with the prepared data for models "
        "that read them (DNNTSP's catalogue_columns).",
    ),
]
ItemsIdCol = Annotated[
    str | None, typer.Option(help="The catalogue's item id column (default: the log's --item-col).")
]
ItemsCols = Annotated[
    str | None, typer.Option(help="Comma-separated catalogue columns to keep (default: every column but the id).")
]
ItemsMissing = Annotated[
    str,
    typer.Option(help="Items of the log that the catalogue lacks: 'error' stops, 'unknown' gives "
                 "them the value 'unknown' in every column."),
]


def prepare(
    ctx: typer.Context,
    log: LogArg,
    out: PreparedOut,
    customer_col: CustomerCol = "customer_id",
    item_col: ItemCol = "item_id",
    basket_col: BasketCol = "basket_id",
    time_col: TimeCol = "timestamp",
    min_item_baskets: MinItemBaskets = 1,
    min_baskets: MinBaskets = 2,
    max_baskets: MaxBaskets = None,
    last_n: LastN = None,
    on_bad_rows: OnBadRows = "error",
    quantity_col: QuantityCol = "",
    keep_returns: KeepReturns = False,
    where: Where = None,
    max_basket_items: MaxBasketItems = DEFAULT_MAX_BASKET_ITEMS,
    time_format: TimeFormat = None,
    split_out: SplitOut = None,
    split_fractions: SplitFractions = "0.8/0.1/0.1",
    seed: SplitSeed = 0,
    items: Items = None,
    items_id_col: ItemsIdCol = None,
    items_cols: ItemsCols = None,
    items_missing: ItemsMissing = "error",
) -> None:
    """Read a transaction log into a prepared dataset folder.

    A DNNTSP .json split is imported as published: the column and filter options apply only to
    transaction logs and are refused with it.

    Rows go through, in this order: `--where`, returns (`--quantity-col`), bad rows
    (`--on-bad-rows`), duplicates in a basket, `--min-item-baskets`, `--max-basket-items`,
    `--last-n`, `--min-baskets` / `--max-baskets`; meta.json counts what each step dropped.

    Example: `basketgnn prepare basketgnn/demo/transactions.csv --out runs/demo/data`

    A retail export (returns as negative quantities, non-product codes, US dates):
    `basketgnn prepare export/ --out runs/shop/data --customer-col CustomerID
    --item-col StockCode --basket-col InvoiceNo --time-col InvoiceDate --quantity-col Quantity
    --time-format '%m/%d/%Y %H:%M' --where "StockCode NOT IN ('POST', 'M', 'BANK CHARGES')"
    --on-bad-rows skip`

    With an item catalogue: `basketgnn prepare log.parquet --out data --item-col product_id
    --items products.parquet --items-cols department,product_category,brand`
    """
    from pydantic import ValidationError

    from basketgnn.data.ingest import prepare_log, read_dnntsp_json
    from basketgnn.data.ingest.options import option_error

    _refuse_bad_options(ctx, log, on_bad_rows, min_baskets)
    t0 = time.perf_counter()
    if log.suffix == ".json":
        data = read_dnntsp_json(log)
    else:
        try:
            columns = Columns(customer=customer_col, item=item_col, basket=basket_col or None,
                              timestamp=time_col or None, quantity=quantity_col or None)  # fmt: skip
            options = PrepareOptions(
                min_item_baskets=min_item_baskets, last_n=last_n, min_baskets=min_baskets,
                max_baskets=max_baskets, on_bad_rows=on_bad_rows, where=where,
                keep_returns=keep_returns, max_basket_items=max_basket_items or None,
                time_format=time_format,
            )  # fmt: skip
        except ValidationError as e:
            raise option_error(e) from None
        data = prepare_log(log, columns, options)
    if items is not None:
        data = _with_catalogue(data, items, items_id_col or item_col, items_cols, items_missing)
    data.save(out)
    _print_prepared(data, out, time.perf_counter() - t0)
    if split_out is not None:
        _write_random_split(data, split_out, split_fractions, seed)


def _with_catalogue(data: Any, items: Path, id_col: str, cols: str | None, missing: str) -> Any:
    """``data`` with the catalogue ``items`` joined (see :mod:`basketgnn.data.catalogue`)."""
    from basketgnn.data.catalogue import attach_catalogue

    if missing not in ("error", "unknown"):
        raise UserError(f"--items-missing must be 'error' or 'unknown', not {missing!r}.")
    columns = [c.strip() for c in cols.split(",") if c.strip()] if cols is not None else None
    return attach_catalogue(data, items, id_col, columns, missing)  # type: ignore[arg-type]


def _given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The flags (e.g. ``--min-baskets``) among the parameters ``names`` that the user passed,
    even when set to their default value."""
    # Compared by name, so the check holds whether ParameterSource comes from click or typer._click.
    return [
        param.opts[0]
        for param in ctx.command.params
        if param.name in names
        and getattr(ctx.get_parameter_source(param.name), "name", "DEFAULT")
        not in ("DEFAULT", "DEFAULT_MAP")
    ]


def _refuse_bad_options(ctx: typer.Context, log: Path, on_bad_rows: str, min_baskets: int) -> None:
    """A user error for log options given with a .json split, and for values out of range."""
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


def _print_prepared(data: Any, out: Path, seconds: float) -> None:
    """The dataset's size, what each step dropped, and (on stderr) the bad rows skipped."""
    from basketgnn.data.catalogue import catalogue_lines
    from basketgnn.data.ingest import report_lines

    console.print(
        f"prepared {out}: {data.n_users:,} customers, {data.n_items:,} items, "
        f"{data.n_baskets:,} baskets ({seconds:.2f}s)"
    )
    report = data.meta.get("report", {})
    if dropped := report_lines(report) + catalogue_lines(data.meta):
        console.print("\n".join(f"  {line}" for line in dropped), highlight=False)
    skipped = report.get("rows_skipped")
    if skipped:
        err_console.print(f"[yellow]skipped {skipped:,} bad row(s):[/] "
                          + "; ".join(report["skipped_because"]))


def _write_random_split(data: Any, path: Path, fractions_text: str, seed: int) -> None:
    """A seeded random user split of ``data`` in the fractions ``a/b/c``, saved to ``path``."""
    from basketgnn.data.split import random_user_split, save_split

    try:
        fractions = tuple(float(f) for f in fractions_text.split("/"))
    except ValueError:
        raise UserError(
            f"--split-fractions must look like 0.8/0.1/0.1, not {fractions_text!r}."
        ) from None
    split = random_user_split(data, fractions, seed)  # type: ignore[arg-type]
    save_split(split, data, path)
    console.print(f"wrote split {split.name} to {path}")
