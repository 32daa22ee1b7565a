#!/bin/sh
# Issue 13's benchmark, with caps that mean something for a server that holds a model (13.8):
# SciFact text queries sent to `cellar serve`, which encodes them (what users do), the ram
# reader uncapped (the control) against the direct reader under caps of the server's fixed
# footprint (measured first: the charge of an uncapped server after its start and 16
# warm-up queries; its peak over them is reported beside it) + 10% and + 5% of the index (memory cgroup, page cache counted), on the emulated
# 80 us SSD; then the same with client-side query vectors. INDEX (default: the index `make run` builds) and CODEC_INDEX
# (a second index, e.g. a residual one, run under the same caps when given).
# Re-run: cargo build --release -p cellar-bench -p cellar-cli && sh bench/footprint-caps.sh
# (about 15 minutes; writes bench/results/footprint-caps-{text,client}.{md,json,png}; VECTORS=client
# runs only the client half, TEXT_LEVELS and CLIENT_LEVELS the offered QPS of each half).
# MODEL_WEIGHTS=f16 gives every text server `--model-weights f16` (ram and direct alike) and
# writes footprint-caps-text-f16*; SUFFIX is appended to the output names (e.g. -saturation).
set -eu
. bench/scifact-load.env
Q="--queries $D/queries.jsonl --qrels $D/qrels/test.tsv --mode hybrid --duration 10 --warmup 2 --baseline ram"
[ -f $I/index.json ] || $C index $D --out $I
for vectors in ${VECTORS:-server client}; do
  EXTRA=""
  if [ -n "${CODEC_INDEX:-}" ]; then
    EXTRA="--config name=direct-codec-footprint+5,index=$CODEC_INDEX,reader=direct,cap=footprint+5,ssd_latency_us=80,vectors=$vectors"
  fi
  name=text; LEVELS=${TEXT_LEVELS:-4,8,12,16,20}; W=""
  if [ -n "${MODEL_WEIGHTS:-}" ]; then name=text-$MODEL_WEIGHTS; W=",model_weights=$MODEL_WEIGHTS"; fi
  [ $vectors = client ] && name=client && W="" && LEVELS=${CLIENT_LEVELS:-20,40,80,160,240}
  $B $Q --qps $LEVELS --out $R/footprint-caps-$name${SUFFIX:-} \
    --config name=ram,index=$I,reader=ram,vectors=$vectors$W \
    --config name=direct-footprint+10,index=$I,reader=direct,cap=footprint+10,ssd_latency_us=80,vectors=$vectors$W \
    --config name=direct-footprint+5,index=$I,reader=direct,cap=footprint+5,ssd_latency_us=80,vectors=$vectors$W \
    $EXTRA
done
