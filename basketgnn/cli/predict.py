"""Commands that use a trained checkpoint: ``predict`` one customer's next basket, ``recommend``
top-k rows for every customer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from basketgnn.cli.common import CheckpointOpt, DeviceOpt, checkpoint_and_data, console, err_console
from basketgnn.errors import UserError


def predict(
    checkpoint: CheckpointOpt,
    user: Annotated[
        str | None, typer.Option(help="A customer id of --data; predicts from their full history.")
    ] = None,
    history: Annotated[
        str | None,
        typer.Option(
            help='Baskets of original item ids as JSON, oldest first: \'[["a","b"],["c"]]\'. '
            "With --user: the baskets bought since the data was prepared, after the stored ones."
        ),
    ] = None,
    data: Annotated[
        Path | None, typer.Option(help="Dataset holding --user (default: the checkpoint's data).")
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="How many items to predict.")] = 10,
    exclude: Annotated[
        list[str] | None, typer.Option(help="An item id never to predict (repeat the option for more).")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Also print why each item is there (its score's parts and evidence).")
    ] = False,
    device: DeviceOpt = None,
) -> None:
    """Print the predicted next basket (original item ids, with scores).

    Examples: `basketgnn predict --checkpoint runs/demo/dnntsp/best.pt --user C000042 --explain`
    and `basketgnn predict --checkpoint best.pt --history '[["I0001","I0007"],["I0001"]]' --k 5`
    """
    from rich.table import Table

    from basketgnn.workflow.serving import NextBaskets, Query

    if user is None and history is None:
        raise UserError("Give --user ID, --history JSON, or both (a customer's stored history plus new baskets).")
    baskets = parse_history(history) if history is not None else None
    service = NextBaskets.load(checkpoint, data, device, use_data=user is not None)
    answer = service.answer([Query(user, baskets, k, tuple(exclude or ()))], reasons=explain)[0]
    for w in answer.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    table = Table(title=f"next basket ({answer.n_history} past baskets)")
    table.add_column("rank", justify="right")
    table.add_column("item_id")
    table.add_column("score", justify="right")
    if explain:
        table.add_column("why")
    for item in answer.items:
        why = ["\n".join(r["text"] for r in item["reasons"])] if explain else []
        table.add_row(str(item["rank"]), item["item_id"], f"{item['score']:.4f}", *why)
    console.print(table)


def parse_history(text: str) -> list[list[str]]:
    """``--history`` JSON as baskets of item ids (str), or a user error that shows the form."""
    import json

    try:
        baskets = json.loads(text)
        ok = isinstance(baskets, list) and all(isinstance(b, list) for b in baskets)
    except json.JSONDecodeError:
        ok = False
    if not ok or not all(isinstance(i, str | int) and not isinstance(i, bool) for b in baskets for i in b):
        raise UserError('--history must be a JSON list of baskets of item ids, e.g. \'[["a","b"],["c"]]\'.')
    return [[str(i) for i in b] for b in baskets]


def recommend(
    checkpoint: CheckpointOpt,
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
    device: DeviceOpt = None,
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
            help="CPU threads for scoring (default: the model's `threads`, else torch's; with "
            "--ray: 1 per actor, each reserving that many CPUs). 2 or more: the TIFU-KNN search "
            "runs on two worker threads beside the model; 1: one after the other. The rows are "
            "the same either way.",
        ),
    ] = None,
    reasons: Annotated[
        bool,
        typer.Option(
            "--reasons",
            help="Add a column `reasons`: each row's reasons (its score's parts and evidence) as "
            "JSON text, as `predict --explain` shows them. Slower.",
        ),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            metavar="[ADDRESS]",
            help="Score on Ray into the --out folder: a new local cluster, or the cluster at "
            "ADDRESS (auto: the one `ray start` made on this machine; HOST:6379; "
            "ray://HOST:10001). Actors load the checkpoint once and write one part at a time; a "
            "part whose actor died is retried. Checkpoint, data and --out must be on storage "
            "every node sees. Needs `pip install 'basketgnn[ray]'`.",
        ),
    ] = None,
    ray_actors: Annotated[
        int | None,
        typer.Option(min=1, help="With --ray: how many actors (default: the cluster's CPUs / --threads)."),
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
    `torchrun --nproc-per-node 2 -m basketgnn recommend --checkpoint best.pt --out recs/`;
    `basketgnn recommend --checkpoint best.pt --out /shared/recs --ray auto` (a Ray cluster).
    """
    import os

    from basketgnn.io_utils import file_sha256
    from basketgnn.workflow.recommendations import (
        Shard,
        write_recommendation_file,
        write_recommendation_parts,
    )

    one_file = out.name.endswith((".parquet", ".csv"))
    where = Shard.parse(shard) if shard is not None else Shard.from_env(os.environ)
    _refuse_bad_out(out, one_file, where)
    if ray is not None or ray_actors is not None:
        _refuse_bad_ray(out, one_file, where, ray)
        _recommend_on_ray(checkpoint, out, data, k, device, chunk, threads or 1, reasons, ray, ray_actors)
        return
    t0 = time.perf_counter()
    rec, dataset, data_path = checkpoint_and_data(checkpoint, data, device)
    rec.with_threads(threads)
    if one_file:
        rows = write_recommendation_file(rec, dataset, k, out, chunk, reasons=reasons)
        return console.print(f"wrote {out}: {rows:,} rows for {dataset.n_users:,} customers ({time.perf_counter() - t0:.1f}s)")
    source = {"checkpoint": str(checkpoint), "checkpoint_sha256": file_sha256(checkpoint), "data": str(data_path)}
    done = write_recommendation_parts(
        rec, dataset, k, out, shard=where or Shard(), chunk=chunk, source=source, reasons=reasons
    )
    _say_parts_written(done, out, t0)


