#!/bin/sh
# Issue 44.5: Cellar's `dense` mode side by side with next-plaid (crates.io 1.8.5, default
# features: no BLAS, no CUDA) on identical vectors, from the checkout's root.
#   usage: sh bench/plaid-compare.sh [scifact] [200k] [2m]      (default: scifact 200k)
# Per collection, in $WORK/<name>/ (default /work/plaid-compare):
# - cellar/: a copy of the Cellar index (the shared one is never written). Its dense first stage
#   is (re)built on the copy under /usr/bin/time: `cellar tokens build` when the command exists
#   (the token stage), else `cellar ivf build` (the pooled IVF);
# - the store's build cost from the same vectors: the index's vectors exported (float16) and
#   built again by `cellar index --vectors --no-ivf` under /usr/bin/time (then both removed);
# - plaid/: next-plaid's index of the copy's decoded documents (`cellar-bench plaid build`,
#   IndexConfig { nbits: 4, ..Default::default() }, its README's configuration);
# - reference.json: exact MaxSim over every document of the store (`cellar-bench plaid exact`);
# - one `cellar-bench plaid search` child per system (its own peak RSS): recall of the exact
#   top 10/100, nDCG@10, single-query latency (one search at a time), and P95 against offered
#   QPS (open loop, Poisson, $WORKERS serving threads). RAYON_NUM_THREADS=$THREADS for next-plaid.
#   Cellar is searched twice: with its mmap reader (the store's pages it touches count in its
#   RSS, as next-plaid's mapped index does in its) and with the direct reader (no page cache in
#   its RSS; every read goes to the disk).
# SEARCH_ONLY=1: only the searches again (Cellar's two, next-plaid's where its index is there), on
# what $WORK/<name> holds (a quiet re-run of the latencies), then the report.
# Then writes $OUT.md (with $OUT.notes.md, the reading, at its end) and $OUT.json (REPORT_ONLY=1:
# only that) from every collection of $WORK that has its results (a run of
# one collection keeps the others' rows).
set -eu
WORK=${WORK:-/work/plaid-compare}
OUT=${OUT:-bench/results/plaid-side-by-side}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
WINDOW=${WINDOW:-10}
PLAID_CAP_MIB=${PLAID_CAP_MIB:-18432}
export RAYON_NUM_THREADS=$THREADS
[ $# -gt 0 ] || set -- scifact 200k
# REPORT_ONLY=1: only write the report from what $WORK holds.
[ -z "${REPORT_ONLY:-}" ] || { set --; BIN=${BIN:-./target/release}; }
ONLY=${SEARCH_ONLY:-}
# BIN=DIR: use DIR/cellar-bench and DIR/cellar as they are (copies of release builds) instead of
# building the checkout (whose other crates may be mid-edit).
GIVEN_BIN=${BIN:-}
if [ -z "$GIVEN_BIN" ]; then
  cargo build --release -q -p cellar-bench --features next-plaid
  cargo build --release -q -p cellar-cli
  BIN=./target/release
fi
B=$BIN/cellar-bench
C=$BIN/cellar
mkdir -p "$WORK"

timed() { # FILE COMMAND...: /usr/bin/time -v's figures into FILE
  f=$1
  shift
  /usr/bin/time -v -o "$f" "$@"
}

collection() { # NAME INDEX DATA QUERY_VECTORS MAX_QUERIES RATES
  name=$1 index=$2 data=$3 qv=$4 maxq=$5 rates=$6
  d=$WORK/$name
  if [ -n "$ONLY" ]; then
    search cellar
    search cellar direct
    [ ! -d "$d/plaid" ] || search next-plaid
    return
  fi
  echo "== $name: $index ($maxq queries, rates $rates)"
  rm -rf "$d"
  mkdir -p "$d"
  echo "${GIVEN_BIN:+BIN=$GIVEN_BIN }sh bench/plaid-compare.sh $name" > "$d/command"
  cp -a "$index" "$d/cellar"
  rm -f "$d/cellar/LOCK"
  if "$C" tokens --help > /dev/null 2>&1; then
    echo token > "$d/first-stage"
    # Built again on the copy even when the index has one: its build is measured, and it is
    # this binary's token stage at its defaults.
    rm -rf "$d/cellar/tokens"
    timed "$d/cellar-first-stage.time" "$C" tokens build --index "$d/cellar"
  else
    echo ivf > "$d/first-stage"
    rm -rf "$d/cellar/ivf"
    timed "$d/cellar-first-stage.time" "$C" ivf build --index "$d/cellar"
  fi
  "$B" embeddings export --index "$index" --out "$d/export"
  timed "$d/cellar-store.time" "$C" index --vectors "$d/export" --out "$d/rebuilt" --no-ivf > /dev/null
  rm -rf "$d/export" "$d/rebuilt"
  "$B" plaid exact --index "$d/cellar" --data "$data" --query-vectors "$qv" --max-queries "$maxq" --out "$d/reference.json"
  # Cellar is measured before next-plaid's (long) build, next-plaid after it: never beside each other.
  search cellar
  search cellar direct
  # next-plaid takes the whole collection as f32 matrices in RAM: its build runs under a memory
  # cap of its own ($PLAID_CAP_MIB, cgroup v1, page cache counted) so that it alone fails if
  # it outgrows the machine.
  timed "$d/plaid-build.time" sh bench/capped.sh "$PLAID_CAP_MIB" "plaid-build-$name" \
    "$B" plaid build --index "$d/cellar" --plaid "$d/plaid" --out "$d/plaid-build.json" > "$d/plaid-build.log"
  search next-plaid
}

search() { # SYSTEM [READER] (in collection's variables): SYSTEM[-READER]-search.{json,time}
  f=$1${2:+-$2}
  timed "$d/$f-search.time" "$B" plaid search --system "$1" ${2:+--reader "$2"} --index "$d/cellar" --plaid "$d/plaid" \
    --query-vectors "$qv" --reference "$d/reference.json" --rates "$rates" --window-secs "$WINDOW" \
    --workers "$WORKERS" --out "$d/$f-search.json" > /dev/null
}

for c in "$@"; do
  case $c in
    scifact) collection scifact /work/idx/scifact /work/shared/data/scifact /work/idx/scifact-query-vectors 300 "5,10,20,40,80,160" ;;
    200k) collection 200k /work/cellar-scale-200k/index /work/cellar-scale-200k/data \
      /work/cellar-scale-200k/data/query-vectors 50 "2,5,10,20,40,80" ;;
    2m) collection 2m /work/cellar-scale/index /work/cellar-scale/data /work/cellar-scale/data/query-vectors 50 "2,5,10,20,40" ;;
    *) echo "unknown collection $c (scifact, 200k, 2m)" >&2; exit 2 ;;
  esac
