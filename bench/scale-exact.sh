#!/bin/sh
# Quality at scale against exact MaxSim (issue 17.4), from the checkout's root after
# bench/scale-build.sh and bench/scale-ivf.sh: `cellar-bench exact` scores $QUERIES of the
# generator's judged queries against every one of the 2M documents (one pass over the store),
# and compares the served dense, rerank and hybrid rankings with that exact ranking and with the
# qrels. Writes bench/results/scale-exact.{md,json}.
set -eu
W=${WORK:-/work/cellar-scale}
cargo build --release -q -p cellar-bench
./target/release/cellar-bench exact --index "$W/index" --data "$W/data" \
  --query-vectors "$W/data/query-vectors" --max-queries "${QUERIES:-50}" --out bench/results/scale-exact "$@"
