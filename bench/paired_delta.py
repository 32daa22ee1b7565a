"""Is a difference in nDCG@10 between two runs of the same queries more than noise?

Per-query nDCG@10 of two TREC run files against one qrels file (ir_measures, trec_eval
semantics), then the mean difference B - A with a paired bootstrap 95% interval (the queries
resampled with replacement, 10,000 times, seeded) and the share of resamples in which B is
below A by more than a margin.

    python3 bench/paired_delta.py QRELS.tsv A.run B.run [--margin 0.005]

QRELS is BEIR's `qrels/<split>.tsv` (query-id, corpus-id, score, with a header line); runs are
what `cellar eval --run-dir` writes. Exits 2 on unreadable input.
"""

import argparse
import sys

import ir_measures
import numpy as np
from ir_measures import nDCG

RESAMPLES = 10_000
SEED = 7


def read_qrels(path):
    qrels = []
    with open(path) as f:
        for n, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if n == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # BEIR's header line
            if len(parts) != 3:
                raise ValueError(f"{path}:{n + 1}: expected query-id, corpus-id, score")
            qrels.append(ir_measures.Qrel(parts[0], parts[1], int(parts[2])))
    return qrels


def per_query(qrels, run_path):
    run = list(ir_measures.read_trec_run(run_path))
    return {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("qrels")
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--margin", type=float, default=0.005)
    args = parser.parse_args()
    try:
        qrels = read_qrels(args.qrels)
        a, b = per_query(qrels, args.a), per_query(qrels, args.b)
    except (OSError, ValueError) as e:
        print(f"paired_delta: {e}", file=sys.stderr)
        sys.exit(2)
    judged = sorted({q.query_id for q in qrels})
    # A judged query a run does not answer scores 0, as trec_eval does.
    x = np.array([a.get(q, 0.0) for q in judged])
    y = np.array([b.get(q, 0.0) for q in judged])
    d = y - x
    rng = np.random.default_rng(SEED)
    means = d[rng.integers(0, len(d), size=(RESAMPLES, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    print(f"queries {len(d)}: nDCG@10 A {x.mean():.4f}, B {y.mean():.4f}, B - A {d.mean():+.4f}")
    print(f"paired bootstrap 95% interval of B - A: [{lo:+.4f}, {hi:+.4f}]")
    print(f"queries where B is higher / lower / equal: {(d > 0).sum()} / {(d < 0).sum()} / {(d == 0).sum()}")
    print(f"share of resamples with B - A < -{args.margin}: {(means < -args.margin).mean():.3f}")


if __name__ == "__main__":
    main()
