#!/bin/sh
# The long parser fuzzing run (issue 16.3), from the checkout's root: every byte parser of
# Cellar (file headers, manifests, offsets, records, IVF, WAL records, stream segments, JSONL
# inputs: the `parsers` modules of cellar-core, cellar-search and cellar-stream) gets
# $EXECUTIONS structure-aware random inputs (default 1,000,000 each) mutated from real files
# Cellar's writers make, checksums recomputed on half of them. Writes
# bench/results/fuzz-parsers.{md,json}; panicking inputs go to bench/work/fuzz-crashes/, and an
# abort leaves the input it ran in /dev/shm/cellar-fuzz/run/current-<target>.bin. The short pass
# of the same runner is a test (`every_parser_survives_a_short_pass`, 3,000 per target).
set -eu
cargo build --release -p cellar-bench
./target/release/cellar-bench fuzz --executions "${EXECUTIONS:-1000000}" --seed "${SEED:-16}" \
    --out bench/results/fuzz-parsers
