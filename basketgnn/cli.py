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
    try:
        df = generate_log(
            n_customers=customers, n_items=items, mean_baskets=mean_baskets, seed=seed
        )
        write_log(df, out)
    except ValueError as e:
        raise UserError(f"synth: {e}") from None
    console.print(
        f"wrote {out}: {len(df):,} rows, {df['customer_id'].nunique():,} customers, "
        f"{df['item_id'].nunique():,} items ({time.perf_counter() - t0:.1f}s)"
    )


# prepare's options that act on a transaction log; a DNNTSP .json split has no columns to name
# and is imported as published, so they have no meaning there.
LOG_ONLY_OPTIONS = (
    "customer_col", "item_col", "basket_col", "time_col", "min_item_baskets", "min_baskets",
    "max_baskets", "last_n", "on_bad_rows",
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

    Example: `basketgnn prepare data/demo_transactions.csv --out runs/demo/data`
    """
    from basketgnn.data.ingest import Columns, PrepareOptions, prepare_log, read_dnntsp_json
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
    data: Annotated[
        Path | None,
        typer.Option(
            help="Prepared dataset folder or DNNTSP .json (with --checkpoint, default: the data "
            "it was trained on)."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Baseline name: g-topfreq, p-topfreq, tifu-knn.")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="A DNNTSP checkpoint (best.pt) instead of --model.")
    ] = None,
    split: Annotated[str, typer.Option(help="Part to evaluate on: test or validate.")] = "test",
    split_kind: SplitOpt = "auto",
    seed: Annotated[int, typer.Option(help="Seed of a random split.")] = 0,
    device: Annotated[str | None, typer.Option(help="torch device for --checkpoint.")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """Metrics of a baseline (fitted on the training part) or of a trained DNNTSP checkpoint.

    Examples: `basketgnn evaluate --data TaFeng.json --model p-topfreq --output pt.json` and
    `basketgnn evaluate --checkpoint runs/tafeng/best.pt --output dnntsp.json`
    """
    from basketgnn.data.split import make_split
    from basketgnn.evaluate import fit_and_evaluate, result_record
    from basketgnn.io_utils import write_json
    from basketgnn.recommenders.registry import make_baseline

    if (model is None) == (checkpoint is None):
        raise UserError(
            "Name exactly one model: --model (g-topfreq, p-topfreq, tifu-knn) or --checkpoint FILE."
        )
    t0 = time.perf_counter()
    recommender: Any
    if checkpoint is not None:
        recommender, dataset, data = _checkpoint_and_data(checkpoint, data, device)
        if split_kind == "auto":
            split_kind = recommender.checkpoint.get("split_spec", "auto")
    else:
        assert model is not None
        recommender = make_baseline(model)
        if data is None:
            raise UserError("--data is required with --model.")
        dataset = _load(data)
    sp = make_split(dataset, split_kind, seed)
    load_s = time.perf_counter() - t0
    # A baseline is fitted on the training part here; a checkpoint is trained already.
    metrics, timing = fit_and_evaluate(recommender, dataset, sp, split, fit=checkpoint is None)
    record = result_record(
        recommender, str(data), sp, split, metrics, {"load": load_s, **timing}, len(sp[split])
    )
    print_results([record])
    if output is not None:
        write_json(output, record)
        console.print(f"wrote {output}")


def _load(path: Path) -> Any:
    from basketgnn.data.ingest import load_data

    return load_data(path)


def _checkpoint_and_data(checkpoint: Path, data: Path | None, device: str | None) -> tuple[Any, Any, Path]:
    """The checkpoint's recommender and the data aligned to its catalogue."""
    from basketgnn.recommenders.dnntsp import DNNTSPRecommender

    recommender = DNNTSPRecommender.from_checkpoint(checkpoint, device)
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
    config: Annotated[
        Path | None, typer.Option(help="YAML file of DNNTSP options (see `basketgnn config`).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Run folder: best.pt, train_log.jsonl, resume.pt.")] = Path(
        "runs/dnntsp"
    ),
    split_kind: SplitOpt = "auto",
    epochs: Annotated[int | None, typer.Option(help="Override the config's epochs.")] = None,
    seed: Annotated[int | None, typer.Option(help="Override the config's seed.")] = None,
    device: Annotated[str | None, typer.Option(help="torch device, e.g. cpu or cuda.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train DNNTSP; keeps the epoch with the best mean validation NDCG as OUT/best.pt.

    An interrupted run resumes from OUT/resume.pt when started again with the same settings.

    Example: `basketgnn train --data TaFeng.json --out runs/tafeng --epochs 60`
    """
    from basketgnn.config import load_config
    from basketgnn.data.split import make_split, save_split
    from basketgnn.evaluate import evaluate_model
    from basketgnn.recommenders.dnntsp import DNNTSPRecommender
    from basketgnn.train.checkpoint import stamp_checkpoint

    cfg = load_config(config, epochs=epochs, seed=seed, device=device)
    dataset = _load(data)
    sp = make_split(dataset, split_kind, cfg.seed)

    def show(r: dict[str, Any]) -> None:
        k = _first_k(r, "val_")
        console.print(
            f"epoch {r['epoch']:3d}  loss {r['train_loss']:.4f}  "
            f"val recall@{k} {r[f'val_recall@{k}']:.4f}  ndcg@{k} {r[f'val_ndcg@{k}']:.4f}  "
            f"mean ndcg {r['val_mean_ndcg']:.4f}  {r['train_s']:.1f}s"
            + ("  [green]best[/]" if r["best"] else ""),
            highlight=False,
        )

    rec = DNNTSPRecommender(cfg, out_dir=out, progress=progress, on_epoch=show)
    console.print(
        f"training DNNTSP on {data} ({sp.name}: {len(sp['train']):,} train / "
        f"{len(sp['validate']):,} validate users) -> {out}"
    )
    rec.fit(dataset, sp["train"], sp["validate"])
    assert rec.result is not None and rec.model is not None
    # The exact split travels with the checkpoint, so evaluation never sees training users.
    save_split(sp, dataset, out / "split.json")
    stamp_checkpoint(out / "best.pt", data, str((out / "split.json").resolve()))
    if rec.result.neighbours is not None:
        console.print(_neighbour_line(rec.result.neighbours), highlight=False)
    metrics, _ = evaluate_model(rec, dataset, sp["validate"])
    k = _first_k(metrics)
    console.print(
        f"best epoch {rec.result.best_epoch} of {rec.result.epochs_run} "
        f"({rec.result.seconds:.0f}s); validation recall@{k} {metrics[f'recall@{k}']:.4f} "
        f"ndcg@{k} {metrics[f'ndcg@{k}']:.4f}; checkpoint {out / 'best.pt'}"
    )


def _neighbour_line(choice: dict[str, Any]) -> str:
    """What validation chose for the neighbour scores (train.trainer.choose_neighbours)."""
    if choice.get("kind") == "tifu-fusion":
        return str(choice["description"])
    if choice["weight"] > 0:
        return f"neighbour scores: weight {choice['weight']} with {choice['k']} neighbours"
    return "neighbour scores: off (weight 0 ranked best on the validation customers)"


def _first_k(metrics: dict[str, Any], prefix: str = "") -> int:
    """The smallest cut-off present (10, or less for a tiny catalogue)."""
    return min(int(k.split("@")[1]) for k in metrics if k.startswith(f"{prefix}recall@"))


@app.command()
def predict(
    checkpoint: Annotated[Path, typer.Option(help="A DNNTSP checkpoint (best.pt).")],
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
    from basketgnn.evaluate import rank_items

    if (user is None) == (history is None):
        raise UserError("Give exactly one of --user ID or --history JSON.")
    if user is not None:
        rec, dataset, _ = _checkpoint_and_data(checkpoint, data, device)
        index = dataset.user_index()
        if user not in index:
            raise UserError(f"Customer {user!r} is not in the data; check the id.")
        u = index[user]
        n_hist = int(dataset.n_baskets_per_user[u])
    else:
        from basketgnn.recommenders.dnntsp import DNNTSPRecommender

        rec = DNNTSPRecommender.from_checkpoint(checkpoint, device)
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
    checkpoint: Annotated[Path, typer.Option(help="A DNNTSP checkpoint (best.pt).")],
    out: Annotated[Path, typer.Option(help="Output file: .parquet or .csv.")],
    data: Annotated[
        Path | None, typer.Option(help="Customers to recommend for (default: the checkpoint's data).")
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="Items per customer (at most the catalogue).")] = 20,
    device: Annotated[str | None, typer.Option(help="torch device.")] = None,
) -> None:
    """Top-k for every customer from their full history: rows (customer_id, item_id, rank, score).

    Example: `basketgnn recommend --checkpoint runs/demo/dnntsp/best.pt --out recs.parquet --k 20`
    """
    from basketgnn.recommend import recommend_all, write_recommendations

    if not out.name.endswith((".parquet", ".csv")):
        raise UserError(f"{out}: the output must end in .parquet or .csv.")
    t0 = time.perf_counter()
    rec, dataset, _ = _checkpoint_and_data(checkpoint, data, device)
    frame = recommend_all(rec, dataset, k)
    write_recommendations(frame, out)
    console.print(
        f"wrote {out}: {len(frame):,} rows for {dataset.n_users:,} customers "
        f"({time.perf_counter() - t0:.1f}s)"
    )


@app.command()
def pipeline(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML (see pipelines/example.yaml).")],
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Run a whole nightly job from one YAML: ingest -> prepare -> split -> train DNNTSP and the
    baselines -> evaluate -> top-k for every customer -> report.

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
    """Run a grid of DNNTSP variants x datasets x seeds plus baselines; finished runs are skipped.

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
def show_config() -> None:
    """Print every DNNTSP option with its default, as a YAML file to edit for `train --config`."""
    from basketgnn.config import config_reference

    print(config_reference(), end="")


DEFAULT_LOG = Path(__file__).resolve().parent.parent / "data" / "demo_transactions.csv"


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder for every output.")] = Path(
        "runs/demo"
    ),
    log: Annotated[Path, typer.Option(help="Transaction log to run on.")] = DEFAULT_LOG,
    config: Annotated[
        Path | None, typer.Option(help="DNNTSP options (YAML); default: data/demo_config.yaml.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """The main job on the embedded default data: prepare the log, evaluate the baselines,
    train DNNTSP, compare all on the same test customers, and write top-20 recommendations.

    Writes OUT/data/ (prepared dataset), OUT/dnntsp/ (best.pt, train_log.jsonl),
    OUT/metrics.json (one record per model) and OUT/recommendations.{parquet,csv}.

    Example: `basketgnn demo --out runs/demo`
    """
    from basketgnn.config import load_config
    from basketgnn.data.ingest import prepare_log
    from basketgnn.data.split import make_split
    from basketgnn.evaluate import fit_and_evaluate, result_record
    from basketgnn.io_utils import publish_files, write_json
    from basketgnn.recommend import recommend_all, write_recommendations
    from basketgnn.recommenders.dnntsp import DNNTSPRecommender
    from basketgnn.recommenders.registry import BASELINES, make_baseline
    from basketgnn.train.checkpoint import stamp_checkpoint

    t_start = time.perf_counter()
    data = prepare_log(log)
    data.save(out / "data")
    console.print(
        f"[bold]1. prepare[/] {log} -> {out / 'data'}: {data.n_users:,} customers, "
        f"{data.n_items:,} items, {data.n_baskets:,} baskets"
    )
    sp = make_split(data, "temporal")
    console.print(
        f"[bold]2. split[/] {sp.name}: each customer's last basket is the test target, the one "
        f"before it the validation target"
    )
    records = []
    for name in BASELINES:
        model = make_baseline(name)
        metrics, timing = fit_and_evaluate(model, data, sp)
        records.append(
            result_record(model, str(out / "data"), sp, "test", metrics, timing, len(sp["test"]))
        )
    console.print(f"[bold]3. baselines[/] {', '.join(BASELINES)} fitted and evaluated")

    cfg = load_config(config or DEFAULT_LOG.parent / "demo_config.yaml")
    console.print(f"[bold]4. train DNNTSP[/] -> {out / 'dnntsp'}")
    dnntsp = DNNTSPRecommender(cfg, out_dir=out / "dnntsp", progress=progress)
    metrics, timing = fit_and_evaluate(dnntsp, data, sp)
    assert dnntsp.result is not None
    stamp_checkpoint(out / "dnntsp" / "best.pt", out / "data", "temporal")
    console.print(
        f"   best epoch {dnntsp.result.best_epoch} of {dnntsp.result.epochs_run} "
        f"({timing['fit']:.0f}s)"
    )
    if dnntsp.result.neighbours is not None:
        console.print(f"   {_neighbour_line(dnntsp.result.neighbours)}", highlight=False)
    records.append(
        result_record(dnntsp, str(out / "data"), sp, "test", metrics, timing, len(sp["test"]))
    )
    print_results(records)

    recs = recommend_all(dnntsp, data, 20)
    # The three results are published as one set: a crash never mixes old and new files.
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        write_json(Path(tmp) / "metrics.json", records)
        write_recommendations(recs, Path(tmp) / "recommendations.parquet")
        write_recommendations(recs, Path(tmp) / "recommendations.csv")
        publish_files(
            out, [Path(tmp) / n for n in ("metrics.json", "recommendations.parquet", "recommendations.csv")]
        )
    console.print(
        f"[bold]5. recommend[/] top-20 for all {data.n_users:,} customers -> "
        f"{out / 'recommendations.parquet'} (and .csv)"
    )
    first = recs[recs["customer_id"] == recs["customer_id"].iloc[0]].head(5)
    console.print(
        f"   e.g. customer {first['customer_id'].iloc[0]}: "
        + ", ".join(f"{i} ({s:.2f})" for i, s in zip(first["item_id"], first["score"]))
    )
    console.print(
        f"done in {time.perf_counter() - t_start:.0f}s; metrics in {out / 'metrics.json'}. Next: "
        f"`basketgnn predict --checkpoint {out / 'dnntsp' / 'best.pt'} --user "
        f"{first['customer_id'].iloc[0]}`"
    )


def print_results(records: list[dict[str, Any]]) -> None:
    """A readable table: one row per metric@K, one column per model (best value in bold)."""
    from rich.table import Table

    first = records[0]
    console.print(
        f"[bold]{first['data']}[/] · split {first['split']} · part {first['part']} "
        f"({first['n_users']:,} users)",
        highlight=False,
    )
    table = Table()
    table.add_column("metric")
    for r in records:
        table.add_column(r["model"], justify="right")
    ks = sorted({int(k.split("@")[1]) for k in first["metrics"] if "@" in k})
    for k in ks:
        for m in ("recall", "ndcg", "phr"):
            key = f"{m}@{k}"
            values = [r["metrics"].get(key) for r in records]
            top = max((v for v in values if v is not None), default=None)
            cells = [
                "-" if v is None else (f"[bold]{v:.4f}[/]" if v == top and len(records) > 1 else f"{v:.4f}")
                for v in values
            ]
            table.add_row(key, *cells, end_section=(m == "phr"))
    table.add_row(
        "fit+score s",
        *[f"{r['timing_s'].get('fit', 0) + r['timing_s'].get('score', 0):.2f}" for r in records],
    )
    console.print(table)


def main() -> None:
    """Console-script entry point: user errors become one clean message and exit status 2."""
    try:
        app()
    except UserError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
