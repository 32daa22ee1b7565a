#!/bin/sh
# The ESPN prefetcher where the probe takes milliseconds (issue 17.3), from the checkout's root
# after bench/scale-build.sh and bench/scale-ivf.sh: `cellar-bench ivf prefetch` on the 2M
# synthetic index with its generator's query vectors, the direct reader (O_DIRECT) on the
# emulated SSD ($LATENCY_US per read, 32 in flight), dense mode (IVF -> MaxSim): hit rate,
# bytes prefetched and wasted, wait after the probe, and search time per prefetch step, against
# the same searches without prefetching. Writes bench/results/scale-prefetch.{md,json}.
set -eu
W=${WORK:-/work/cellar-scale}
LATENCY_US=${LATENCY_US:-80}
cargo build --release -q -p cellar-bench
./target/release/cellar-bench ivf prefetch --index "$W/index" --data "$W/data" \
  --query-vectors "$W/data/query-vectors" --reader direct --inject-latency-us "$LATENCY_US" \
  --max-queries "${QUERIES:-300}" --nprobe "${NPROBE:-16,64,128}" --out bench/results/scale-prefetch "$@"
cat bench/results/scale-prefetch.md
