#!/bin/sh
# The IVF studies of issue 5 (`cellar-bench ivf`), on SciFact and a synthetic collection.
# Needs: `cargo build --release -p cellar-bench -p cellar-cli`, ../shared/data beside the checkout, the SciFact f16 index in
# bench/work/scifact (`make run` builds it; this script adds its IVF), and a memory cgroup (v1 or v2) for `ram`.
# Writes bench/results/ivf-*.{json,md}; `python3 bench/ivf_plots.py` draws the plots.
set -eu
C=./target/release/cellar
B=./target/release/cellar-bench
DATA=${DATA:-../shared/data}
IDX=${IDX:-bench/work/scifact}
OUT=${OUT:-bench/results}
test -f "$IDX/index.json" || $C index "$DATA/scifact" --out "$IDX" --no-ivf
$C ivf build --index "$IDX"
# 1. recall@100 against the exact scan, over nprobe, with and without rescoring
$B ivf recall --index "$IDX" --data "$DATA/scifact" --out "$OUT/ivf-recall-scifact"
# 2. prefetcher hit rate against the prefetch step (direct reader; then an emulated 80 µs SSD)
$B ivf prefetch --index "$IDX" --data "$DATA/scifact" --reader direct --nprobe 6,12,24 \
    --out "$OUT/ivf-prefetch-scifact"
$B ivf prefetch --index "$IDX" --data "$DATA/scifact" --reader direct --inject-latency-us 80 \
    --nprobe 6,12,24 --out "$OUT/ivf-prefetch-scifact-ssd80"
# 4. quality against rerank_k, normalised to re-ranking all 1000 candidates
$B ivf rerank-k --index "$IDX" --data "$DATA/scifact" --reader ram --out "$OUT/ivf-rerank-k-scifact"
# 5. IVF latency against a RAM cap (synthetic 250k x 384), and the build under a 25% cap
$B ivf ram --out "$OUT/ivf-ram"
