#!/usr/bin/env bash
# Indexes a collection inside a cgroup-v1 memory cap (page cache counted) and reports the peak
# charge next to the size of the index written: the build streams, so the index can be many
# times larger than the memory it was built in.
#   usage: bench/index-under-cap.sh [SOURCE] [OUT]      (env CAP_MIB, default 256)
set -euo pipefail
CAP_MIB=${CAP_MIB:-256}
SRC=${1:-../shared/data/scifact}
OUT=${2:-bench/work/scifact-capped}
CELLAR=./target/release/cellar
rm -rf "$OUT"
sh bench/capped.sh "$CAP_MIB" cellar-index-cap "$CELLAR" index "$SRC" --out "$OUT"
size=$(du -sb "$OUT" | cut -f1)
printf 'index on disk %d MiB (%.1fx the cap)\n' $((size >> 20)) "$(echo "$size / ($CAP_MIB * 1048576)" | bc -l)"
