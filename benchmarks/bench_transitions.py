"""Item transitions in the fusion (scoring.transitions), from trained checkpoints: nothing retrains,
since the fusion acts after training.

Two modes, both on runs of `basketgnn train` (or bench_zoo_cli.py: a folder with best.pt and
split.json):

    # The exploration grid (issue 11): an item-item score added to the checkpoint's shipped
    # ranking with a weight v, for several kinds of item graph; validation and test for each
    # point (test is logged, not used to choose).
    .venv/bin/python benchmarks/bench_transitions.py --explore --stage {1,2,3} RUN [RUN ...]

    # The product's choice: choose_fusion on the validation users without and with the
    # transition term (as `basketgnn train` does with `transitions: false` / `true`), then the
    # test users once for each choice, @10-@40, and a check that the candidate path of
    # `recommend` ranks exactly as the dense fusion.
    .venv/bin/python benchmarks/bench_transitions.py RUN [RUN ...] [--out FILE.jsonl] [--save-dir DIR]

    # The fusion choice's time on the validation users, without and with the term.
    .venv/bin/python benchmarks/bench_transitions.py --time-choice RUN [RUN ...]

Explore kinds: "cooc" (items bought in the same basket: C = Σ_b x_bᵀ x_b, diagonal 0) and
"trans" (the basket after: N = Σ x_tᵀ x_{t+1}); S = D^-a M D^-(1-a), d = 1 + basket counts of
the training customers' visible baskets; the customer's query is Σ_t decay^(T-t) x_t; the score
h S is scaled to max 1 per customer and, with "new items only", 0 on the customer's own items.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from common import load_run

from basketgnn.metrics import ranking_metrics, top_k
from basketgnn.recommenders.fused import FusedRecommender, FusionOptions
from basketgnn.scoring.fusion_choice import choose_fusion
from basketgnn.scoring.transitions import _basket_matrix, _keep_row_top

KS = (10, 20, 30, 40)


def metrics(data, instances, scores_or_ranked, ranked=False):
    tk = scores_or_ranked if ranked else top_k(scores_or_ranked, max(KS))
    tg = data.targets(instances.users, instances.n_history)
    hi = data.histories(instances.users, instances.n_history).items_per_instance()
    return ranking_metrics(tk, tg.values, tg.offsets, data.n_items, hi.values, hi.offsets, KS)


def criterion(m):
    return float(np.mean([m[f"{x}@{k}"] for x in ("recall", "ndcg", "phr") for k in (10, 20)]))


#: The exploration's three stages: (kind, a, decay, new items only, row cap, weights v).
STAGES: dict[int, list[tuple]] = {
    1: [(k, a, 0.9, False, None, (0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0)) for k in ("cooc", "trans") for a in (0.5, 1.0)],
    2: [("trans", a, dec, new, None, (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15))
        for a in (0.3, 0.5, 0.7) for dec in (0.5, 0.9) for new in (False, True)],
    3: [("trans", 0.5, dec, new, cap, (0.0, 0.02, 0.05, 0.1))
        for dec, new in ((0.5, False), (0.9, True)) for cap in (None, 200, 100, 50)],
}


def explore(run: Path, stage: int) -> None:
    rec, data, split = load_run(run, model_only=False)
    n_items = data.n_items
    tr = split["train"]
    visible = data.histories(tr.users, tr.n_history + 1)
    x = _basket_matrix(visible, n_items)
    cooc = (x.T @ x).tocsr()
    cooc.setdiag(0)
    cooc.eliminate_zeros()
    off = visible.basket_offsets
    has_next = np.ones(x.shape[0], bool)
    has_next[off[1:] - 1] = False
    before = np.flatnonzero(has_next)
    trans = (x[before].T @ x[before + 1]).tocsr()
    d = np.asarray(x.sum(0)).ravel() + 1.0
    parts = {}
    for part in ("validate", "test"):
        inst = split[part]
        hist = data.histories(inst.users, inst.n_history)
        q = _basket_matrix(hist, n_items)
        nb = np.diff(hist.basket_offsets)
        owner = np.repeat(np.arange(len(nb)), nb)
        age = hist.basket_offsets[owner + 1] - 1 - np.arange(len(owner))
        own = np.zeros((len(nb), n_items), bool)
        hi = hist.items_per_instance()
        own[np.repeat(np.arange(hi.n_rows), hi.lengths), hi.values] = True
        parts[part] = dict(inst=inst, q=q, owner=owner, age=age, own=own, shipped=rec.score(data, inst).astype(np.float64))
    print(json.dumps({"run": str(run), "shipped": (rec.checkpoint.get("fusion_choice") or {}).get("description", "")}), flush=True)
    graphs = {"cooc": cooc, "trans": trans}
    for kind, a, decay, new_only, cap, weights in STAGES[stage]:
        s = (sp.diags(1.0 / d**a) @ graphs[kind] @ sp.diags(1.0 / d ** (1 - a))).tocsr()
        if cap is not None:
            s = _keep_row_top(s, cap)
        item_score = {}
        for part, p in parts.items():
            w = sp.csr_matrix((decay ** p["age"].astype(float), (p["owner"], np.arange(len(p["owner"])))), shape=(len(p["own"]), len(p["owner"])))
            t = ((w @ p["q"]) @ s).toarray()
            if new_only:
                t[p["own"]] = 0.0
            item_score[part] = t / np.maximum(t.max(1, keepdims=True), 1e-12)
        for v in weights:
            row = {"run": run.name, "stage": stage, "kind": kind, "a": a, "decay": decay, "new_items_only": new_only, "P": cap, "v": v}
            for part, p in parts.items():
                m = metrics(data, p["inst"], p["shipped"] + v * item_score[part])
                row[part] = round(criterion(m), 5)
                row[f"{part}_recall@10"] = round(m["recall@10"], 4)
                row[f"{part}_explore_recall@10"] = round(m["explore_recall@10"], 4)
            print(json.dumps(row), flush=True)


def save_with(run: Path, fusion, dst: Path) -> None:
    """``run``'s best.pt with ``fusion`` as its fusion section (and ``transitions: true``): the
    checkpoint `basketgnn train` would have written with the default, for timing
    (bench_scoring.py)."""
    import shutil

    from basketgnn.engine.checkpoint import add_extras, read_state, set_section
    from basketgnn.recommenders.fused import SECTION
    from basketgnn.scoring.fusion_choice import fusion_choice

    options = read_state(run / "best.pt")["extras"].get("fusion_options") or {}
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / "best.pt", dst)
    add_extras(dst, fusion_options={**FusionOptions(**options).model_dump(), "transitions": True})
    set_section(dst, SECTION, {"choice": fusion_choice(fusion), "state": fusion.state() if fusion.weight > 0 else None})


def rechoose(run: Path, save_dir: Path | None = None) -> dict:
    rec, data, split = load_run(run)
    pool_cap = FusionOptions(**(rec.checkpoint.get("fusion_options") or {})).neighbour_pool_cap
    val_scores = rec.score(data, split["validate"])
    test = split["test"]
    test_scores = rec.score(data, test)
    out: dict = {"run": str(run)}
    tifu = None
    for transitions in (False, True):
        t0 = time.perf_counter()
        f = choose_fusion(val_scores, data, split["train"], split["validate"], chunk=2048,
                          pool_cap=pool_cap, tifu=tifu, transitions=transitions)
        tifu = f.tuned_tifu if tifu is None else tifu
        choose_s = time.perf_counter() - t0
        dense = metrics(data, test, f.apply(test_scores, data, test))
        ranker = FusedRecommender(rec, f) if f.weight > 0 else rec
        items, _ = ranker.rank(data, test, max(KS))  # the candidate path of `recommend`
        same = bool(np.array_equal(items, top_k(f.apply(test_scores, data, test), max(KS))))
        summary = f.summary()
        if transitions and save_dir is not None:
            save_with(run, f, save_dir / f"{run.name}.pt")
        out["transitions" if transitions else "plain"] = {
            "description": f.describe(), "weight": f.weight, "transition": summary["transition"],
            "transition_option": summary["transition_option"],
            "validation_criterion": next(
                g.validation_criterion for g in f.grid
                if g.weight == f.weight and (f.weight == 0 or g.alpha == f.alpha)
                and g.transition == summary["transition"] and g.transition_option == summary["transition_option"]
            ),
            "choose_s": round(choose_s, 1), "candidate_path_equal": same,
            "test": {k: round(v, 6) for k, v in dense.items()},
        }
    return out


def time_choice(run: Path) -> dict:
    """Seconds of choose_fusion on the validation users with TIFU already tuned (as after
    `train`'s tuning), without and with the transition term, twice each, one thread."""
    import torch

    torch.set_num_threads(1)
    rec, data, split = load_run(run)
    val = rec.score(data, split["validate"])
    tifu = choose_fusion(val, data, split["train"], split["validate"], chunk=2048).tuned_tifu
    out: dict = {"run": run.name}
    for transitions in (False, True, False, True):
        t0 = time.perf_counter()
        choose_fusion(val, data, split["train"], split["validate"], chunk=2048, tifu=tifu, transitions=transitions)
        out.setdefault(f"transitions={transitions}", []).append(round(time.perf_counter() - t0, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--explore", action="store_true", help="the exploration grid (prints JSON lines)")
    ap.add_argument("--time-choice", action="store_true", help="time the fusion choice without and with transitions")
    ap.add_argument("--stage", type=int, default=2, choices=sorted(STAGES), help="with --explore: which grid")
    ap.add_argument("--save-dir", type=Path, help="write each run's checkpoint with the transitions choice here (RUN.pt)")
    ap.add_argument("--out", type=Path, help="append the re-choice rows to this JSON-lines file")
    args = ap.parse_args()
    for run in args.runs:
        if args.explore:
            explore(run, args.stage)
            continue
        if args.time_choice:
            print(json.dumps(time_choice(run)), flush=True)
            continue
        row = rechoose(run, args.save_dir)
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
