"""The ``basketgnn`` command line. Only this package reads argv.

One module per command group, each command parsing its options, calling the workflow (or the
pipeline / ablation entry point) and printing:

- :mod:`~basketgnn.cli.common`: consoles, shared option types, data and checkpoint loading,
  the epoch line, the results table.
- :mod:`~basketgnn.cli.data`: ``synth``, ``prepare``.
- :mod:`~basketgnn.cli.evaluate`: ``evaluate``.
- :mod:`~basketgnn.cli.train`: ``train``, ``config``.
- :mod:`~basketgnn.cli.predict`: ``predict``, ``recommend``.
- :mod:`~basketgnn.cli.serve`: ``serve``.
- :mod:`~basketgnn.cli.jobs`: ``pipeline``, ``ablate``, ``demo``.

User errors (:class:`basketgnn.errors.UserError`) print one message and exit with status 2;
anything else is a bug and keeps its traceback. Importing this package imports neither torch
nor a model: the commands import what they use when they run.
"""

from __future__ import annotations

import sys

import typer

from basketgnn.cli import data as _data
from basketgnn.cli import evaluate as _evaluate
from basketgnn.cli import jobs as _jobs
from basketgnn.cli import predict as _predict
from basketgnn.cli import serve as _serve
from basketgnn.cli import train as _train
from basketgnn.cli.common import checkpoint_and_data, console, err_console, print_results
from basketgnn.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Graph-temporal next-basket recommendation: prepare data, evaluate, train, predict, serve.",
    rich_markup_mode="markdown",
)

# Registered in the order `basketgnn --help` lists them.
app.command()(_data.synth)
app.command()(_data.prepare)
app.command()(_evaluate.evaluate)
app.command()(_train.train)
app.command()(_predict.predict)
app.command()(_predict.recommend)
app.command()(_serve.serve)
app.command()(_jobs.pipeline)
app.command()(_jobs.ablate)
app.command("config")(_train.show_config)
app.command()(_jobs.demo)

# The checkpoint loader benchmarks reach through ``basketgnn.cli``.
_checkpoint_and_data = checkpoint_and_data

__all__ = ["app", "console", "err_console", "main", "print_results"]


def main() -> None:
    """Console-script entry point: user errors become one clean message and exit status 2."""
    sys.argv[1:] = _predict.fill_ray_address(sys.argv[1:])
    try:
        app()
    except UserError as e:
        from rich.markup import escape

        # Escaped: a message is plain text ("pip install 'basketgnn[ray]'" keeps its brackets).
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(2)
