"""A projection (issue 19.5) of the shards, replicas and machines a sharded Cellar needs for
100M and 1B documents at a target P95 and QPS, from two measured runs on this 2-core machine:
the single shard of the millions-of-documents issue (`scale-serve-dense.json`, 2M documents,
direct reader under a cap of its footprint + 5% of the index) and the scatter-gather's cost
over Ray (`cluster.json`).

    python3 bench/cluster_projection.py [--target-p95-ms 50] [--qps 100,1000]

Appends its table to bench/results/cluster.md. The model, stated so it can be argued with:
- a shard is a 2-core replica; every query visits every shard (the scatter) and the router
  adds the measured Ray overhead for that many shards (its growth per shard extrapolated
  linearly from the 1-, 2- and 4-shard runs);
- a shard of s documents costs a query `(s / 2M)^g` times the measured 2M-document shard, for
  g = 0 (the IVF probe with a fixed nprobe reads the same bytes whatever the shard's size: the
  dense first stage measured) and g = 1 (cost linear in the shard: BM25's posting lists grow
  with it) — the truth for a given mode lies between;
- a replica is loaded to 70% of its measured capacity within the target (the busiest measured
  level whose P95 met the target less the router's overhead), replicas added per shard until
  the QPS fits; RAM per document and disk per document as measured (direct reader, 5% cap);
- a machine is 16 cores (8 replicas), 128 GiB RAM and 7.68 TB of NVMe.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

MACHINE = {"replicas": 8, "ram": 128 << 30, "disk": 7.68e12}
SHARD_SIZES = [2_000_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000, 100_000_000]


def measured(scale: dict, config: str) -> dict:
    c = next(c for c in scale["configurations"] if c["name"] == config)
    docs = 2_000_000
    return {"levels": [(lv["achieved_qps"], lv["latency"]["p95_ms"]) for lv in c["levels"] if lv["latency"].get("n")],
            "ram_per_doc": c["cap_bytes"] / docs, "disk_per_doc": c["index_bytes"] / docs, "docs": docs}


def overheads(cluster: dict) -> tuple[float, float]:
    """(what Ray's router adds to a query with 1 shard: P50 over HTTP at the lowest load against
    `cellar serve`'s; what each further shard adds: the in-process fan-out's P50 growth from
    1 to 4 shards, searched in parallel threads). The Ray runs with 2 and 4 shards are not used
    for the second: there every replica shares the same 2 cores, so they measure contention,
    not fan-out."""
    load = cluster["load"]
    base = load["cellar serve, 1 index"]["levels"][0]["latency"]["p50_ms"]
    ray_one = load["Ray Serve, 1 shard(s)"]["levels"][0]["latency"]["p50_ms"]
    layouts = {int(k.split()[0]): v["p50_ms"] for k, v in cluster["in_process"].items() if k.endswith("shards")}
    slope = (layouts[max(layouts)] - layouts[min(layouts)]) / max(1, max(layouts) - min(layouts))
    return max(0.0, ray_one - base), max(0.0, slope)


def plan(docs: int, qps: float, target: float, g: int, m: dict, over: tuple[float, float]) -> dict | None:
    best = None
    for s in SHARD_SIZES:
        shards = math.ceil(docs / s)
        overhead = over[0] + over[1] * (shards - 1)
        scale = (s / m["docs"]) ** g
        # A replica's capacity within the target: the busiest measured level whose P95, scaled
        # to this shard size, leaves room for the router.
        fits = [q / scale for q, p95 in m["levels"] if p95 * scale + overhead <= target]
        if not fits:
            continue
        capacity = max(fits) * 0.7
        replicas = math.ceil(qps / capacity)
        units = shards * replicas
        ram = docs * m["ram_per_doc"] * replicas
        disk = docs * m["disk_per_doc"] * replicas
        machines = max(math.ceil(units / MACHINE["replicas"]), math.ceil(ram / MACHINE["ram"]), math.ceil(disk / MACHINE["disk"]))
        row = {"shard_docs": s, "shards": shards, "replicas": replicas, "cores": 2 * units, "machines": machines,
               "ram_gib": ram / (1 << 30), "disk_tb": disk / 1e12, "overhead_ms": overhead}
        if best is None or (row["machines"], row["cores"]) < (best["machines"], best["cores"]):
            best = row
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="bench/results/scale-serve-dense.json")
    p.add_argument("--config", default="direct-cap5")
    p.add_argument("--cluster", default="bench/results/cluster.json")
    p.add_argument("--target-p95-ms", type=float, default=50.0)
    p.add_argument("--qps", default="100,1000")
    p.add_argument("--out", default="bench/results/cluster.md")
    p.add_argument("--router-ms", type=float, default=None,
                   help="replace the measured router cost with this one (an assumption, labelled so)")
    args = p.parse_args()
    m = measured(json.loads(Path(args.scale).read_text()), args.config)
    over = overheads(json.loads(Path(args.cluster).read_text()))
    measured_router = over[0]
    if args.router_ms is not None:
        over = (args.router_ms, over[1])
    title = "## Projection to 100M and 1B documents" + (" (assumed router)" if args.router_ms is not None else "")
    command = "python3 bench/cluster_projection.py" + (f" --router-ms {args.router_ms:g}" if args.router_ms is not None else "")
    lines = ["", f"{title} (`{command}`)", "",
             f"From `{args.scale}` ({args.config}: 2M documents on 2 cores, P95 by achieved QPS "
             f"{', '.join(f'{q:.0f}→{p:.1f} ms' for q, p in m['levels'])}; {m['ram_per_doc']:.0f} B of RAM and "
             f"{m['disk_per_doc']:.0f} B of disk per document) and `{args.cluster}` (Ray's router: "
             f"+{measured_router:.1f} ms at P50 with 1 shard, measured on these 2 shared cores"
             + (f"; **assumed {args.router_ms:g} ms here instead**, for a router on cores of its own" if args.router_ms is not None else "")
             + f"; +{over[1]:.1f} ms per further shard, the in-process fan-out's growth). Target P95 ≤ "
             f"{args.target_p95_ms:g} ms. Model and machine in the script's docstring; g = 0: a shard's cost "
             "per query does not grow with its size (fixed-nprobe IVF), g = 1: it grows linearly (BM25).", "",
             "| documents | QPS | g | docs per shard | shards | replicas per shard | cores | machines (16 cores, 128 GiB, 7.68 TB) | RAM GiB | SSD TB | router ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for docs in (100_000_000, 1_000_000_000):
        for qps in [float(q) for q in args.qps.split(",")]:
            for g in (0, 1):
                row = plan(docs, qps, args.target_p95_ms, g, m, over)
                if row is None:
                    lines.append(f"| {docs:,} | {qps:g} | {g} | no shard size meets the target | | | | | | | |")
                    continue
                lines.append(f"| {docs:,} | {qps:g} | {g} | {row['shard_docs']:,} | {row['shards']} | {row['replicas']} | "
                             f"{row['cores']} | {row['machines']} | {row['ram_gib']:.0f} | {row['disk_tb']:.1f} | {row['overhead_ms']:.1f} |")
    lines += ["", "Every query visits every shard, so the shards' work per query adds up (the g = 1 rows: small "
              "shards, many of them, each busy with every query) and replicas, not shards, buy QPS. Left out: "
              "that a query waits for the slowest of its shards (the tail of a maximum over hundreds of shards; "
              "the fan-out was measured up to 4), network hops between machines (here the shards share one "
              "host), the build's machines, and redundancy beyond the replicas the QPS needs.", ""]
    text = "\n".join(lines)
    out = Path(args.out)
    body = out.read_text() if out.exists() else ""
    marker = "\n## Projection to 100M and 1B documents" + (" (assumed router)" if args.router_ms is not None else "")
    if marker + " " in body or marker + "\n" in body or body.endswith(marker):
        start = body.index(marker)
        rest = body.find("\n## ", start + 1)
        body = body[:start] + (body[rest:] if rest >= 0 else "")
    out.write_text(body.rstrip("\n") + "\n" + text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
