#!/bin/sh
# Latency against RAM at 2M documents, DiskBBQ-style (issue 17.4), from the checkout's root after
# bench/scale-build.sh and bench/scale-ivf.sh: the direct reader on the emulated SSD under memory
# caps of 1, 2, 5, 10 and 20% of the index (page cache counted) and the ram reader uncapped, at
# fixed offered loads ($QPS), the generator's vector queries in dense mode. Writes
# bench/results/scale-ram.{md,json,png}.
set -eu
W=${WORK:-/work/cellar-scale}
LATENCY_US=${LATENCY_US:-80}
cargo build --release -q -p cellar-bench -p cellar-cli
set -- --config "name=ram,index=$W/index,reader=ram,vectors=compact"
for cap in 20 10 5 2 1; do
  set -- "$@" --config "name=direct-cap$cap,index=$W/index,reader=direct,cap=$cap,ssd_latency_us=$LATENCY_US,vectors=compact"
done
./target/release/cellar-bench load --queries "$W/data/queries.jsonl" --qrels "$W/data/qrels/test.tsv" \
  --query-vectors "$W/data/query-vectors" --mode dense --qps "${QPS:-50,150}" --duration "${DURATION:-10}" \
  --warmup 2 --baseline ram --out bench/results/scale-ram "$@"
