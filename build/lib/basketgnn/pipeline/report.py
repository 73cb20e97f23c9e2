"""The pipeline's report: one self-contained HTML page, with its PNG charts next to it.

Made only from the pipeline's ``metrics.json`` summary and the trained model's ``train_log.jsonl``:

- on top, one line on the data and split, what where / returns / caps left out, skipped bad
  rows if any, for a nightly run what was sampled and reused (``nightly``: the training
  sample, N of M customers and its seed; each warm start's checkpoint, its date, and the items
  kept, new and dropped; the neighbour pool cap), and a table of every model's recall / NDCG / PHR at K = 10 and 20 on the test
  customers (best value of a column in bold);
- ``report_training.png``: training loss and validation NDCG per epoch (a trained model only);
- ``report_metrics_at_k.png``: recall, NDCG and PHR of every model at each K;
- ``report_repeat_explore.png``: recall@10 / @20 on the target items the customer bought before
  (repeat) and on those they never bought (explore).

Charts are drawn on matplotlib's Agg canvas through :class:`matplotlib.figure.Figure` (no pyplot,
no global backend switch). Every file is written atomically.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from basketgnn.data.ingest import report_lines
from basketgnn.io_utils import atomic_path, write_text
from basketgnn.results_table import from_records, to_html

if TYPE_CHECKING:
    from basketgnn.pipeline.cache import Stage

TRAINING_CHART = "report_training.png"
METRICS_CHART = "report_metrics_at_k.png"
REPEAT_EXPLORE_CHART = "report_repeat_explore.png"
TABLE_KS = (10, 20)
METRIC_NAMES = {"recall": "Recall", "ndcg": "NDCG", "phr": "PHR"}


def write_report(
    out_dir: str | Path, summary: dict[str, Any], train_log: list[dict[str, Any]] | None = None
) -> list[str]:
    """Write ``report.html`` and its charts into ``out_dir``; returns the chart file names.

    ``summary`` is the pipeline's metrics.json content; ``train_log`` the epoch records of the
    trained model ``summary["charted_model"]`` (a registry name).
    """
    out = Path(out_dir)
    models = summary["models"]
    charts = []
    if train_log:
        _save(training_figure(train_log, summary.get("charted_model") or "model"), out / TRAINING_CHART)
        charts.append(TRAINING_CHART)
    _save(metrics_figure(models), out / METRICS_CHART)
    charts.append(METRICS_CHART)
    _save(repeat_explore_figure(models), out / REPEAT_EXPLORE_CHART)
    charts.append(REPEAT_EXPLORE_CHART)
    write_text(out / "report.html", report_html(summary, charts))
    return charts


def metrics_summary(
    title: str,
    prepare: Stage,
    split: Stage,
    fits: dict[str, Stage],
    evaluate: Stage,
    recommend: Stage,
    records: list[dict[str, Any]],
    *,
    charted: str | None,
    pool_cap: int | None,
    part: str,
    files: Sequence[str],
) -> dict[str, Any]:
    """metrics.json of a run, from what its stages recorded (so an unchanged job writes
    identical files): the data, the split, the evaluated ``part``, every model's ``records``,
    the ``charted`` model, each trained model's training, the recommendations (in ``files``),
    each stage's seconds and, for a nightly run, what was sampled and reused."""
    summary: dict[str, Any] = {
        "title": title,
        "data": {
            k: prepare.info[k] for k in ("source", "engine", "customers", "items", "baskets", "report")
        },
        "split": {
            "name": split.info["name"],
            "kind": split.info["settings"]["kind"],
            "customers": split.info["sizes"],
        },
        "evaluated_on": {
            "part": part,
            "customers": evaluate.info.get("customers", split.info["sizes"][part]),
        },
        "models": records,
        "charted_model": charted,
        **{
            f"{name}_training": {
                k: fit.info[k]
                for k in ("best_epoch", "epochs_run", "best_validation", "train_seconds",
                          "left_out_baskets")
                if k in fit.info
            }
            for name, fit in fits.items()
        },
        "recommendations": {
            **{k: recommend.info[k] for k in ("model", "k", "customers", "rows", "selection")
               if k in recommend.info},
            "files": list(files),
        },
        "timing_s": {
            s.name: s.info["seconds"] for s in (prepare, split, *fits.values(), evaluate, recommend)
        },
    }  # fmt: skip
    nightly = nightly_summary(split.info, {n: f.info for n, f in fits.items()}, pool_cap)
    if nightly:
        summary["nightly"] = nightly
    return summary


