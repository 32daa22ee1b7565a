#!/bin/sh
# Issue 14.4: query vectors as JSON numbers (~115 KB per SciFact query) against their compact
# base64 form (tokens_b64, f32: about half). SciFact hybrid searches with client-side query
# vectors sent open-loop to `cellar serve --reader direct` on the emulated 80 us SSD, 2 workers,
# uncapped and under a cap of the server's footprint + 10% of the index (issue 13's capped
# residual2 servers were OOM-killed under load with JSON bodies). CODEC_INDEX: a residual2
# SciFact index (e.g. the one `make run` builds).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && CODEC_INDEX=... sh bench/compact-vectors.sh
# (about 6 minutes; writes bench/results/compact-vectors.{md,json,png}).
set -eu
. bench/scifact-load.env
X=${CODEC_INDEX:?a residual2 index of SciFact}
S="index=$X,reader=direct,ssd_latency_us=80,workers=2"
$B --queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 \
  --baseline json --qps ${LEVELS:-20,40,60,80,100} --out $R/compact-vectors \
  --config name=json,$S,vectors=client \
  --config name=base64,$S,vectors=compact \
  --config name=json-capped,$S,vectors=client,cap=footprint+10 \
  --config name=base64-capped,$S,vectors=compact,cap=footprint+10
# The same two capped servers under one absolute cap (26% of the index, 35 MiB: the footprint
# measured per configuration above differs by a few MiB from run to run, so their caps did).
$B --queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 \
  --baseline json-capped --qps ${LEVELS:-20,40,60,80,100} --out $R/compact-vectors-same-cap \
  --config name=json-capped,$S,vectors=client,cap=26 \
  --config name=base64-capped,$S,vectors=compact,cap=26
