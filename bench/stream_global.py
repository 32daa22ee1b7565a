"""The per-user searches of `cellar-bench stream`, done with global indexes filtered by user.

Reads what `cellar-bench stream` exported (bench/work/stream/export: pooled vectors, f16 token
vectors, queries with the streaming collection's exact answers) and runs, single-threaded:

- faiss IVF-Flat (approximate) and Flat (exact) over the pooled vectors of every user, each
  search restricted to one user with an ID selector (documents are laid out user by user);
- qdrant-edge (if importable): one shard holding every user's token vectors as multivectors
  (MaxSim, f16), a keyword payload index on the user, exact search filtered by user.

Recall@10 is measured against the streaming collection's exact answers (pooled and MaxSim).
Writes bench/results/stream-global.{json,md}. Dependencies: numpy, faiss-cpu, qdrant-edge-py
(put them on PYTHONPATH, e.g. `pip install --target /tmp/bench-py faiss-cpu qdrant-edge-py`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

CLASSES = [100, 1000, 10_000, 50_000, 100_000]


def load(export: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    meta = json.loads((export / "queries.json").read_text())
    n, dim, t = meta["docs"], meta["dim"], meta["tokens"]
    pooled = np.fromfile(export / "pooled.f32", dtype=np.float32).reshape(n, dim)
    tokens = np.memmap(export / "tokens.f16", dtype=np.float16, mode="r", shape=(n, t, dim))
    return meta, pooled, tokens


def recall(found: list[int], exact: list[int]) -> float:
    return len(set(found) & set(exact)) / max(1, len(exact))


def by_class(meta: dict, rows: list[dict]) -> list[dict]:
    out = []
    for cls in sorted({q["class"] for q in meta["queries"]}):
        mine = [r for r, q in zip(rows, meta["queries"]) if q["class"] == cls]
        out.append(
            {
                "docs_per_user": meta["queries"][[q["class"] for q in meta["queries"]].index(cls)]["docs"],
                "queries": len(mine),
                "ms_p50": statistics.median(r["ms"] for r in mine),
                "recall_at_10": statistics.mean(r["recall"] for r in mine),
            }
        )
    return out


def run_faiss(meta: dict, pooled: np.ndarray) -> dict:
    import faiss

    faiss.omp_set_num_threads(1)
    n, dim = pooled.shape
    nlist = int(4 * np.sqrt(n))
    start = time.perf_counter()
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    sample = pooled[np.random.default_rng(0).choice(n, min(n, 50 * nlist), replace=False)]
    ivf.train(sample)
    ivf.add(pooled)
    build_s = time.perf_counter() - start
    flat = faiss.IndexFlatIP(dim)
    flat.add(pooled)
    result: dict = {"docs": n, "nlist": nlist, "build_s": build_s, "ram_bytes_ivf": n * (dim * 4 + 8) + nlist * dim * 4}
    configs: list[tuple[str, object, object]] = [
        (f"IVF nprobe={p}", ivf, lambda sel, p=p: faiss.SearchParametersIVF(sel=sel, nprobe=p)) for p in (1, 8, 32)
    ]
    configs.append(("Flat (exact)", flat, lambda sel: faiss.SearchParameters(sel=sel)))
    for name, index, params in configs:
        rows = []
        for q in meta["queries"]:
            sel = faiss.IDSelectorRange(q["offset"], q["offset"] + q["docs"])
            vec = np.asarray([q["query"]], dtype=np.float32)
            t0 = time.perf_counter()
            _, ids = index.search(vec, 10, params=params(sel))
            ms = (time.perf_counter() - t0) * 1e3
            rows.append({"ms": ms, "recall": recall([int(i) for i in ids[0] if i >= 0], q["exact"])})
        result[name] = by_class(meta, rows)
    return result


def run_qdrant(meta: dict, tokens: np.ndarray, work: Path, batch: int) -> dict:
    import qdrant_edge as qe

    path = work / "qdrant"
    shutil.rmtree(path, ignore_errors=True)
    n, t, dim = tokens.shape
    users = np.zeros(n, dtype=np.int64)
    for u, user in enumerate(meta["users"]):  # laid out user by user
        users[user["offset"] : user["offset"] + user["docs"]] = u
    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(
            size=dim,
            distance=qe.Distance.Dot,
            multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
            datatype=qe.VectorStorageDatatype.Float16,
        ),
        # No HNSW graph (m=0): the comparison is exact search, which needs none.
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000, max_indexing_threads=1),
        max_search_threads=1,
    )
    shard = qe.EdgeShard.create(str(path), config)
    shard.update(qe.UpdateOperation.create_field_index("user", qe.PayloadSchemaType.Integer))
    start = time.perf_counter()
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        vectors = tokens[lo:hi].astype(np.float32).tolist()
        points = [qe.Point(i, vectors[i - lo], {"user": int(users[i])}) for i in range(lo, hi)]
        shard.update(qe.UpdateOperation.upsert_points(points))
        if lo // batch % 20 == 0:
            print(f"qdrant-edge: {hi}/{n} points", file=sys.stderr, flush=True)
    shard.flush()
    feed_s = time.perf_counter() - start
    start = time.perf_counter()
    shard.optimize()
    optimize_s = time.perf_counter() - start
    rows = []
    for q in meta["queries"]:
        request = qe.QueryRequest(
            limit=10,
            query=qe.Query.Nearest(q["query_tokens"]),
            filter=qe.Filter(must=[qe.FieldCondition(key="user", match=qe.MatchValue(q["user"]))]),
            params=qe.SearchParams(exact=True),
        )
        t0 = time.perf_counter()
        hits = shard.query(request)
        ms = (time.perf_counter() - t0) * 1e3
        rows.append({"ms": ms, "recall": recall([int(h.id) for h in hits], q["exact_maxsim"])})
    disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    shard.close()
    return {
        "docs": n,
        "feed_docs_per_s": n / feed_s,
        "optimize_s": optimize_s,
        "disk_bytes": disk,
        "exact multivector, filtered by user": by_class(meta, rows),
    }


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("numpy", "faiss-cpu", "qdrant-edge-py"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} missing")
    return ", ".join(found)


def table(rows: list[dict]) -> str:
    out = "| docs/user | queries | p50 ms | recall@10 vs exact |\n|---:|---:|---:|---:|\n"
    for r in rows:
        out += f"| {r['docs_per_user']} | {r['queries']} | {r['ms_p50']:.3f} | {r['recall_at_10']:.2f} |\n"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=Path("bench/work/stream/export"))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--qdrant-batch", type=int, default=1000)
    parser.add_argument("--no-qdrant", action="store_true")
    args = parser.parse_args()
    meta, pooled, tokens = load(args.export)
    report: dict = {"command": " ".join(sys.argv), "docs": meta["docs"], "dim": meta["dim"], "tokens": meta["tokens"]}
    md = f"# Per-user search with global indexes filtered by user\n\n`python3 {report['command']}`\n\n"
    md += f"Packages: {versions()}.\n\n"
    md += f"{meta['docs']} documents ({meta['tokens']} x {meta['dim']} token vectors, pooled {meta['dim']}), the queries of `cellar-bench stream`; one thread; warm caches (in memory).\n\n"
    try:
        report["faiss"] = run_faiss(meta, pooled)
        f = report["faiss"]
        md += f"## faiss over pooled vectors ({f['nlist']} lists, built in {f['build_s']:.1f} s, ~{f['ram_bytes_ivf'] / 1e6:.0f} MB RAM)\n\n"
        for name in [k for k in f if k.startswith(("IVF", "Flat"))]:
            md += f"### {name}\n\n{table(f[name])}\n"
    except ImportError as e:
        report["faiss"] = f"not available: {e}"
        md += f"faiss: not available ({e})\n\n"
    if not args.no_qdrant:
        try:
            report["qdrant_edge"] = run_qdrant(meta, tokens, args.export.parent, args.qdrant_batch)
            q = report["qdrant_edge"]
            md += f"## qdrant-edge, exact multivector (MaxSim, f16) filtered by user\n\nFed at {q['feed_docs_per_s']:.0f} docs/s, optimized in {q['optimize_s']:.1f} s, {q['disk_bytes'] / 1e6:.0f} MB on disk.\n\n{table(q['exact multivector, filtered by user'])}\n"
        except ImportError as e:
            report["qdrant_edge"] = f"not available: {e}"
            md += f"qdrant-edge: not available ({e})\n\n"
    warm = by_class(meta, [{"ms": q["stream_warm_ms"], "recall": 1.0} for q in meta["queries"]])
    md += f"## For reference: the streaming collection, same queries, MaxSim, warm\n\n{table(warm)}\n"
    report["stream_warm"] = warm
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stream-global.json").write_text(json.dumps(report, indent=2))
    (args.out / "stream-global.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
