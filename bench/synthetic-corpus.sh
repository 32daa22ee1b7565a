#!/bin/sh
# The synthetic retrieval collection checked on a small instance (issue 17.1), from the
# checkout's root: `cellar-bench corpus` writes $DOCS documents (defaults of the generator
# otherwise: 128 dims, 50k content words in synonym groups, 200 topics), `cellar index
# --vectors` indexes them (f16, with its IVF), and `cellar eval --query-vectors` ranks the
# generator's queries with their own vectors. Writes bench/results/synthetic-corpus-check.{md,json}:
# the eval table and the ordering of the systems it shows.
set -eu
cargo build --release -q -p cellar-bench -p cellar-cli
B=./target/release/cellar-bench
C=./target/release/cellar
DOCS=${DOCS:-100000}
QUERIES=${QUERIES:-1000}
W=${WORK:-/tmp/cellar-synthetic-check}
OUT=bench/results/synthetic-corpus-check
rm -rf "$W"
mkdir -p "$W"
"$B" corpus --docs "$DOCS" --queries "$QUERIES" --out "$W/data" "$@" > "$W/corpus.log"
"$C" index --vectors "$W/data" --out "$W/index" > "$W/index.log"
"$C" eval --index "$W/index" --data "$W/data" --query-vectors "$W/data/query-vectors" --json "$OUT.json" > "$W/eval.md"
{
  echo "# The synthetic retrieval collection on a small instance (issue 17.1)"
  echo
  echo "Command: \`DOCS=$DOCS QUERIES=$QUERIES sh bench/synthetic-corpus.sh${*:+ $*}\`."
  echo
  echo "Machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1) ($(nproc) cores), commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo
  echo '```'
  cat "$W/corpus.log" "$W/index.log"
  echo '```'
  echo
  cat "$W/eval.md"
} > "$OUT.md"
cat "$OUT.md"
