"""Summarises the JSON files of bench/serve-load.sh into the tables of the README.

Usage: python3 bench/serve_summary.py bench/results/serve-load-{f16,int8,threads,compact,caps}.json
"""
import json
import sys


def mib(v):
    return "-" if v is None else f"{v / 2**20:.0f}"


def p95(level):
    lat = level.get("latency")
    return None if not lat else lat["p95_ms"]


def config_rows(report):
    for c in report["configurations"]:
        levels = c["levels"]
        ok = [l for l in levels if not l["saturated"]]
        read = ok[-1]["server_read_bytes_per_query"] if ok else None
        disk = ok[-1]["proc_read_bytes_per_query"] if ok else None
        q = c.get("quality") or {}
        ndcg = q.get("ndcg_at_10")
        cap = "-" if c["cap_bytes"] is None else f"{c['cap_pct']:g}% = {mib(c['cap_bytes'])} MiB"
        yield (f"| {c['name']} | {c['reader']} | {cap} | {c['status']} | {c['saturation_qps']:.0f} | "
               f"{mib(c['peak_rss_bytes'])} | {mib(c['cgroup_max_usage_bytes'])} | "
               f"{'-' if read is None else f'{read / 1024:.0f}'} | "
               f"{'-' if disk is None else f'{disk / 1024:.0f}'} | "
               f"{'-' if ndcg is None else f'{ndcg:.3f}'} |")


def p95_table(report):
    configs = report["configurations"]
    base = configs[0]
    names = [c["name"] for c in configs]
    out = ["| offered QPS | " + " | ".join(f"{n} P95 ms" for n in names) + " | "
           + " | ".join(f"{n} / {base['name']}" for n in names[1:]) + " |",
           "|---" * (2 * len(names)) + "|"]
    for qps in report["settings"]["qps"]:
        cells, ratios = [], []
        base_p95 = next((p95(l) for l in base["levels"] if l["offered_qps"] == qps), None)
        for c in configs:
            level = next((l for l in c["levels"] if l["offered_qps"] == qps), None)
            v = None if level is None else p95(level)
            mark = "*" if level is not None and level["saturated"] else ""
            cells.append("-" if v is None else f"{v:.1f}{mark}")
            if c is not base:
                ratios.append("-" if v is None or base_p95 is None else f"{v / base_p95:.2f}x{mark}")
        if all(x == "-" for x in cells):
            continue
        out.append(f"| {qps:g} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return out


def main(paths):
    print("| configuration | reader | memory cap | status | highest achieved QPS | peak RSS MiB | cgroup peak MiB | KiB read/query (reader) | KiB from disk/query (/proc) | served nDCG@10 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    reports = [json.load(open(p)) for p in paths]
    for r in reports:
        print("\n".join(config_rows(r)))
    for path, r in zip(paths, reports):
        print(f"\nP95 against offered load, {path} (* = saturated level):\n")
        print("\n".join(p95_table(r)))


if __name__ == "__main__":
    main(sys.argv[1:])
