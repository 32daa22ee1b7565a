#!/bin/sh
# `cellar tune --p95-ms`: the choice of rerank_k (hybrid) and of the token stage's nprobe (dense)
# on SciFact's train split, without a latency bound and under two bounds, with --dry-run (the
# index is not changed). Needs an index with a token stage (`cellar index` then
# `cellar tokens build`). Writes bench/results/tune-p95.md.
set -eu
CELLAR=${CELLAR:-./target/release/cellar}
INDEX=${INDEX:-bench/work/scifact}
DATA=${DATA:-../shared/data/scifact}
BOUNDS=${BOUNDS:-"40 25"}
OUT=${OUT:-bench/results/tune-p95.md}
test -f "$INDEX/tokens/tokens.json" || { echo "tune-p95: $INDEX has no token stage: cellar tokens build --index $INDEX" >&2; exit 2; }
{
  echo "# cellar tune --p95-ms on SciFact train"
  echo
  echo "Command: \`sh bench/tune-p95.sh\` (INDEX=$INDEX, BOUNDS=\"$BOUNDS\") at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)."
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; nothing else running."
  echo "Each setting runs every judged train query once, one at a time; its P95 counts the query's encoding and search (not its text fetch)."
  for bound in none $BOUNDS; do
    echo
    if [ "$bound" = none ]; then
      echo "## No bound: the cheapest setting within epsilon 0.002 of the best"
      echo
      "$CELLAR" tune --index "$INDEX" --data "$DATA" --split train --dry-run 2>&1
    else
      echo "## --p95-ms $bound"
      echo
      "$CELLAR" tune --index "$INDEX" --data "$DATA" --split train --dry-run --p95-ms "$bound" 2>&1 || echo "(exit $?)"
    fi
  done
} > "$OUT"
echo "wrote $OUT"
