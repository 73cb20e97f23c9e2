"""The fusion's selection criterion: the mean of recall, NDCG and PHR at 10 and 20 (the default,
"mean") against the same three at 10 alone ("at10"), chosen on the validation customers of
trained runs and then read once on their test customers. Nothing retrains: the fusion acts after
training.

    .venv/bin/python benchmarks/bench_fusion_criterion.py RUN [RUN ...] [--tag TAG]
    .venv/bin/python benchmarks/bench_fusion_criterion.py --summary [--tag TAG]   # the table

RUN is a folder of `basketgnn train` (or bench_zoo_cli.py): best.pt and split.json. For each run
the model alone scores the validation and test customers once; TIFU-KNN is tuned once on
validation; then `choose_fusion` (the default rule "floor", item transitions on, the run's
neighbour pool cap: what `train` does) chooses under each criterion, and the chosen point's
validation and test metrics @10 and @20, with the repeat / explore split of recall@10 on test,
are appended as one JSON line per run to benchmarks/results/fusion_criterion.jsonl. A run with a
row already under the same tag is skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import append_new_rows, load_run, mean_std, tagged_rows, variants_table

from basketgnn.engine.checkpoint import read_state
from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders.fused import CHOICE_CHUNK, FusionOptions
from basketgnn.scoring.fusion_choice import choose_fusion

KS = (10, 20)
CRITERIA = ("mean", "at10")


def test_metrics(data, instances, scores) -> dict[str, float]:
    """recall, NDCG, PHR @10 and @20 and the repeat / explore split, rounded. Shapes: scores [n, I]."""
    tg = data.targets(instances.users, instances.n_history)
    hi = data.histories(instances.users, instances.n_history).items_per_instance()
    m = ranking_metrics(top_k(scores, max(KS)), tg.values, tg.offsets, data.n_items, hi.values, hi.offsets, KS)
    keep = [f"{n}@{k}" for k in KS for n in ("recall", "ndcg", "phr")] + ["repeat_recall@10", "explore_recall@10"]
    return {name: round(float(m[name]), 6) for name in keep}


def chosen_point(fusion) -> dict:
    """The chosen grid point's λ, α, ν and validation metrics (from the fusion's records)."""
    s = fusion.summary()
    point = next(
        g for g in fusion.grid
        if g.weight == fusion.weight and (fusion.weight == 0 or g.alpha == fusion.alpha)
        and g.transition == s["transition"] and g.transition_option == s["transition_option"]
    )  # fmt: skip
    return {"weight": point.weight, "alpha": point.alpha if point.weight > 0 else None,
            "transition": point.transition, "transition_option": point.transition_option,
            "validation": {k: round(v, 6) for k, v in (point.metrics or {}).items()},
            "selection": fusion.selection}


def one(run: Path) -> dict:
    rec, data, split = load_run(run)
    options = FusionOptions(**(rec.checkpoint.get("fusion_options") or {}))
    val, test = split["validate"], split["test"]
    val_scores, test_scores = rec.validation_scores(data, val), rec.score(data, test)
    state = read_state(run / "best.pt")
    shipped = (((state.get("sections") or {}).get("fusion") or {}).get("choice") or {}).get("description")
    row: dict = {"run": str(run), "data": rec.checkpoint["data"], "n_validate": len(val), "n_test": len(test),
                 "shipped": shipped}
    tifu = None
    for criterion in CRITERIA:
        t0 = time.perf_counter()
        fusion = choose_fusion(val_scores, data, split["train"], val, chunk=CHOICE_CHUNK, tifu=tifu,
                               pool_cap=options.neighbour_pool_cap, transitions=options.transitions,
                               criterion=criterion)
        tifu = fusion.tuned_tifu if tifu is None else tifu
        row[criterion] = {**chosen_point(fusion), "description": fusion.describe(), "choose_s": round(time.perf_counter() - t0, 1),
                          "test": test_metrics(data, test, fusion.apply(test_scores, data, test))}
    return row


def summary(tag: str) -> str:
    """A Markdown table: per data set (the runs' folder names without the seed), each
    criterion's chosen points and its test metrics @10 and recall@20, mean ± std over the runs."""

    def cells(rs: list[dict], c: str) -> list[str]:
        chosen = ", ".join(f"{r[c]['weight']:g} / {r[c]['transition']:g}" for r in rs)
        return [chosen, mean_std([r[c]["validation"]["phr@10"] for r in rs])] + [
            mean_std([r[c]["test"][m] for r in rs]) for m in ("recall@10", "ndcg@10", "phr@10", "recall@20")]

    header = ["runs", "criterion", "λ / ν chosen", "val PHR@10", "test R@10", "N@10", "PHR@10", "R@20"]
    return variants_table(tagged_rows("fusion_criterion", tag), list(CRITERIA), header, cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--tag", default="criterion")
    ap.add_argument("--summary", action="store_true", help="print the table of the tag's rows and exit")
    args = ap.parse_args()
    if args.summary:
        print(summary(args.tag))
        return
    append_new_rows("fusion_criterion", args.runs, args.tag, one, list(CRITERIA))


if __name__ == "__main__":
    sys.exit(main())
