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
own=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
[ -n "$own" ] || { echo "no cgroup v1 memory controller in /proc/self/cgroup" >&2; exit 2; }
cg=/sys/fs/cgroup/memory$own/cellar-index-cap
mkdir -p "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo $((CAP_MIB << 20)) > "$cg/memory.limit_in_bytes"
rm -rf "$OUT"
start=$(date +%s)
# The indexer joins the cgroup before it runs (sh writes its own pid, then execs cellar).
sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$CELLAR" index "$SRC" --out "$OUT"
secs=$(( $(date +%s) - start ))
peak=$(cat "$cg/memory.max_usage_in_bytes")
hits=$(cat "$cg/memory.failcnt")
size=$(du -sb "$OUT" | cut -f1)
printf 'cap %d MiB | peak charge (RSS + page cache) %d MiB | limit hit %d times | index on disk %d MiB (%.1fx the cap) | %d s\n' \
  "$CAP_MIB" $((peak >> 20)) "$hits" $((size >> 20)) "$(echo "$size / ($CAP_MIB * 1048576)" | bc -l)" "$secs"
