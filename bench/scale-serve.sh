#!/bin/sh
# Serving the 2M-document index under tight caps (issue 17.4), from the checkout's root after
# bench/scale-build.sh and bench/scale-ivf.sh: `cellar-bench load` starts `cellar serve` on it
# with the direct reader on the emulated SSD ($LATENCY_US per read) inside memory cgroups of 5%
# and 2% of the index's size on disk (page cache counted), and the ram reader uncapped as the
# in-memory control; open-loop Poisson load of the generator's text-free vector queries
# (`--query-vectors`, sent compact; mode $MODE) over $QPS, stopping at saturation: P50/P95/P99
# per offered QPS, peak RSS, bytes read per query, and nDCG@10 against the generator's qrels.
# Writes bench/results/scale-serve-$MODE.{md,json,png}.
set -eu
W=${WORK:-/work/cellar-scale}
MODE=${MODE:-dense}
LATENCY_US=${LATENCY_US:-80}
cargo build --release -q -p cellar-bench -p cellar-cli
./target/release/cellar-bench load --queries "$W/data/queries.jsonl" --qrels "$W/data/qrels/test.tsv" \
  --query-vectors "$W/data/query-vectors" --mode "$MODE" --qps "${QPS:-25,50,100,200,400}" \
  --duration "${DURATION:-10}" --warmup 2 --baseline ram --out "bench/results/scale-serve-$MODE" \
  --config "name=ram,index=$W/index,reader=ram,vectors=compact" \
  --config "name=direct-cap5,index=$W/index,reader=direct,cap=5,ssd_latency_us=$LATENCY_US,vectors=compact" \
  --config "name=direct-cap2,index=$W/index,reader=direct,cap=2,ssd_latency_us=$LATENCY_US,vectors=compact" \
  "$@"
