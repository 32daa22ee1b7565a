#!/bin/sh
# A living index under writes (issue 15.1), from the checkout's root after
# `cargo build --release -p cellar-cli -p cellar-bench`: ingest from vectors and from text, time
# to visibility, search latency idle / beside sustained ingest / beside a merge, disk and RAM per
# written document, on a copy of a SciFact residual2 index. Writes bench/results/live-ingest.{md,json}.
# Needs a residual2 SciFact index ($INDEX, built here when absent: ~8 minutes) and the float32
# vectors of SciFact from the same model ($VECTORS, encoded here when absent: ~6 minutes).
set -eu
C=${CELLAR:-./target/release/cellar}
B=${CELLAR_BENCH:-./target/release/cellar-bench}
D=${DATA:-../shared/data}/scifact
W=${WORK:-/tmp/cellar-live}
INDEX=${INDEX:-$W/scifact-residual2}
VECTORS=${VECTORS:-$W/scifact-f32}
mkdir -p "$W"
[ -f "$INDEX/index.json" ] || "$C" index "$D" --out "$INDEX" --codec residual2
[ -d "$VECTORS" ] || "$B" embeddings encode --data "$D" --out "$VECTORS" > /dev/null
"$B" live --index "$INDEX" --data "$D" --vectors "$VECTORS" --work "$W/work" --out bench/results/live-ingest "$@"
