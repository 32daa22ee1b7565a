#!/bin/sh
# Issue 5, end to end: P95 against offered QPS of the dense mode (IVF → MaxSim of the best 64)
# with and without the prefetcher (starting after half of the probe), on the direct reader under memory caps of 10% and 5% of the
# SciFact f16 index, with the emulated 80 µs SSD off and on; the ram reader uncapped as the
# control. Query vectors are encoded by the bench (vectors=client).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/ivf-load.sh   (about 15
# minutes; needs the index and IVF of bench/ivf-studies.sh; writes bench/results/ivf-load.{json,md,png})
set -eu
C=${CELLAR:-./target/release/cellar}
B=${CELLAR_BENCH:-./target/release/cellar-bench}
D=${DATA:-../shared/data}/scifact
R=${RESULTS:-bench/results}
I=${IDX:-bench/work/scifact}
test -f $I/ivf/ivf.json || $C ivf build --index $I
Q="--queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode dense --rerank-k 64 --duration 10 --warmup 2"
CONFIGS="--config name=ram-uncapped,index=$I,reader=ram,vectors=client,prefetch=false"
for cap in 10 5; do
  for ssd in 0 80; do
    for pf in false true; do
      LAT=""; SUFFIX=""
      [ $ssd = 0 ] || { LAT=",ssd_latency_us=$ssd"; SUFFIX="-ssd${ssd}us"; }
      STEP=""; [ $pf = true ] && STEP=",prefetch_step=0.5"
      CONFIGS="$CONFIGS --config name=direct-cap$cap$SUFFIX-prefetch-$pf,index=$I,reader=direct,cap=$cap,vectors=client,prefetch=$pf$STEP$LAT"
    done
  done
done
$B load --cellar $C $Q --qps 10,20,40,60,80,120 --out $R/ivf-load $CONFIGS