def _say_parts_written(done: Any, out: Path, t0: float) -> None:
    """What a shard of the partitioned dataset wrote, and whether the dataset is complete."""
    names = f"{done.parts[0].file}..{done.parts[-1].file}" if done.parts else "no parts"
    console.print(
        f"wrote {out}: shard {done.shard}, {names} ({done.written} written, {done.skipped} already "
        f"complete), {done.rows:,} rows for {done.customers:,} customers ({time.perf_counter() - t0:.1f}s)"
    )
    if done.manifest is not None:
        console.print(f"complete: {done.manifest}")
    else:
        console.print("waiting for other shards: the manifest is written when all are done")


def _recommend_on_ray(
    checkpoint: Path, out: Path, data: Path | None, k: int, device: str | None, chunk: int,
    threads: int, reasons: bool, address: str, actors: int | None,
) -> None:  # fmt: skip
    """``recommend --ray``: the partitioned dataset written by Ray actors
    (:mod:`basketgnn.workflow.ray_scoring`)."""
    from basketgnn.io_utils import file_sha256
    from basketgnn.workflow.ray_scoring import (
        CheckpointLoader,
        ray_cluster,
        require_ray,
        write_recommendation_parts_on_ray,
    )
    from basketgnn.workflow.recommendations import plan_parts

    require_ray()
    t0 = time.perf_counter()
    # The driver needs the data (the part list, the run key), not the fusion: the actors score.
    _, dataset, data_path = checkpoint_and_data(checkpoint, data, device, model_only=True)
    source = {"checkpoint": str(checkpoint), "checkpoint_sha256": file_sha256(checkpoint), "data": str(data_path)}
    plan = plan_parts(dataset, k, out, chunk=chunk, source=source, reasons=reasons)
    load = CheckpointLoader(str(checkpoint.resolve()), str(data_path.resolve()), device, threads)

    def started(parts: int, n_actors: int) -> None:
        if parts:
            console.print(f"scoring {parts} part(s) of {out} on {n_actors} Ray actor(s), {threads} CPU(s) each")
        else:
            console.print(f"every part of {out} is already complete")

    with ray_cluster(address):
        done = write_recommendation_parts_on_ray(load, plan, actors=actors, cpus_per_actor=threads, on_start=started)
    console.print(
        f"wrote {out}: {len(done.parts)} parts ({done.written} written, {done.skipped} already "
        f"complete), {done.rows:,} rows for {done.customers:,} customers ({time.perf_counter() - t0:.1f}s)"
    )
    console.print(f"complete: {done.manifest}")


def fill_ray_address(args: list[str]) -> list[str]:
    """``--ray`` with no address after it (last, or before another option) as ``--ray local``
    (start a local cluster): the parser's options always take a value."""
    if "--ray" not in args:
        return args
    from basketgnn.workflow.ray_scoring import LOCAL

    filled = []
    for i, arg in enumerate(args):
        filled.append(arg)
        if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            filled.append(LOCAL)
    return filled


def _refuse_bad_ray(out: Path, one_file: bool, where: Any, ray: str | None) -> None:
    """A user error where ``--ray`` cannot do what is asked: actors without --ray, one file, or
    one shard."""
    if ray is None:
        raise UserError("--ray-actors is the number of Ray actors of --ray; add --ray [ADDRESS].")
    if one_file:
        raise UserError(
            f"--out {out}: --ray writes a partitioned dataset, which needs a folder; give --out a "
            f"folder name without .parquet/.csv, e.g. --out {out.with_suffix('')}."
        )
    if where is not None:
        raise UserError(
            f"--ray scores every part itself, not shard {where}: drop --shard (under torchrun, "
            "unset WORLD_SIZE)."
        )


def _refuse_bad_out(out: Path, one_file: bool, where: Any) -> None:
    """A user error where ``--out`` cannot hold what is asked: a file name that is a folder, a
    shard into one file, or a folder name that is a file."""
    if one_file and out.is_dir():
        raise UserError(f"{out} is a folder; name a new .parquet/.csv file, or drop the extension for a dataset folder.")
    if one_file and where is not None and where.count > 1:
        raise UserError(
            f"--out {out}: shard {where} writes part of a partitioned dataset, which needs a folder; "
            f"give --out a folder name without .parquet/.csv, e.g. --out {out.with_suffix('')}."
        )
    if not one_file and out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is an existing file; a partitioned dataset needs a folder.")
