"""Compares `cellar-bench load` reports of the same sweep made by different binaries or rounds:
per report and configuration, P95 / the baseline's P95 at each offered QPS, and the server's mean
read time not hidden under other work (read - read_hidden) and total time per search.

Usage: python3 bench/runs_compare.py LABEL=REPORT.json [LABEL=REPORT.json ...]
(the baseline is each report's own, as `--baseline` named it; markdown on stdout).
"""
import json
import sys


def levels_of(config):
    return {round(l["offered_qps"], 3): l for l in config["levels"]}


def p95(level):
    lat = level.get("latency") if level else None
    return None if not lat else lat["p95_ms"]


def stage(level, name):
    stages = (level or {}).get("stage_ms") or {}
    return stages.get(name)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(args):
    if not args or any("=" not in a for a in args):
        sys.exit(__doc__)
    reports = [(a.split("=", 1)[0], json.load(open(a.split("=", 1)[1]))) for a in args]
    qps = sorted({round(l["offered_qps"], 3) for _, r in reports for c in r["configurations"] for l in c["levels"]})
    head = ", ".join(f"{q:g}" for q in qps)
    print(f"| run | commit | configuration | P95 ÷ baseline's at {head} QPS | unhidden read ms | total ms |")
    print("|---|---|---|---|---|---|")
    for label, report in reports:
        base_name = report.get("baseline")
        configs = report["configurations"]
        base = next((c for c in configs if c["name"] == base_name), None)
        base_levels = levels_of(base) if base else {}
        for c in configs:
            levels = levels_of(c)
            ratios, unhidden, total = [], [], []
            for q in qps:
                mine, theirs = p95(levels.get(q)), p95(base_levels.get(q))
                ratios.append(fmt(mine / theirs if mine and theirs else None, ".2f"))
                read, hidden = stage(levels.get(q), "read"), stage(levels.get(q), "read_hidden")
                unhidden.append(fmt(read - hidden if read is not None and hidden is not None else None, ".2f"))
                total.append(fmt(stage(levels.get(q), "total"), ".1f"))
            print(f"| {label} | {report['git_commit']} | {c['name']} | {', '.join(ratios)} | "
                  f"{', '.join(unhidden)} | {', '.join(total)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