def nightly_summary(
    split_info: dict[str, Any], fit_infos: dict[str, dict[str, Any]], pool_cap: int | None
) -> dict[str, Any]:
    """What a nightly run sampled and reused (metrics.json ``nightly``): the training sample,
    each warm start, the neighbour pool cap. Empty for a job with none of them, whose
    metrics.json then has no ``nightly`` key."""
    out: dict[str, Any] = {}
    if "sample" in split_info:
        out["sample"] = split_info["sample"]
    warm = {name: info["warm_start"] for name, info in fit_infos.items() if "warm_start" in info}
    if warm:
        out["warm_start"] = warm
    if pool_cap is not None:
        out["neighbour_pool_cap"] = pool_cap
    return out


def _save(fig: Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        # No software version in the metadata: the same numbers give the same bytes.
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})


def _ks(metrics: dict[str, Any], name: str) -> list[int]:
    return sorted(int(k.split("@")[1]) for k in metrics if k.startswith(f"{name}@"))


def _value(x: Any) -> float:
    return math.nan if x is None else float(x)


def training_figure(train_log: list[dict[str, Any]], name: str = "model") -> Figure:
    """Training loss and validation NDCG per epoch, the kept (best) epoch marked."""
    epochs = [r["epoch"] for r in train_log]
    best = max(train_log, key=lambda r: r["val_mean_ndcg"])["epoch"]
    fig = Figure(figsize=(9.5, 3.4), layout="constrained")
    loss_ax, val_ax = fig.subplots(1, 2)
    loss_ax.plot(epochs, [r["train_loss"] for r in train_log], marker="o", ms=3)
    loss_ax.set(title=f"{name} training loss", xlabel="epoch", ylabel="loss")
    val_ax.plot(
        epochs,
        [r["val_mean_ndcg"] for r in train_log],
        marker="o",
        ms=3,
        label="mean NDCG@{10,20,30,40}",
    )
    for k in (10, 20):
        if f"val_ndcg@{k}" in train_log[0]:
            val_ax.plot(epochs, [r[f"val_ndcg@{k}"] for r in train_log], lw=1, label=f"NDCG@{k}")
    val_ax.axvline(best, color="grey", ls="--", lw=1, label=f"best epoch ({best})")
    val_ax.set(title="Validation", xlabel="epoch", ylabel="NDCG")
    val_ax.legend(fontsize=8)
    for ax in (loss_ax, val_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def metrics_figure(models: list[dict[str, Any]]) -> Figure:
    """Recall, NDCG and PHR of every model at each K."""
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    axes = fig.subplots(1, len(METRIC_NAMES))
    for ax, (name, label) in zip(axes, METRIC_NAMES.items()):
        for r in models:
            ks = _ks(r["metrics"], name)
            ax.plot(
                ks, [_value(r["metrics"][f"{name}@{k}"]) for k in ks], marker="o", label=r["model"]
            )
            ax.set_xticks(ks)
        ax.set(title=f"{label}@K", xlabel="K")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return fig


def repeat_explore_figure(models: list[dict[str, Any]]) -> Figure:
    """Recall@10 / @20 restricted to repeat and to explore target items, per model."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    axes = fig.subplots(1, 2)
    names = [r["model"] for r in models]
    width = 0.8 / len(TABLE_KS)
    for ax, kind, meaning in (
        (axes[0], "repeat", "items bought before"),
        (axes[1], "explore", "items never bought before"),
    ):
        for j, k in enumerate(TABLE_KS):
            values = [_value(r["metrics"].get(f"{kind}_recall@{k}")) for r in models]
            xs = [i + (j - (len(TABLE_KS) - 1) / 2) * width for i in range(len(models))]
            bars = ax.bar(xs, values, width, label=f"recall@{k}")
            ax.bar_label(bars, labels=[_fmt(v) for v in values], fontsize=7, padding=1)
        ax.set_xticks(range(len(names)), names)
        ax.set(title=f"{kind.capitalize()}: {meaning}", ylabel="recall")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.3f}"


def _sentence(text: str) -> str:
    """A line of the run's log as a sentence of the report: capitalised, with a full stop."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def report_html(summary: dict[str, Any], charts: list[str]) -> str:
    """The report page; ``charts`` are the PNG file names next to it."""
    e = html.escape
    models = summary["models"]
    data, split = summary["data"], summary["split"]
    cols = [f"{m}@{k}" for k in TABLE_KS for m in METRIC_NAMES]
    seconds = [
        f"{r.get('timing_s', {}).get('fit', 0):.1f} / {r.get('timing_s', {}).get('score', 0):.1f}"
        for r in models
    ]
    results_table = to_html(from_records(models, cols), [("fit / score s", seconds)])

    report = data.get("report") or {}
    data_line = (
        f"{data['customers']:,} customers, {data['items']:,} items, {data['baskets']:,} baskets "
        f"from <code>{e(Path(data['source']).name)}</code>"
    )
    if "rows_read" in report:
        data_line += f" ({report['rows_read']:,} rows read)"
    sizes = ", ".join(f"{n:,} {e(p)}" for p, n in split["customers"].items())
    ev = summary["evaluated_on"]
    parts = [
        f"<p class='summary'>Data: {data_line}. Split: {e(split['name'])} ({sizes} customers). "
        f"All models are evaluated on the same {ev['customers']:,} {e(ev['part'])} customers.</p>"
    ]
    if cleaning := report_lines(report):
        items = "".join(f"<li>{e(line)}</li>" for line in cleaning)
        parts.append(f"<div class='cleaning'><b>Rows and baskets left out</b><ul>{items}</ul></div>")
    if report.get("rows_skipped"):
        reasons = "".join(f"<li>{e(s)}</li>" for s in report.get("skipped_because", []))
        parts.append(
            f"<div class='warn'><b>{report['rows_skipped']:,} bad row(s) skipped</b> "
            f"(input.on_bad_rows: skip):<ul>{reasons}</ul></div>"
        )
    if nightly := summary.get("nightly"):
        parts.append(nightly_html(nightly))
    parts.append(results_table)
    rec = summary["recommendations"]
    parts.append(
        f"<p>Top-{rec['k']} recommendations from <b>{e(rec['model'])}</b> for all "
        f"{rec['customers']:,} customers, predicted from their full history: "
        + ", ".join(f"<a href='{e(f)}'>{e(f)}</a>" for f in rec["files"])
        + ". Every figure on this page: <a href='metrics.json'>metrics.json</a>; "
        "messages of every run: <a href='pipeline.log'>pipeline.log</a>.</p>"
    )

    from basketgnn.engine.trainer import describe_left_out  # the same words as train's line

    charted = summary.get("charted_model") or "model"
    training = summary.get(f"{charted}_training")
    left_out = (training or {}).get("left_out_baskets")
    cap_line = " " + _sentence(describe_left_out(left_out)) if left_out else ""
    sections = {
        TRAINING_CHART: (
            f"{charted} training",
            ""
            if not training
            else f"Best epoch {training['best_epoch']} of {training['epochs_run']} by mean validation "
            f"NDCG (kept as the model); {training['train_seconds']:.0f}s of training."
            + cap_line,
        ),
        METRICS_CHART: ("Metrics at each K", "Test customers; higher is better."),
        REPEAT_EXPLORE_CHART: (
            "Repeat vs explore",
            "Recall on the part of each target basket the customer had bought before (repeat) "
            "and on the part they had never bought (explore), averaged over the customers who "
            "have such items.",
        ),
    }
    for chart in charts:
        title, text = sections[chart]
        parts.append(f"<h2>{e(title)}</h2><p>{e(text)}</p><img src='{e(chart)}' alt='{e(title)}'>")
    title = e(summary.get("title") or "Report")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>{_CSS}</style></head><body>\n<h1>{title}</h1>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def nightly_html(nightly: dict[str, Any]) -> str:
    """The nightly block: what was sampled and what was reused."""
    e = html.escape
    lines = []
    if sample := nightly.get("sample"):
        lines.append(
            f"Trained on a sample of <b>{sample['sampled']:,} of {sample['customers']:,} "
            f"customers</b> (seed {sample['seed']}, drawn by customer id): {sample['train']:,} "
            f"training and {sample['validate']:,} validation customers of {sample['train_before']:,} "
            f"and {sample['validate_before']:,}. Every customer is evaluated and recommended."
        )
    for name, warm in (nightly.get("warm_start") or {}).items():
        epoch = "" if warm.get("previous_epoch") is None else f", its best epoch {warm['previous_epoch']}"
        lines.append(
            f"<b>{e(name)}</b> warm-started from <code>{e(warm['checkpoint'])}</code> (written "
            f"{e(warm['trained_at'])}{epoch}): <b>{warm['items_kept']:,} items kept, "
            f"{warm['items_new']:,} new</b> (freshly initialised), <b>{warm['items_dropped']:,} "
            "dropped</b>; epoch 0 is that model, kept unless an epoch validates better."
        )
    if nightly.get("neighbour_pool_cap") is not None:
        lines.append(f"TIFU-KNN's neighbour pool capped at {nightly['neighbour_pool_cap']:,} customers.")
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f"<div class='nightly'><b>Nightly run: sampled and reused</b><ul>{items}</ul></div>"


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:1em 0}th,td{padding:.3em .8em;"
    "border-bottom:1px solid #ddd;text-align:right}tr th:first-child{text-align:left}"
    ".summary{color:#444}.warn{background:#fff4e0;border-left:4px solid #f0a020;padding:.5em 1em}"
    ".cleaning{border-left:4px solid #888;padding:.2em 1em}"
    ".nightly{border-left:4px solid #3a7bd5;padding:.2em 1em}"
    "img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}"
)
