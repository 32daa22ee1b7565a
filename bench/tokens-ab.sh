#!/bin/sh
# The token stage's quality and single-query latency, two builds side by side in one run: each
# `cellar-bench exact` (same index, queries, exact cache and variants) runs ROUNDS times,
# alternating BASE and NEW, and the table keeps each row's median P50 and P95 over the rounds
# and their NEW/BASE ratios; nDCG and the exact top-k found come from the last round (they do
# not depend on timing). From the checkout's root:
#   BASE=/path/to/old/cellar-bench NEW=./target/release/cellar-bench INDEX=... DATA=... \
#   QV=... CACHE=... OUT=bench/results/tokens-ab-2m sh bench/tokens-ab.sh
set -eu
: "${BASE:?}" "${NEW:?}" "${INDEX:?}" "${DATA:?}" "${QV:?}" "${CACHE:?}" "${OUT:?}"
QUERIES=${QUERIES:-50}
ROUNDS=${ROUNDS:-2}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
run() {
  "$1" exact --index "$INDEX" --data "$DATA" --query-vectors "$QV" --max-queries "$QUERIES" \
    --modes dense --exact-cache "$CACHE" --out "$2" \
    --variant 'dense tokens, 500 re-ranked={"mode":"dense","candidates":500,"rerank_k":500}' \
    --variant 'dense tokens, 1000 re-ranked={"mode":"dense","candidates":1000,"rerank_k":1000}' \
    --variant 'dense tokens, 2000 re-ranked={"mode":"dense","candidates":2000,"rerank_k":2000}' \
    --variant 'dense tokens nprobe 64, 1000 re-ranked={"mode":"dense","nprobe":64,"candidates":1000,"rerank_k":1000}' \
    > /dev/null
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
  run "$BASE" "$WORK/base-$r"
  run "$NEW" "$WORK/new-$r"
  r=$((r + 1))
done
python3 - "$WORK" "$ROUNDS" "$OUT" "$BASE" "$NEW" "$(cat /proc/cpuinfo | sed -n 's/^model name[^:]*: //p' | head -1)" <<'PY'
import json, statistics, sys
work, rounds, out, base, new, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def load(side, r):
    return {row["system"]: row for row in json.load(open(f"{work}/{side}-{r}.json"))["rows"]}
runs = {s: [load(s, r) for r in range(1, rounds + 1)] for s in ("base", "new")}
def med(side, system, key):
    return statistics.median(run[system][key] for run in runs[side])
last = {s: runs[s][-1] for s in runs}
lines = [
    "# Token stage, two builds side by side",
    "",
    f"Command: `BASE={base} NEW={new} INDEX=... sh bench/tokens-ab.sh` ({rounds} rounds, BASE then NEW in each).",
    "",
    f"Machine: {cpu}, 2 cores. One search at a time, k = 100, vector queries.",
    "",
    "| system | nDCG@10 base / new | exact top-10 found base / new | P50 ms base / new (ratio) | P95 ms base / new (ratio) | first stage ms, mean, base / new (ratio) |",
    "|---|---|---|---|---|---|",
]
for system in last["new"]:
    if system not in last["base"] or system.startswith("exact"):
        continue
    b, n = last["base"][system], last["new"][system]
    p50 = (med("base", system, "p50_ms"), med("new", system, "p50_ms"))
    p95 = (med("base", system, "p95_ms"), med("new", system, "p95_ms"))
    # Builds before the exact tool reported it have no first-stage time.
    if "first_stage_ms" in b and "first_stage_ms" in n:
        st = (med("base", system, "first_stage_ms"), med("new", system, "first_stage_ms"))
        stage = f"{st[0]:.1f} / {st[1]:.1f} ({st[1] / st[0]:.2f}x)"
    else:
        stage = "-"
    lines.append(
        f"| {system} | {b['ndcg_at_10']:.3f} / {n['ndcg_at_10']:.3f} | {b['exact_overlap_at_10']:.3f} / {n['exact_overlap_at_10']:.3f} "
        f"| {p50[0]:.1f} / {p50[1]:.1f} ({p50[1] / p50[0]:.2f}x) | {p95[0]:.1f} / {p95[1]:.1f} ({p95[1] / p95[0]:.2f}x) | {stage} |"
    )
open(out + ".md", "w").write("\n".join(lines) + "\n")
json.dump({"rounds": rounds, "base": runs["base"], "new": runs["new"]}, open(out + ".json", "w"), indent=1)
print("\n".join(lines))
PY
