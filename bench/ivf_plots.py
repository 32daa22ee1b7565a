#!/usr/bin/env python3
"""Plots of the IVF studies (`bench/ivf-studies.sh`): reads bench/results/ivf-*.json, writes PNGs
beside them. Usage: python3 bench/ivf_plots.py [RESULTS_DIR]"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def recall(results: Path) -> None:
    doc = load(results / "ivf-recall-scifact.json")
    if not doc:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    variants = sorted({(r["rescore"], r["oversample"]) for r in doc["rows"]})
    for rescore, over in variants:
        rows = [r for r in doc["rows"] if (r["rescore"], r["oversample"]) == (rescore, over)]
        label = f"rescored, shortlist {over:g}x" if rescore else "1-bit codes only"
        ax.plot([r["nprobe"] for r in rows], [r["recall_at_100"] for r in rows], marker="o", label=label)
    ax.set(xlabel="nprobe (clusters probed)", ylabel="recall@100 vs exact", title="IVF recall, SciFact pooled vectors")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results / "ivf-recall-scifact.png", dpi=120)


def prefetch(results: Path) -> None:
    for name in ["ivf-prefetch-scifact", "ivf-prefetch-scifact-ssd80"]:
        doc = load(results / f"{name}.json")
        if not doc:
            continue
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for nprobe in sorted({r["nprobe"] for r in doc["rows"]}):
            rows = [r for r in doc["rows"] if r["nprobe"] == nprobe and r["step"] is not None]
            off = next(r for r in doc["rows"] if r["nprobe"] == nprobe and r["step"] is None)
            steps = [100 * r["step"] for r in rows]
            ax1.plot(steps, [r["hit_rate"] for r in rows], marker="o", label=f"nprobe {nprobe}")
            line = ax2.plot(steps, [r["search_ms_mean"] for r in rows], marker="o", label=f"nprobe {nprobe}")
            ax2.axhline(off["search_ms_mean"], color=line[0].get_color(), linestyle="--", linewidth=1)
        ax1.set(xlabel="prefetch step (% of nprobe)", ylabel="hit rate", ylim=(0, 1.05), title="prefetch hit rate")
        ax2.set(xlabel="prefetch step (% of nprobe)", ylabel="mean search ms", title="search time (dashed: no prefetch)")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(results / f"{name}.png", dpi=120)


def rerank_k(results: Path) -> None:
    doc = load(results / "ivf-rerank-k-scifact.json")
    if not doc:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in dict.fromkeys(r["mode"] for r in doc["rows"]):
        rows = [r for r in doc["rows"] if r["mode"] == mode]
        ax.plot([r["rerank_k"] for r in rows], [r["ndcg_vs_full"] for r in rows], marker="o", label=mode)
    ax.set_xscale("log")
    ax.set(xlabel="rerank_k", ylabel="nDCG@10 / nDCG@10 at full re-rank", title="partial re-ranking, SciFact")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results / "ivf-rerank-k-scifact.png", dpi=120)


def ram(results: Path) -> None:
    doc = load(results / "ivf-ram.json")
    if not doc:
        return
    rows = doc["rows"]["caps"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for reader in ["mmap", "direct"]:
        sel = [r for r in rows if r["reader"] == reader and r["cap_mib"] is not None and r.get("p95_ms") is not None]
        if sel:
            ax.plot([r["cap_mib"] for r in sel], [r["p95_ms"] for r in sel], marker="o", label=f"{reader} (P95)")
    base = next((r for r in rows if r["reader"] == "ram"), None)
    if base:
        ax.axhline(base["p95_ms"], color="grey", linestyle="--", label="ram, uncapped (P95)")
    ax.set_xscale("log")
    ax.set(xlabel="memory cap (MiB, page cache counted)", ylabel="P95 ms per query", title="IVF latency against RAM")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results / "ivf-ram.png", dpi=120)


def main() -> None:
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    for plot in (recall, prefetch, rerank_k, ram):
        plot(results)


if __name__ == "__main__":
    main()
