#!/bin/sh
# Runs a command inside a cgroup-v1 memory cap (page cache counted) of its own, a child of this
# process's memory cgroup, and prints one line of figures: the peak charge (RSS + page cache),
# how often the limit was hit, the wall seconds and the command's exit status.
#   usage: sh bench/capped.sh CAP_MIB NAME COMMAND [ARGS...]
# Exits with the command's status. cgroup v2 machines: the benchmarks of cellar-bench cap
# themselves on v2 (harness/cgroup.rs); this shell helper does not.
set -eu
CAP_MIB=$1 NAME=$2
shift 2
own=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
[ -n "$own" ] || { echo "capped.sh: no cgroup v1 memory controller in /proc/self/cgroup" >&2; exit 2; }
cg=/sys/fs/cgroup/memory$own/$NAME
mkdir -p "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo $((CAP_MIB << 20)) > "$cg/memory.limit_in_bytes"
start=$(date +%s.%N)
# The command joins the cgroup before it runs (sh writes its own pid, then execs it).
status=0
sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@" || status=$?
secs=$(echo "$(date +%s.%N) - $start" | bc -l)
peak=$(cat "$cg/memory.max_usage_in_bytes")
hits=$(cat "$cg/memory.failcnt")
printf 'capped: cap %d MiB | peak charge (RSS + page cache) %d MiB | limit hit %d times | %.1f s | exit %d\n' \
  "$CAP_MIB" $((peak >> 20)) "$hits" "$secs" "$status"
exit "$status"
