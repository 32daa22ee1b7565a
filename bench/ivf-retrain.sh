#!/bin/sh
# IVF drift and retrain (issue 15.1), from the checkout's root after
# `cargo build --release -p cellar-bench`: two copies of a SciFact residual2 index with its IVF
# (the one bench/filter-recall.sh builds, $INDEX) written 1000 documents of SciFact again and 1000
# of Cranfield, from their float32 vectors ($SAME, $OTHER: encoded here when absent, ~6 and ~3
# minutes); the drift of each, and recall at the default nprobe before and after a retrain.
# Writes bench/results/ivf-retrain.{md,json}.
set -eu
B=${CELLAR_BENCH:-./target/release/cellar-bench}
DATA=${DATA:-../shared/data}
W=${WORK:-/tmp/cellar-filter}
INDEX=${INDEX:-$W/index-residual2}
SAME=${SAME:-$W/scifact-f32}
OTHER=${OTHER:-$W/cranfield-f32}
[ -f "$INDEX/index.json" ] || sh bench/filter-recall.sh
[ -d "$SAME" ] || "$B" embeddings encode --data "$DATA/scifact" --out "$SAME" > /dev/null
[ -d "$OTHER" ] || "$B" embeddings encode --data "$DATA/cranfield" --out "$OTHER" > /dev/null
"$B" retrain --index "$INDEX" --data "$DATA/scifact" --same "$SAME" --other "$OTHER" --work "$W/retrain" --out bench/results/ivf-retrain "$@"
