"""The table of bench/stream-compare.sh: an old and a new `cellar-bench stream`, side by side.

Reads $RUNS/{old,new}-R/stream-bench.json (R = 1..$ROUNDS) and $RUNS/loads.tsv, and writes
$RESULTS/$NAME.{md,json} (NAME: stream-compare): per metric each round of each binary, the mean of each, the
new/old ratio of the means, each binary's spread over its rounds ((max - min) / mean) and a verdict:
a change in the worse direction larger than the larger of the two spreads is "worse", one in the
better direction "better", anything else "within spread". The environment names the runs (set
by the shell script). Exits 2 when a run's report is missing.
"""

import json
import os
import sys

HIGHER = "higher"  # better when higher (throughput)
LOWER = "lower"  # better when lower (latency)


def env(name):
    value = os.environ.get(name)
    if value is None:
        sys.exit(f"stream_compare.py: error: ${name} is not set (run bench/stream-compare.sh)")
    return value


def latencies(name, c):
    """A size class's cold and warm P50 and P95 rows, named `name ...`."""
    return [
        (f"{name} {when} {p}", "ms", LOWER, c[f"{when}_ms_{p.lower()}"])
        for when in ("cold", "warm")
        for p in ("P50", "P95")
    ]


def patched(side):
    """Whether bench/stream-compare-p95.patch was applied to that side's tree ("yes" / "no")."""
    with open(os.path.join(env("W"), "bin", f"patched-{side}")) as f:
        return f.read().strip()


def load_runs(work, rounds):
    runs = {}
    for side in ("old", "new"):
        runs[side] = []
        for r in range(1, rounds + 1):
            path = os.path.join(work, f"{side}-{r}", "stream-bench.json")
            try:
                with open(path) as f:
                    runs[side].append(json.load(f))
            except OSError as e:
                print(f"stream_compare.py: error: {path}: {e.strerror}", file=sys.stderr)
                sys.exit(2)
    return runs


def metrics(report):
    """(name, unit, better, value) of one run's report, in table order."""
    out = [
        (f"feed, batches of {report['batch']}", "docs/s", HIGHER, report["feed"]["docs_per_s"]),
    ]
    for s in report["single"]:
        out.append((f"feed, single puts, {s['threads']} writer(s)", "docs/s", HIGHER, s["docs_per_s"]))
    out.append(("final flush + compaction", "s", LOWER, report["feed"]["compact_s"]))
    out.append(("disk sequential read (cold)", "MB/s", HIGHER, report["disk"]["sequential_mb_s"]))
    disk = report["disk"]["sequential_mb_s"]
    for i, c in enumerate(report["queries"]):
        n = f"class {i + 1}, {c['docs_per_user']} docs/group:"
        out += latencies(n, c) + [
            (f"{n} pooled cold P50", "ms", LOWER, c["pooled_cold_ms_p50"]),
            (f"{n} scan rate (cold P50)", "MB/s", HIGHER, c["scan_mb_s"]),
            (f"{n} scan / disk", "", HIGHER, c["scan_mb_s"] / disk),
        ]
    if report.get("global"):
        feed, classes = report["global"]
        out.append(("global collection: feed, batches", "docs/s", HIGHER, feed["docs_per_s"]))
        for i, c in enumerate(classes):
            out += latencies(f"global, class {i + 1} user ({c['docs_per_user']} docs):", c)
    return out


def spread(values):
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean else 0.0


def verdict(better, ratio, noise):
    gain = ratio - 1 if better == HIGHER else 1 / ratio - 1 if ratio else float("inf")
    if gain < -noise:
        return "**worse**"
    if gain > noise:
        return "better"
    return "within spread"


def fmt(v):
    """Four significant digits below 10 (a warm search of a tiny group takes microseconds)."""
    return f"{v:.4g}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:.0f}"


