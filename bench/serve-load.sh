#!/bin/sh
# The load benchmark of issue 4 on SciFact: P95 against offered QPS (open-loop Poisson arrivals),
# the ram reader uncapped (the control) against mmap and direct under a memory cap of 10% of the
# index (memory cgroup, page cache counted), f16 and int8 token vectors; intra-op threads 1 vs 2; and
# mmap/direct at caps of 100, 25, 10 and 5% of the index. Builds the three indexes it needs when
# they are missing (f16 as `make run` does, int8, int8 + PCA-128: a few minutes each).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/serve-load.sh   (about 50
# minutes; writes bench/results/serve-load-*; then python3 bench/serve_summary.py
# bench/results/serve-load-*.json)
set -eu
. bench/scifact-load.env
Q="--queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --rerank-k 64 --duration 10 --warmup 2"
LEVELS=10,20,40,80,120,160,240,320
[ -f bench/work/scifact/index.json ] || $C index $D --out bench/work/scifact
[ -f bench/work/scifact-int8/index.json ] || $C index $D --out bench/work/scifact-int8 --codec int8
[ -f bench/work/scifact-pca128-int8/index.json ] ||
  $C index $D --out bench/work/scifact-pca128-int8 --codec int8 --pca-dim 128

for codec in f16 int8; do
  I=bench/work/scifact; [ $codec = int8 ] && I=bench/work/scifact-int8
  $B $Q --qps $LEVELS --out $R/serve-load-$codec \
    --config name=ram-$codec,index=$I,reader=ram,vectors=client \
    --config name=mmap-$codec-cap10,index=$I,reader=mmap,cap=10,vectors=client \
    --config name=direct-$codec-cap10,index=$I,reader=direct,cap=10,vectors=client \
    --config name=direct-$codec-cap10-ssd80us,index=$I,reader=direct,cap=10,vectors=client,ssd_latency_us=80
done

# The server encodes the queries itself: one intra-op thread per request against two.
$B $Q --qps $LEVELS --out $R/serve-load-threads \
  --config name=ram-f16-text-1thread,index=bench/work/scifact,reader=ram,threads=1 \
  --config name=ram-f16-text-2threads,index=bench/work/scifact,reader=ram,threads=2

# Memory caps of 100, 25, 10 and 5% of the index, two moderate loads each.
CAPS=""
for reader in mmap direct; do
  for cap in 100 25 10 5; do
    CAPS="$CAPS --config name=$reader-f16-cap$cap,index=bench/work/scifact,reader=$reader,cap=$cap,vectors=client"
  done
done
$B $Q --qps 20,40 --stop-at-saturation false --out $R/serve-load-caps $CAPS

# Fewer bytes per query: int8 token vectors projected to 128 dimensions (PCA fitted at index
# time; bench/work/scifact-pca128-int8, 5.6x smaller than f16), and, on the f16 index, four
# workers instead of two (the direct reader's workers block on I/O).
P=bench/work/scifact-pca128-int8
$B $Q --qps $LEVELS --out $R/serve-load-compact \
  --config name=ram-pca128-int8,index=$P,reader=ram,vectors=client \
  --config name=mmap-pca128-int8-cap10,index=$P,reader=mmap,cap=10,vectors=client \
  --config name=direct-pca128-int8-cap10,index=$P,reader=direct,cap=10,vectors=client \
  --config name=direct-pca128-int8-cap10-ssd80us,index=$P,reader=direct,cap=10,vectors=client,ssd_latency_us=80 \
  --config name=direct-f16-cap10-4workers,index=bench/work/scifact,reader=direct,cap=10,vectors=client,workers=4
