#!/bin/sh
# The scale build of issue 17.2, from the checkout's root: `cellar-bench corpus --index` builds
# an index of $DOCS synthetic documents (128-dim token vectors, mean 60 per document, the
# default codec) as it generates them, inside a cgroup-v1 memory cap of $CAP_MIB (page cache
# counted; bench/capped.sh), without its IVF (`bench/scale-ivf.sh` adds it). /usr/bin/time
# gives the peak RSS and the CPU seconds (user + sys over wall: how many cores were busy).
# Writes bench/results/scale-build.md. The collection (texts, queries, qrels, query vectors)
# and the index stay in $WORK for the later steps.
set -eu
DOCS=${DOCS:-2000000}
CAP_MIB=${CAP_MIB:-1024}
W=${WORK:-/work/cellar-scale}
OUT=${OUT:-bench/results/scale-build.md}
cargo build --release -q -p cellar-bench -p cellar-cli
B=./target/release/cellar-bench
rm -rf "$W/data" "$W/index"
mkdir -p "$W"
/usr/bin/time -v -o "$W/time.log" sh bench/capped.sh "$CAP_MIB" cellar-scale-build \
  "$B" corpus --docs "$DOCS" --queries 1000 --out "$W/data" --index "$W/index" --no-ivf "$@" \
  2> "$W/build.err" | tee "$W/build.log"
python3 - "$W" "$OUT" "$DOCS" "$CAP_MIB" "$*" <<'PY'
import json, os, re, subprocess, sys
w, out, docs, cap, extra = sys.argv[1:]
index = json.load(open(f"{w}/index/index.json"))
b = index["build"]
time = open(f"{w}/time.log").read()
def field(name):
    return re.search(rf"{re.escape(name)}: (.+)", time).group(1).strip()
user, sys_, rss = float(field("User time (seconds)")), float(field("System time (seconds)")), int(field("Maximum resident set size (kbytes)"))
wall_text = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
parts = [float(p) for p in wall_text.split(":")]
wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
capped = [l for l in open(f"{w}/build.log") if l.startswith("capped:")][0].strip()
du = lambda p: int(subprocess.run(["du", "-sb", p], capture_output=True, text=True).stdout.split()[0])
sizes = {name: du(f"{w}/index/{name}") for name in sorted(os.listdir(f"{w}/index"))}
total = du(f"{w}/index")
tokens = b["tokens"]
cpu = os.popen("sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1").read().strip()
commit = os.popen("git rev-parse --short HEAD").read().strip()
lines = [
    "# An index of millions of synthetic documents on one 2-core machine (issue 17.2)",
    "",
    f"Command: `DOCS={docs} CAP_MIB={cap} sh bench/scale-build.sh{(' ' + extra) if extra else ''}`",
    "",
    f"Machine: {cpu} ({os.cpu_count()} cores), host-cached virtual disk; commit {commit}.",
    "",
    "| documents | token vectors | dim | codec | wall s | CPU s (user + sys) | cores busy | peak RSS MiB | cgroup cap MiB | peak charge (RSS + page cache) | index on disk GiB | wall ms per 1M tokens | CPU ms per 1M tokens | CPU µs per token |",
    "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    f"| {b['docs']:,} | {tokens:,} | {index['encoder']['model_dim']} | {index['codec']} | {wall:.0f} | {user + sys_:.0f} | {(user + sys_) / wall:.2f} | {rss / 1024:.0f} | {cap} | {capped.split('|')[1].split(')')[1].strip()} | {total / 2**30:.2f} | {wall * 1e9 / tokens:.0f} | {(user + sys_) * 1e9 / tokens:.0f} | {(user + sys_) * 1e6 / tokens:.2f} |",
    "",
    "CPU time includes generating the documents (the generator runs on every core beside the build, in place of an encoder); the build's own stage times from `index.json`:",
    "",
    "```json",
    json.dumps(b, indent=1),
    "```",
    "",
    "Files of the index (bytes): " + ", ".join(f"{k} {v:,}" for k, v in sizes.items()),
    "",
    "```",
    capped,
    "```",
]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