done

python3 - "$WORK" "$OUT" "$THREADS" "$WORKERS" <<'PY'
import json, os, re, subprocess, sys
work, out, threads, workers = sys.argv[1:]
names = [n for n in ("scifact", "200k", "2m") if os.path.exists(f"{work}/{n}/next-plaid-search.json")]
args = " ".join(names)

def timefile(path):
    if not os.path.exists(path):
        return None
    t = open(path).read()
    f = lambda n: re.search(rf"{re.escape(n)}: (.+)", t).group(1).strip()
    return {"cpu_secs": float(f("User time (seconds)")) + float(f("System time (seconds)")),
            "peak_rss_mib": int(f("Maximum resident set size (kbytes)")) / 1024,
            "wall": f("Elapsed (wall clock) time (h:mm:ss or m:ss)")}

fmt = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"
cpu = os.popen("sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1").read().strip()
commit = os.popen("git rev-parse --short HEAD").read().strip()
dirty = "+uncommitted changes" if os.popen("git status --porcelain -- crates bench").read().strip() else ""
report = {"command": f"sh bench/plaid-compare.sh {args}".strip(), "cpu": cpu, "cores": os.cpu_count(),
          "commit": commit + dirty, "rayon_threads": int(threads), "sweep_workers": int(workers), "collections": {}}
md = ["# Cellar dense against next-plaid on identical vectors (issue 44.5)", "",
      f"Command: `{report['command']}`", "",
      f"Machine: {cpu} ({os.cpu_count()} cores); commit {report['commit']}. next-plaid 1.8.5 from crates.io, default "
      f"features (pure Rust, no BLAS, no CUDA), RAYON_NUM_THREADS={threads}. Single-query latency: one search at a time "
      f"(each library may use the {os.cpu_count()} cores: next-plaid's rayon pool of {threads}, Cellar's own threads); "
      f"the sweep serves with {workers} threads. Both return the top 100 of every search.", ""]
