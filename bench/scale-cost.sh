#!/bin/sh
# Cost per million queries from the measured serving run of issue 17.4 (bench/scale-serve.sh):
# `cellar-bench cost` for each configuration (the ram reader uncapped, the direct reader under 5%
# and 2% caps) at one latency target and QPS, sized for the measured 2M documents, 100M and 1B.
# The prices are flags (illustrative public-cloud list prices by default, not a quote).
# Writes bench/results/scale-cost-<config>.{md,json} and bench/results/scale-cost.md (all three).
set -eu
LOAD=${LOAD:-bench/results/scale-serve-dense.json}
P95=${P95_MS:-50}
QPS=${QPS:-100}
PRICES="--ram-gib-month ${RAM_GIB_MONTH:-3.65} --core-month ${CORE_MONTH:-14.6} --disk-gib-month ${DISK_GIB_MONTH:-0.08}"
cargo build --release -q -p cellar-bench
: > bench/results/scale-cost.md
for config in ram direct-cap5 direct-cap2; do
  # shellcheck disable=SC2086
  ./target/release/cellar-bench cost --load "$LOAD" --config $config --p95-ms "$P95" --qps "$QPS" $PRICES \
    --docs 2000000,100000000,1000000000 --out bench/results/scale-cost-$config >> bench/results/scale-cost.md
  echo >> bench/results/scale-cost.md
done
cat bench/results/scale-cost.md
