"""``evaluate``: the metrics of a model fitted here or of a trained checkpoint, as a table and
optionally a JSON record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from basketgnn import registry
from basketgnn.cli.common import (
    SplitOpt,
    checkpoint_and_data,
    console,
    epoch_printer,
    load_data,
    print_results,
)
from basketgnn.errors import UserError


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
            "--fused/--model-only", "--addon",
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
        recommender, dataset, data = checkpoint_and_data(checkpoint, data, device, model_only=not fused)
        if split_kind == "auto":
            split_kind = recommender.checkpoint.get("split_spec", "auto")
        label = None if fused else f"{recommender.name} (model only)"
        entry = workflow.ModelEntry(recommender.name, label=label)
    else:
        entry, dataset = _entry_and_data(model, data, config, device, fused)
    sp = workflow.split(dataset, split_kind, seed)
    _ = sp[split]  # an unknown part stops here, before any fitting
    load_s = time.perf_counter() - t0
    if checkpoint is not None:  # trained already
        outcome = workflow.FitOutcome(entry, recommender, 0.0)
    else:  # fitted on the training part here, like every model
        outcome = workflow.train(entry, dataset, sp, progress=True, on_epoch=epoch_printer(t0))
    result = workflow.evaluate(outcome, dataset, sp, split, str(data))
    record = result.to_json()
    record["timing_s"] = {"load": round(load_s, 3), **record["timing_s"]}
    print_results([record])
    if output is not None:
        write_json(output, record)
        console.print(f"wrote {output}")


def _entry_and_data(
    model: str | None, data: Path | None, config: Path | None, device: str | None, fused: bool
) -> tuple[Any, Any]:
    """The workflow entry of ``--model`` (with its settings when it is neural) and the data."""
    from basketgnn import workflow

    if not fused:
        raise UserError("--model-only applies to a --checkpoint; train with `fusion: off` instead.")
    assert model is not None
    registry.check_name(model, "--model: ")
    if data is None:
        raise UserError("--data is required with --model.")
    options = workflow.load_config(config, model=model, device=device) if registry.is_neural(model) else None
    return workflow.ModelEntry(model, options), load_data(data)
