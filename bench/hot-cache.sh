#!/bin/sh
# Issue 13.6: does a hot-record cache win inside a memory cap? SciFact (the default codec),
# client query vectors (no encoding for the reads to hide under), hybrid, rerank_k 64, alpha
# 0.4, direct reader on the emulated 80 us SSD, every direct server under the same cap (CAP% of
# the index, default 20% = 27 MiB, page cache counted: the fixed footprint of such a server
# measured 13-19 MiB from one start to the next, so `cap=footprint+X` gave each configuration
# another cap), without a cache and with `--cache-mib` 2 and 4 taken out of that cap; the ram
# reader uncapped as the control. Two query streams with the same Poisson schedules: Zipf
# popularity (exponent ZIPF, default 1.0: a few queries come back often) and the plain seeded
# cycle over all 300 test queries (each query once per round: the cache's worst case).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/hot-cache.sh
# (about 12 minutes; writes bench/results/hot-cache-{zipf,uniform}.{md,json,png}).
set -eu
. bench/scifact-load.env
Q="--queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --rerank-k 64 --alpha 0.4 --duration 10 --warmup 2 --baseline ram"
[ -f $I/index.json ] || $C index $D --out $I
DIRECT="index=$I,reader=direct,cap=${CAP:-20},ssd_latency_us=80,vectors=client"
for stream in ${STREAMS:-zipf uniform}; do
  Z=""
  [ $stream = zipf ] && Z="--zipf ${ZIPF:-1.0}"
  $B $Q $Z --qps ${LEVELS:-20,40,80,160} --out $R/hot-cache-$stream \
    --config name=ram,index=$I,reader=ram,vectors=client \
    --config name=direct,$DIRECT \
    --config name=direct-cache2,$DIRECT,cache_mib=2 \
    --config name=direct-cache4,$DIRECT,cache_mib=4
done
