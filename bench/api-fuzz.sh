#!/bin/sh
# The long API fuzzing run (issue 16.2), from the checkout's root after
# `cargo build --release -p cellar-cli` and `make setup` (schemathesis): schemathesis over the
# server's own OpenAPI document with $EXAMPLES examples per operation and phase, in rounds of new
# seeds until the server has answered $REQUESTS requests (default 100,000; a round of 500
# examples is ~16k test cases in ~6 minutes on 2 cores), against a copy of a built index ($INDEX:
# SciFact residual2, as bench/live-ingest.sh builds it). Writes bench/results/api-fuzz.{md,json}.
set -eu
C=${CELLAR:-./target/release/cellar}
INDEX=${INDEX:-/tmp/cellar-live/scifact-residual2}
[ -f "$INDEX/index.json" ] || "$C" index "${DATA:-../shared/data}/scifact" --out "$INDEX" --codec residual2
python3 bench/api_fuzz.py "$C" "$INDEX" "${WORK:-/tmp/cellar-api-fuzz}" "${EXAMPLES:-500}" "${REQUESTS:-100000}" \
    bench/results/api-fuzz
