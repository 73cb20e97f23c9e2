"""``train`` a neural model into a run folder; ``config`` prints a model's options as YAML."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from basketgnn import registry
from basketgnn.cli.common import DataOpt, SplitOpt, console, epoch_printer, first_k, load_data


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
    preset: Annotated[
        str,
        typer.Option(
            help="Starting settings under --config and --set: default (the model's defaults) or, "
            "for dnntsp, paper (the published model trained as its authors trained it).",
        ),
    ] = "default",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override one option, KEY=VALUE (repeatable), e.g. --set seed=3."),
    ] = None,
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

    The published DNNTSP as its authors trained it, seed 3:
    `basketgnn train --data TaFeng.json --preset paper --set seed=3 --out runs/paper-s3`

    Nightly, from yesterday's model on a sample of customers:
    `basketgnn train --data today/ --out runs/today --warm-start runs/yesterday/best.pt
    --sample-customers 50000`

    On several processes or machines (DistributedDataParallel; rank 0 writes and prints):
    `torchrun --standalone --nproc-per-node 2 -m basketgnn train --data TaFeng.json --out runs/tafeng`
    """
    from basketgnn import workflow
    from basketgnn.data.split import save_split
    from basketgnn.engine.distributed import env_rank

    rank = env_rank()  # under torchrun: every rank trains, rank 0 alone prints and writes
    console.quiet = rank != 0
    registry.check_name(model, "--model: ", "neural")
    from basketgnn.workflow.config import parse_sets

    overrides = {**parse_sets(set_), **{k: v for k, v in (("epochs", epochs), ("seed", seed), ("device", device)) if v is not None}}
    settings = workflow.load_config(config, model=model, preset=preset, **overrides)
    dataset = load_data(data)
    sp = workflow.split(dataset, split_kind, settings.model.seed)
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
        dataset, sp, progress=progress, on_epoch=epoch_printer(t0),
    )
    if rank != 0:
        return
    save_split(sp, dataset, out / "split.json")
    _print_trained(outcome, dataset, sp, out)


def _print_trained(outcome: Any, dataset: Any, sp: Any, out: Path) -> None:
    """What the run kept: warm start, fusion choice, baskets left out, best epoch and its
    validation metrics at the smallest cut-off."""
    from basketgnn.engine.trainer import describe_left_out
    from basketgnn.workflow.harness import evaluate_model

    result = outcome.training
    if result.warm_start is not None:
        console.print(result.warm_start.describe(), highlight=False)
    if outcome.fusion is not None:
        console.print(outcome.fusion["description"], highlight=False)
    if outcome.rerank is not None:
        console.print(outcome.rerank["description"], highlight=False)
    if result.left_out_baskets:
        console.print(describe_left_out(result.left_out_baskets), highlight=False)
    metrics, _ = evaluate_model(outcome.recommender, dataset, sp["validate"])
    k = first_k(metrics)
    console.print(
        f"best epoch {result.best_epoch} of {result.epochs_run} "
        f"({result.seconds:.0f}s); validation recall@{k} {metrics[f'recall@{k}']:.4f} "
        f"ndcg@{k} {metrics[f'ndcg@{k}']:.4f}; checkpoint {out / 'best.pt'}"
    )


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
