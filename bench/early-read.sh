#!/bin/sh
# Issue 13.1: text queries sent to `cellar serve` (the server encodes them, as users do) on the
# SciFact index of `make run`, hybrid mode; BM25's candidates read while the query is encoded
# (early_read=true, the default) against read after it (early_read=false), side by side in one
# run: the ram reader uncapped (the control) and the direct reader on the emulated 80 us SSD
# (every read call waits 80 us whatever the page cache holds; a cap of 10% of this index would
# be below the server's model alone, issue 13.8). The report's stage table gives,
# per level, the server's mean read time and the part of it hidden under the encoding.
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/early-read.sh
# (about 10 minutes; writes bench/results/early-read.{md,json,png}). The rerank-mode pair:
# bench/results/early-read-rerank.md, whose first lines give its command.
set -eu
. bench/scifact-load.env
[ -f $I/index.json ] || $C index $D --out $I
$B --queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 \
  --qps ${LEVELS:-5,10,20,40} --baseline ram --out $R/early-read \
  --config name=ram,index=$I,reader=ram \
  --config name=direct-ssd80-early,index=$I,reader=direct,ssd_latency_us=80,early_read=true \
  --config name=direct-ssd80-late,index=$I,reader=direct,ssd_latency_us=80,early_read=false \
  --config name=mmap-late,index=$I,reader=mmap,early_read=false \
  --config name=mmap-early,index=$I,reader=mmap,early_read=true