for name in names:
    d = f"{work}/{name}"
    ref = json.load(open(f"{d}/reference.json"))
    build = json.load(open(f"{d}/plaid-build.json"))
    s = {sys_: json.load(open(f"{d}/{sys_}-search.json")) for sys_ in ("cellar", "cellar-direct", "next-plaid")
         if os.path.exists(f"{d}/{sys_}-search.json")}
    stage = open(f"{d}/first-stage").read().strip()
    first = timefile(f"{d}/cellar-first-stage.time")
    store = timefile(f"{d}/cellar-store.time")
    pb = timefile(f"{d}/plaid-build.time")
    report["collections"][name] = {"documents": ref["documents"], "queries": len(ref["query_ids"]), "exact_scan_secs": ref["scan_secs"],
        "cellar_first_stage": stage, "cellar_first_stage_build": first, "cellar_store_build_from_vectors": store,
        "next_plaid_build": build, "next_plaid_build_process": pb, "search": s}
    c, p = s["cellar"], s["next-plaid"]
    md += [f"## {name}: {ref['documents']:,} documents, {build['tokens']:,} token vectors of {build['dim']} dims, "
           f"{len(ref['query_ids'])} judged queries", "", f"Command: `{open(f'{d}/command').read().strip()}`", "",
           f"Exact MaxSim over every document (the reference): nDCG@10 {c['quality']['exact_ndcg_at_10']:.3f}. "
           f"Cellar's dense first stage: {'the token stage (tokens/)' if stage == 'token' else 'the pooled IVF (ivf/; the token stage had not landed)'}.", "",
           "| system | exact top-10 found | exact top-100 found | nDCG@10 | P50 ms | P95 ms | peak RSS MiB (search) | index MiB on disk | build CPU s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cellar_build = (first["cpu_secs"] if first else 0) + (store["cpu_secs"] if store else 0)
    plaid_build = build["build_cpu_user_secs"] + build["build_cpu_sys_secs"]
    rows = [("Cellar dense", c, cellar_build)]
    if "cellar-direct" in s:
        rows.append(("Cellar dense, direct reader", s["cellar-direct"], cellar_build))
    for label, r, b in rows + [("next-plaid", p, plaid_build)]:
        q, l = r["quality"], r["single_query"]
        md.append(f"| {label} | {q['exact_top10_found']:.3f} | {q['exact_top100_found']:.3f} | {q['ndcg_at_10']:.3f} | "
                  f"{fmt(l['p50_ms'], 2)} | {fmt(l['p95_ms'], 2)} | {r['peak_rss_bytes'] / 2**20:.0f} | "
                  f"{r['index_bytes'] / 2**20:.0f} | {b:.1f} |")
    md += ["", "Build CPU: Cellar's is `cellar index --vectors --no-ivf` of the same vectors (store, BM25 and texts: "
           f"{fmt(store and store['cpu_secs'], 1)} s, peak RSS {fmt(store and store['peak_rss_mib'], 0)} MiB) plus its first stage "
           f"(`cellar {'tokens' if stage == 'token' else 'ivf'} build`: {fmt(first and first['cpu_secs'], 1)} s, peak RSS "
           f"{fmt(first and first['peak_rss_mib'], 0)} MiB). next-plaid's is `MmapIndex::create_with_kmeans` alone "
           f"({build['build_wall_secs']:.0f} s wall; its process, decoding the Cellar store included, peaked at "
           f"{build['peak_rss_bytes'] / 2**20:.0f} MiB RSS, of which {build['decoded_input_bytes'] / 2**20:.0f} MiB are the decoded "
           f"f32 input its API takes in RAM). next-plaid's index: {build['metadata'].get('num_partitions')} centroids, nbits "
           f"{build['config']['nbits']}. Cellar's index bytes count every file (store, first stage, BM25, texts, pooled vectors).", "",
           "P95 (ms) against offered QPS, open loop (Poisson arrivals, latency from the due time, queueing included; "
           "`sat.`: more than 5% of the requests were still unanswered 5 s after the window; higher rates are not run):", "",
           ]
    swept = [("Cellar", c)] + ([("Cellar direct", s["cellar-direct"])] if "cellar-direct" in s else []) + [("next-plaid", p)]
    md += ["| offered QPS | " + " | ".join(f"{n} P95 | {n} achieved QPS" for n, _ in swept) + " |",
           "|---:|" + "---:|---:|" * len(swept)]
    rates = sorted({row["offered_qps"] for _, r in swept for row in r["sweep"]})
    for rate in rates:
        cells = []
        for _, r in swept:
            row = next((x for x in r["sweep"] if x["offered_qps"] == rate), None)
            if row is None:
                cells += ["(not run)", "-"]
            else:
                cells += ["sat." if row["saturated"] else fmt(row["p95_ms"], 1), f"{row['achieved_qps']:.1f}"]
        md.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    md += ["", "Parameters: Cellar `" + json.dumps(c["params"]) + "`; next-plaid `SearchParameters::default()` but `top_k` (100 on every call): `" + json.dumps(p["params"]["search"]) + "`", ""]
if os.path.exists(out + ".notes.md"):  # the hand-written reading, kept across runs
    md += [open(out + ".notes.md").read().rstrip()]
json.dump(report, open(out + ".json", "w"), indent=1)
open(out + ".md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
