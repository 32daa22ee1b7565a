#!/bin/sh
# The IVF of the scale index (issue 17.3), from the checkout's root after bench/scale-build.sh:
# `cellar ivf build` over its pooled vectors inside the same cgroup-v1 cap ($CAP_MIB, page cache
# counted), thousands of clusters trained on a sample and refined over every document. Writes
# bench/results/scale-ivf.md with the IVF's report.
set -eu
CAP_MIB=${CAP_MIB:-1024}
W=${WORK:-/work/cellar-scale}
OUT=${OUT:-bench/results/scale-ivf.md}
cargo build --release -q -p cellar-cli
/usr/bin/time -v -o "$W/ivf-time.log" sh bench/capped.sh "$CAP_MIB" cellar-scale-ivf \
  ./target/release/cellar ivf build --index "$W/index" "$@" 2> "$W/ivf.err" | tee "$W/ivf.log"
{
  echo "# The IVF of the 2M-document index (issue 17.3)"
  echo
  echo "Command: \`CAP_MIB=$CAP_MIB sh bench/scale-ivf.sh${*:+ $*}\` after \`bench/scale-build.sh\`."
  echo
  echo "Machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1) ($(nproc) cores), host-cached virtual disk; commit $(git rev-parse --short HEAD)."
  echo
  echo '```'
  cat "$W/ivf.log"
  grep -E "Maximum resident|Elapsed|User time|System time" "$W/ivf-time.log"
  echo '```'
  echo
  echo '`ivf/ivf.json`:'
  echo
  echo '```json'
  cat "$W/index/ivf/ivf.json"
  echo
  echo '```'
} > "$OUT"
cat "$OUT"
