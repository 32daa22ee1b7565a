#!/bin/sh
# Issue 13.3: no CPU worker sleeps on I/O. SciFact hybrid searches with client-side query
# vectors (no encoding to hide reads under) sent open-loop to `cellar serve --reader direct` on
# the emulated 80 us SSD under a cap of the server's footprint + 10% of the index, with 2 CPU
# workers and 0 io waiters (before: a search waiting on its reads keeps its core idle), 2 (the
# default: one per worker) and 6; for the f16 index and the residual2 one; the ram reader
# uncapped is the control. The table's "server CPU cores" is the server's CPU time per second.
# INDEX (default: the index `make run` builds) and CODEC_INDEX (a residual2 recode of it, e.g.
# `cellar-bench codecs`'s output) must exist. Then the residual2 index uncapped, 0/2/6 io
# waiters, to saturation (its footprint + 10% cap is 13 MiB over the footprint: every capped
# residual2 server was OOM-killed under load, io waiters or not).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/io-waiters.sh
# (about 16 minutes; writes bench/results/io-waiters{,-uncapped}.{md,json,png}).
set -eu
. bench/scifact-load.env
X=${CODEC_INDEX:?a residual2 index of SciFact}
S="reader=direct,cap=footprint+10,ssd_latency_us=80,vectors=client,workers=2"
$B --queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 \
  --baseline ram --qps ${LEVELS:-20,40,80,120,160} --out $R/io-waiters \
  --config name=ram,index=$I,reader=ram,vectors=client,workers=2 \
  --config name=f16-waiters0,index=$I,$S,io_waiters=0 \
  --config name=f16-waiters2,index=$I,$S,io_waiters=2 \
  --config name=f16-waiters6,index=$I,$S,io_waiters=6 \
  --config name=residual2-waiters0,index=$X,$S,io_waiters=0 \
  --config name=residual2-waiters2,index=$X,$S,io_waiters=2 \
  --config name=residual2-waiters6,index=$X,$S,io_waiters=6
$B --queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 \
  --baseline residual2-waiters0 --qps ${UNCAPPED_LEVELS:-40,80,120,160,200} --out $R/io-waiters-uncapped \
  --config name=residual2-waiters0,index=$X,reader=direct,ssd_latency_us=80,vectors=client,workers=2,io_waiters=0 \
  --config name=residual2-waiters2,index=$X,reader=direct,ssd_latency_us=80,vectors=client,workers=2,io_waiters=2 \
  --config name=residual2-waiters6,index=$X,reader=direct,ssd_latency_us=80,vectors=client,workers=2,io_waiters=6
