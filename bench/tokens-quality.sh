#!/bin/sh
# Issue 44's quality table: the token stage against exact MaxSim over every document, from the
# checkout's root. `cellar-bench exact` scores $QUERIES judged queries given as vectors against
# every document of $INDEX (cached in $CACHE after the first run), then ranks them with the
# served modes and with each variant below (token stage at several nprobe / depths, the pooled
# IVF kept as an option). Writes $OUT.{md,json}.
#   INDEX=... DATA=... QV=... QUERIES=50 OUT=bench/results/tokens-quality-200k sh bench/tokens-quality.sh
# The index needs `cellar tokens build` (and `cellar ivf build` for the pooled rows).
set -eu
: "${INDEX:?}" "${DATA:?}" "${QV:?}" "${OUT:?}"
QUERIES=${QUERIES:-50}
CACHE=${CACHE:-$INDEX.exact-$QUERIES.json}
B=${CELLAR_BENCH:-./target/release/cellar-bench}
$B exact --index "$INDEX" --data "$DATA" --query-vectors "$QV" --max-queries "$QUERIES" \
  --modes dense,rerank,hybrid --exact-cache "$CACHE" --out "$OUT" \
  --variant 'dense, pooled IVF={"mode":"dense","dense_stage":"pooled"}' \
  --variant 'hybrid, pooled IVF={"mode":"hybrid","dense_stage":"pooled"}' \
  --variant 'dense tokens nprobe 16={"mode":"dense","nprobe":16}' \
  --variant 'dense tokens nprobe 64={"mode":"dense","nprobe":64}' \
  --variant 'dense tokens nprobe 64, 500 re-ranked={"mode":"dense","nprobe":64,"candidates":500,"rerank_k":500}' \
  --variant 'dense tokens nprobe 128, 1000 re-ranked={"mode":"dense","nprobe":128,"candidates":1000,"rerank_k":1000}'