def main():
    work, results, rounds = env("RUNS"), env("RESULTS"), int(env("ROUNDS"))
    runs = load_runs(work, rounds)
    per_run = {side: [metrics(r) for r in runs[side]] for side in runs}
    names = [m[:3] for m in per_run["old"][0]]
    for side in per_run:
        for r, ms in enumerate(per_run[side]):
            if [m[:3] for m in ms] != names:
                sys.exit(f"stream_compare.py: error: {side} round {r + 1} reports other metrics than old round 1")
    rows = []
    for i, (name, unit, better) in enumerate(names):
        old = [ms[i][3] for ms in per_run["old"]]
        new = [ms[i][3] for ms in per_run["new"]]
        old_mean, new_mean = sum(old) / len(old), sum(new) / len(new)
        ratio = new_mean / old_mean if old_mean else float("nan")
        noise = max(spread(old), spread(new))
        rows.append({
            "metric": name, "unit": unit, "better": better, "old": old, "new": new,
            "old_mean": old_mean, "new_mean": new_mean, "ratio": ratio,
            "old_spread": spread(old), "new_spread": spread(new), "verdict": verdict(better, ratio, noise),
        })

    loads = []
    with open(env("LOADS")) as f:
        for line in f:
            side, r, before, after, secs = line.rstrip("\n").split("\t")
            loads.append({"side": side, "round": int(r), "load_before": before, "load_after": after, "seconds": int(secs)})

    first = runs["old"][0]
    head = [f"old {r}" for r in range(1, rounds + 1)] + [f"new {r}" for r in range(1, rounds + 1)]
    md = "# Streaming benchmark: old and new engine side by side\n\n"
    md += (
        f"Made with `bench/stream-compare.sh` (`make bench-stream-compare`) on {env('DATE')}: "
        f"`cellar-bench stream {env('STREAM_ARGS')}`, release builds, each binary run {rounds} times, "
        f"alternating old, new, old, new on one machine ({env('CPU')}, {env('CORES')} cores).\n\n"
        f"- old: `{env('OLD_SHA')[:12]}` {env('OLD_SUBJECT')} (bench patched: {patched('old')})\n"
        f"- new: `{env('NEW_SHA')[:12]}` {env('NEW_SUBJECT')} (bench patched: {patched('new')})\n\n"
        "Each tree's bench reports the P95 columns; where its commit lacks them, "
        "`bench/stream-compare-p95.patch` adds them and the bench's fix for opening a collection twice "
        "(crates/cellar-bench/src/stream/ only, the engine untouched).\n\n"
        f"Corpus: {first['users']} users, {first['docs']} documents of {first['tokens']} token vectors x {first['dim']} dims; "
        f"{first['queries'][0]['queries']} queries per size class (P95 is nearest-rank: the "
        f"{-(-95 * first['queries'][0]['queries'] // 100)}th of {first['queries'][0]['queries']}). "
        "Cold = the segment files evicted from the page cache before the query; warm = the same query again.\n\n"
        "## Machine load (`/proc/loadavg` 1/5/15 min, before and after each run)\n\n"
        "| run | load before | load after | seconds |\n|---|---|---|---:|\n"
    )
    for x in loads:
        md += f"| {x['side']} {x['round']} | {x['load_before']} | {x['load_after']} | {x['seconds']} |\n"
    md += (
        f"\n## Metrics\n\n`new/old` is the ratio of the means; `spread` is (max - min) / mean of one binary's {rounds} rounds; "
        "a change in the worse direction larger than the larger spread is **worse**, in the better direction `better`.\n\n"
        f"| metric | unit | {' | '.join(head)} | old mean | new mean | new/old | old spread | new spread | verdict |\n"
        f"|---|---|{'---:|' * len(head)}---:|---:|---:|---:|---:|---|\n"
    )
    for row in rows:
        values = " | ".join(fmt(v) for v in row["old"] + row["new"])
        md += (
            f"| {row['metric']} | {row['unit']} | {values} | {fmt(row['old_mean'])} | {fmt(row['new_mean'])} | "
            f"{row['ratio']:.3f} | {row['old_spread']:.1%} | {row['new_spread']:.1%} | {row['verdict']} |\n"
        )
    summary = {
        "date": env("DATE"), "command": f"cellar-bench stream {env('STREAM_ARGS')}", "rounds": rounds,
        "cpu_model": env("CPU"), "cores": int(env("CORES")),
        "old_commit": env("OLD_SHA"), "new_commit": env("NEW_SHA"), "loads": loads, "metrics": rows,
        "runs": {side: [r.get("git_commit") for r in runs[side]] for side in runs},
    }
    os.makedirs(results, exist_ok=True)
    name = env("NAME")
    with open(os.path.join(results, f"{name}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(results, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(md)


if __name__ == "__main__":
    main()
