#!/bin/sh
# Issue 18: what long texts should become, which hybrid fusion is safe without judgments, and the
# SPLADE first stage. Builds SciFact, cranfield and cisi four ways (documents cut at 256 tokens,
# the default; cut at 512; encoded whole in 256-token windows; split into 256-token passages
# scored by the best one, MaxP), adds the SPLADE stage to the
# default build, then runs `cellar-bench fusion` on each set: BM25, SPLADE, dense and rerank alone,
# every fusion method at fixed weights, 5-fold cross-validated, tuned on SciFact's train split,
# and the test optimum, with query and document truncation counts and index sizes.
# About an hour on 2 cores (almost all of it encoding). Indexes go to $WORK (default
# bench/work/long-texts); reports to bench/results/fusion-<variant>.{md,json}. VARIANTS picks
# some (default all: t256 t512 w256 p256).
set -eu
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
WORK=${WORK:-bench/work/long-texts}
cargo build --release -p cellar-cli -p cellar-bench
mkdir -p "$WORK"
for variant in ${VARIANTS:-t256 t512 w256 p256}; do
  case $variant in
    t256) flags="" ;;
    t512) flags="--doc-max-tokens 512" ;;
    w256) flags="--doc-overflow windows" ;;
    p256) flags="--doc-overflow passages" ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
  esac
  args=""
  for c in scifact cranfield cisi; do
    test -f "$WORK/$c-$variant/index.json" || ./target/release/cellar index "$DATA/$c" --out "$WORK/$c-$variant" $flags
    if [ $variant = t256 ] && [ ! -f "$WORK/$c-$variant/splade/splade.json" ]; then
      ./target/release/cellar splade build --index "$WORK/$c-$variant"
    fi
    args="$args --collection $c=$WORK/$c-$variant,$DATA/$c"
  done
  ./target/release/cellar-bench fusion $args --out "bench/results/fusion-$variant"
done
