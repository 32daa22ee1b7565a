#!/bin/sh
# Issue 13.2: what the read path costs the CPU, before and after the read-and-score pipeline
# (pooled page-aligned buffers, chunks read on an I/O thread and scored as they arrive), as one
# command run by two binaries in turn: `cellar eval` of SciFact's test queries with the direct
# reader (every re-ranked record read with O_DIRECT, so every search maps, faults in and unmaps
# its buffers before the change, and reuses pooled ones after). Each pair alternates the two
# binaries RUNS times; the summary gives the medians of wall, user and system seconds and
# minor page faults, and their after/before ratios pair by pair.
# Re-run: BEFORE=/path/to/old/cellar AFTER=./target/release/cellar sh bench/read-path.sh
set -eu
BEFORE=${BEFORE:?the cellar binary built before the change}
AFTER=${AFTER:-./target/release/cellar}
D=${DATA:-../shared/data}/scifact
I=${INDEX:-bench/work/scifact}
R=${RESULTS:-bench/results}
RUNS=${RUNS:-5}
LOG=$(mktemp)
for i in $(seq "$RUNS"); do
  for v in before after; do
    if [ $v = before ]; then BIN=$BEFORE; else BIN=$AFTER; fi
    /usr/bin/time -f "$v %e %U %S %R" "$BIN" eval --index "$I" --data "$D" --split test --reader direct \
      > "$LOG.$v.out" 2>> "$LOG.err"
    tail -n 1 "$LOG.err" >> "$LOG"
  done
done
python3 - "$LOG" "$LOG.after.out" "$RUNS" "$R/read-path.md" "$0" <<'PY'
import statistics, subprocess, sys
log, eval_out, runs, out, script = sys.argv[1:]
rows = [l.split() for l in open(log) if l.split() and l.split()[0] in ("before", "after")]
by = {"before": [], "after": []}
for r in rows:
    by[r[0]].append([float(x) for x in r[1:]])
names = ["wall s", "user s", "system s", "minor faults"]
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
flags = subprocess.run(["sh", "-c", "grep -m1 -o -w 'avx512f' /proc/cpuinfo || echo 'no avx512'"], capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = [f"# Read path: CPU before and after the read-and-score pipeline (issue 13.2)\n",
      f"Command: `BEFORE=... AFTER=... RUNS={runs} sh {script}` — each run is `cellar eval --index INDEX --data scifact --split test --reader direct` (every row of the evaluation table over the judged test queries), the two binaries alternated.\n",
      f"Machine: {cpu} ({flags}), commit {commit}. Direct reader, no emulated latency (the virtual disk is host-cached: this measures CPU, not device time).\n",
      "| figure | before (median) | after (median) | after / before (median of pairs) |", "|---|---|---|---|"]
for k, name in enumerate(names):
    b = [r[k] for r in by["before"]]; a = [r[k] for r in by["after"]]
    ratios = [x / y for x, y in zip(a, b) if y > 0]
    md.append(f"| {name} | {statistics.median(b):.2f} | {statistics.median(a):.2f} | {statistics.median(ratios):.3f} |")
md.append("\nThe after binary's evaluation table (quality must not move):\n")
md.append("```\n" + open(eval_out).read().strip() + "\n```\n")
open(out, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
rm -f "$LOG" "$LOG".*
