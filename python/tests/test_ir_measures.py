"""Cellar's metrics against ir_measures (trec_eval semantics via pytrec_eval) on graded qrels.

The rankings come from `Index.search(..., k=100)` and are written as a TREC run whose scores
derive from the rank (strictly decreasing), so no tool can reorder ties. Requires
`pip install ir-measures`; the test fails, rather than skips, without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cellar

try:
    import ir_measures
    from ir_measures import RR, R, Success, nDCG
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("these tests need ir_measures: pip install ir-measures") from e

MEASURES = {"nDCG@10": nDCG @ 10, "MRR@10": RR @ 10, "R@100": R @ 100, "S@5": Success @ 5}


def write_run(path: Path, rankings: dict[str, list[str]]) -> None:
    with open(path, "w") as f:
        for qid, ranked in rankings.items():
            for rank, doc in enumerate(ranked):
                f.write(f"{qid} Q0 {doc} {rank + 1} {len(ranked) - rank} cellar\n")


def write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    with open(path, "w") as f:
        for qid, judged in qrels.items():
            for doc, grade in judged.items():
                f.write(f"{qid} 0 {doc} {grade}\n")


@pytest.mark.parametrize("mode", ["hybrid", "rerank", "bm25", "dense", "dense-exact"])
def test_metrics_match_ir_measures(index: cellar.Index, queries, qrels, tmp_path: Path, mode: str) -> None:
    grades = {g for judged in qrels.values() for g in judged.values()}
    assert grades == {0, 1, 2}, "the fixture must exercise graded and non-relevant judgments"
    rankings = {qid: index.search(text, k=100, mode=mode).ids for qid, text in queries.items()}
    assert all(rankings.values())
    write_run(tmp_path / "run.trec", rankings)
    write_qrels(tmp_path / "qrels.trec", qrels)
    run = list(ir_measures.read_trec_run(str(tmp_path / "run.trec")))
    judged = list(ir_measures.read_trec_qrels(str(tmp_path / "qrels.trec")))
    expected = ir_measures.calc_aggregate(list(MEASURES.values()), judged, run)

    ours = index.evaluate(queries, qrels, mode=mode, k=100)
    assert ours["queries"] == len(queries)
    for name, measure in MEASURES.items():
        assert ours[name] == pytest.approx(expected[measure], abs=1e-6), (mode, name, ours[name], expected[measure])
