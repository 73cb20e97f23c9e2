#!/usr/bin/env bash
# A checkpoint of the realistic retail export for benchmarks/bench_serve.py:
#
#   benchmarks/serve_checkpoints.sh OUT
#
# writes OUT/export.csv and OUT/clean.csv (`synth --preset realistic`, seed 0), OUT/data (the raw
# export prepared as a user would, data/README.md: 2,829 customers, 3,600 items, 21,623 baskets)
# and OUT/realistic/best.pt (`train` with the default config; it records OUT/data as its data, so
# `serve` and the benchmark need no --data). Then:
#
#   python benchmarks/bench_serve.py --checkpoint OUT/realistic/best.pt
#
# Steps already done are skipped (OUT/realistic/trained marks a finished training; an interrupted
# one resumes from OUT/realistic/resume.pt).
# Training takes minutes of both cores: run it under flock /tmp/basketgnn-timing.lock, not beside
# timings. PYTHON picks the interpreter (default: python; e.g. PYTHON=.venv/bin/python); the
# basketgnn it runs is the one that interpreter imports (set PYTHONPATH for a checkout).
# The DC checkpoint of BENCHMARKS.md §13 was made by
#   basketgnn train --data ../shared/datasets/dnntsp/DC.json --out OUT/dc --no-progress
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT   (a folder for the export, its prepared data and OUT/realistic/best.pt)" >&2
    exit 2
fi
out=$1
py=${PYTHON:-python}
mkdir -p "$out"

if [ ! -f "$out/export.csv" ] || [ ! -f "$out/clean.csv" ]; then
    "$py" -m basketgnn synth --preset realistic --out "$out/export.csv" --clean-out "$out/clean.csv"
fi
if [ ! -f "$out/data/meta.json" ]; then
    "$py" -m basketgnn prepare "$out/export.csv" --out "$out/data" --quantity-col quantity \
        --where "item_id NOT IN ('POST', 'M', 'BANK CHARGES', 'D')" --on-bad-rows skip
fi
if [ ! -f "$out/realistic/trained" ]; then
    "$py" -m basketgnn train --data "$out/data" --out "$out/realistic" --no-progress
    touch "$out/realistic/trained"
fi
echo "checkpoint: $out/realistic/best.pt"
