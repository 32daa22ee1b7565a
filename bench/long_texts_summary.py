"""The document-length choice of issue 18.1 side by side: reads the `cellar-bench fusion` reports
of bench/fusion.sh (one per variant: cut at 256, cut at 512, windows of 256, passages of 256
scored by the best one) and prints, per
collection, what each variant stored and how rerank and hybrid scored, then the worst margin of
every fixed fusion setting over all collections and variants.

    python3 bench/long_texts_summary.py bench/results/fusion-t256.json bench/results/fusion-t512.json \
        bench/results/fusion-w256.json bench/results/fusion-p256.json > bench/results/long-texts.md
"""
import json
import sys

reports = [json.load(open(p)) for p in sys.argv[1:]]
if not reports:
    sys.exit("usage: long_texts_summary.py REPORT.json...")


def variant(report):
    t = report["collections"][0]["truncation"]
    return f"{t['doc_overflow']} at {t['doc_max_tokens']}"


def row(collection, name):
    return next((r for r in collection["rows"] if r["system"] == name), None)


print("# Long documents: cut at 256, cut at 512, windows of 256, or passages of 256 (MaxP) (issue 18.1)\n")
print("From `bench/fusion.sh` (the reports `bench/results/fusion-*.md`), summarised by")
print(f"`python3 bench/long_texts_summary.py {' '.join(sys.argv[1:])}`.")
print(f"Machine: {reports[0]['cpu_model']}, {reports[0]['cores']} cores; commit {reports[0]['git_commit']}.\n")
print("Fused rows: fixed settings (z at α 0.3 was the default before issue 18, 0.4 after), over each")
print("index's default candidates; nDCG@10 on each collection's test split.\n")
names = [c["name"] for c in reports[0]["collections"]]
for name in names:
    print(f"## {name}\n")
    print("| documents | cut | tokens cut | windowed or split | token vectors | vectors MiB | BM25 | dense | rerank | hybrid z α=0.30 | hybrid z α=0.40 | hybrid z α=0.50 | hybrid z_peak α=0.30 | hybrid rrf α=0.50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        c = next(c for c in r["collections"] if c["name"] == name)
        t = c["truncation"]
        long = t["long_docs"] or {"cut": "?", "tokens_cut": "?", "windowed": "?"}
        cells = [row(c, s) for s in ["BM25", "dense (pooled, exact)", "rerank (MaxSim over BM25's candidates)",
                                     "z α=0.30 (fixed)", "z α=0.40 (fixed)", "z α=0.50 (fixed)",
                                     "z_peak α=0.30 (fixed)", "rrf α=0.50 (fixed)"]]
        scores = " | ".join("-" if x is None else f"{x['ndcg_at_10']:.3f}" for x in cells)
        print(f"| {variant(r)} | {long['cut']} | {long['tokens_cut']} | {long['windowed']} | {t['tokens']:,} | "
              f"{t['vectors_bytes'] / 2**20:.1f} | {scores} |")
    print()
print("## Worst margin over the better input, every collection and variant\n")
print("| fusion | α | " + " | ".join(variant(r) for r in reports) + " | worst |")
print("|---|---|" + "---|" * (len(reports) + 1))
settings = [(s["fusion"], s["alpha"]) for s in reports[0]["safety"]]
table = []
for fusion, alpha in settings:
    worst = []
    for r in reports:
        s = next((s for s in r["safety"] if s["fusion"] == fusion and abs(s["alpha"] - alpha) < 1e-6), None)
        worst.append(None if s is None else s["worst"])
    known = [w for w in worst if w is not None]
    table.append((min(known) if known else float("-inf"), fusion, alpha, worst))
for overall, fusion, alpha, worst in sorted(table, key=lambda t: -t[0]):
    cells = " | ".join("-" if w is None else f"{w:+.3f}" for w in worst)
    print(f"| {fusion} | {alpha:.2f} | {cells} | {overall:+.3f} |")
