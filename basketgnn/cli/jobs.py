"""Whole jobs: ``pipeline`` (a nightly job from one YAML), ``ablate`` (a grid of variants) and
``demo`` (the main job on the demo data shipped with the project)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from basketgnn import registry
from basketgnn.cli.common import console, epoch_printer, print_results

#: The demo's transaction log and model options, shipped inside the package (package data), so
#: an installed wheel runs `basketgnn demo` too.
DEMO_DATA = Path(__file__).resolve().parents[1] / "demo"
DEFAULT_LOG = DEMO_DATA / "transactions.csv"
#: The default model's options in the demo, tuned to the demo log's size.
DEMO_CONFIG = DEMO_DATA / "config.yaml"


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
        typer.Option(
            help=f"The model's options (YAML); default for {registry.DEFAULT_MODEL}: "
            f"{DEMO_CONFIG.parent.name}/{DEMO_CONFIG.name}."
        ),
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
        config = DEMO_CONFIG
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
        on_epoch=lambda entry, r: epoch_printer(t_start, "   ")(r), on_model=on_model,
    )
    results = experiment.run()
    trained = experiment.fitted[model]
    for choice in filter(None, (trained.fusion, trained.rerank)):  # what validation chose
        say(f"   {choice['description']}")
    records = [r.to_json() for r in results]
    print_results(records)
    recs = workflow.recommend(trained.recommender, data, 20)
    _publish(out, records, recs)
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


def _publish(out: Path, records: list[dict[str, Any]], recs: Any) -> None:
    """OUT/metrics.json and OUT/recommendations.{parquet,csv}, published as one set: a crash
    never mixes old and new files."""
    from basketgnn.io_utils import publish_files, write_json
    from basketgnn.workflow.recommendations import write_recommendations

    names = ("metrics.json", "recommendations.parquet", "recommendations.csv")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        write_json(Path(tmp) / "metrics.json", records)
        write_recommendations(recs, Path(tmp) / "recommendations.parquet")
        write_recommendations(recs, Path(tmp) / "recommendations.csv")
        publish_files(out, [Path(tmp) / n for n in names])
