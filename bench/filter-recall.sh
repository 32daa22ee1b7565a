#!/bin/sh
# Filtered search (issue 15.2), from the checkout's root after
# `cargo build --release -p cellar-bench`: recall@10 against exact filtered MaxSim at 50%, 10%,
# 1% and 0.1% selectivity on SciFact, the filter in the first stage against the default exact
# switch and a post-filter. Builds a residual2 index with metadata from the float32 vectors of
# SciFact ($VECTORS, encoded here when absent: ~6 minutes). Writes bench/results/filter-recall.{md,json}.
set -eu
B=${CELLAR_BENCH:-./target/release/cellar-bench}
D=${DATA:-../shared/data}/scifact
W=${WORK:-/tmp/cellar-filter}
VECTORS=${VECTORS:-$W/scifact-f32}
mkdir -p "$W"
[ -d "$VECTORS" ] || "$B" embeddings encode --data "$D" --out "$VECTORS" > /dev/null
"$B" filter --vectors "$VECTORS" --data "$D" --work "$W" --out bench/results/filter-recall "$@"
