"""Ranking metrics: differential against ir_measures (trec_eval via pytrec_eval) on randomised
runs with many ties, plus hand cases for aggregation and document collapsing."""

from __future__ import annotations

import math

import ir_measures
import numpy as np
import pytest
from ir_measures import RR, Qrel, ScoredDoc

from ragexp.evaluation.measures import DEFAULT, parse_all
from ragexp.evaluation.metrics import aggregate, first_relevant_rank, order_free, per_query
from ragexp.records import Query, ordered

# Every family at several cutoffs, each compared with trec_eval (RR@k is handled apart: below).
CHECKED = parse_all(["Success@1", "Success@3", "Success@10", "R@1", "R@5", "R@10", "R@100",
                     "P@1", "P@5", "P@20", "AP@10", "AP@100", "nDCG@1", "nDCG@10", "nDCG@100"])
REFERENCE = {m.key: ir_measures.parse_measure(m.name) for m in CHECKED}


def _random_case(seed: int, n_queries: int = 60):
    """Runs and graded qrels; scores drawn from a few values so ties are everywhere."""
    rng = np.random.default_rng(seed)
    ranking, qrels = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        n_docs = int(rng.integers(30, 201))
        # Unpadded ids, so string order ("doc10" < "doc9") matters for tie breaking.
        docs = [f"doc{j}" for j in range(n_docs)]
        if q % 3 == 0:
            scores = rng.normal(size=n_docs)
        else:
            scores = rng.integers(0, 1 + int(rng.integers(1, 6)), size=n_docs).astype(float)
        ranking[qid] = {d: float(s) for d, s in zip(docs, scores)}
        judged = list(rng.choice(docs, size=int(rng.integers(1, 25)), replace=False))
        judged += [f"unretrieved{j}" for j in range(int(rng.integers(0, 3)))]
        if q % 10 == 7:
            grades = [0] * len(judged)  # judged, nothing relevant
        else:
            grades = rng.integers(0, 4, size=len(judged)).tolist()
        qrels[qid] = {d: int(g) for d, g in zip(judged, grades)}
    return ranking, qrels


def _reference(ranking, qrels, measures):
    """``{qid: {measure: value}}`` from trec_eval through ir_measures' pytrec_eval provider."""
    qrel_rows = [Qrel(q, d, g) for q, rel in qrels.items() for d, g in rel.items()]
    run_rows = [ScoredDoc(q, d, s) for q, scores in ranking.items() for d, s in scores.items()]
    out: dict = {}
    for m in ir_measures.pytrec_eval.iter_calc(measures, qrel_rows, run_rows):
        out.setdefault(m.query_id, {})[m.measure] = m.value
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_query_equals_trec_eval(seed):
    ranking, qrels = _random_case(seed)
    judged = {q for q, rel in qrels.items() if any(g > 0 for g in rel.values())}
    assert 50 <= len(judged) < len(qrels)  # some all-zero queries are in the mix
    ours = per_query(ranking, qrels, (*CHECKED, *parse_all(["RR@10"])))
    ref = _reference(ranking, qrels, [*REFERENCE.values(), RR])
    for qid in qrels:  # all-zero queries too: trec_eval scores them 0
        assert set(ours[qid]) == {*REFERENCE, "rr_at_10"}
        for key, measure in REFERENCE.items():
            assert ours[qid][key] == pytest.approx(ref[qid][measure], abs=1e-6), (qid, key)
        # pytrec_eval has no RR@k; RR@10 is RR when the first hit is in the top 10.
        rr = ref[qid][RR]
        assert ours[qid]["rr_at_10"] == pytest.approx(rr if rr >= 0.1 - 1e-12 else 0.0, abs=1e-6)
    # The comparison is not vacuous: the metrics vary across queries.
    assert len({round(ours[q]["ndcg_at_10"], 6) for q in judged}) > 20
    assert {ours[q]["success_at_1"] for q in judged} == {0.0, 1.0}


def test_mrr_equals_ir_measures_rr_at_10_without_ties():
    # ir_measures computes RR@10 with its msmarco provider, which breaks ties by id ascending
    # (trec_eval: descending); without ties the two must agree exactly.
    rng = np.random.default_rng(7)
    ranking, qrels = {}, {}
    for q in range(60):
        docs = [f"d{j}" for j in range(int(rng.integers(30, 200)))]
        ranking[f"q{q}"] = dict(zip(docs, rng.permutation(len(docs)).astype(float)))
        qrels[f"q{q}"] = {d: 1 for d in rng.choice(docs, size=3, replace=False)}
    ours = per_query(ranking, qrels)
    run = [ScoredDoc(q, d, s) for q, sc in ranking.items() for d, s in sc.items()]
    qrel_rows = [Qrel(q, d, g) for q, rel in qrels.items() for d, g in rel.items()]
    ref = {m.query_id: m.value for m in ir_measures.iter_calc([RR @ 10], qrel_rows, run)}
    assert {q: ours[q]["rr_at_10"] for q in ranking} == pytest.approx(ref, abs=1e-9)
    assert len(set(ref.values())) > 3


def test_hand_computed_values():
    # ranked: c, b, a (ties broken by id descending, as trec_eval)
    ranking = {"q": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.5}}
    assert ordered(ranking["q"]) == ["c", "b", "a", "d"]
    rel = {"a": 1, "d": 3, "x": 2}
    scores = per_query(ranking, {"q": rel})["q"]
    assert scores["rr_at_10"] == pytest.approx(1 / 3)
    assert scores["success_at_1"] == 0.0 and scores["success_at_3"] == 1.0
    assert scores["r_at_3"] == pytest.approx(1 / 3)
    assert scores["r_at_5"] == pytest.approx(2 / 3)
    dcg = 1 / math.log2(4) + 3 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert scores["ndcg_at_10"] == pytest.approx(dcg / idcg)
    assert first_relevant_rank(ordered(ranking["q"]), rel) == 3
    assert first_relevant_rank(["c", "b"], rel) is None


def test_missing_ranking_scores_zero():
    scores = per_query({}, {"q": {"a": 1}})
    assert scores == {"q": {m.key: 0.0 for m in DEFAULT}}


def test_aggregate_overall_and_per_kind():
    ranking = {"q1": {"a": 2, "b": 1}, "q2": {"a": 2, "b": 1}, "q3": {"a": 2, "b": 1},
               "q4": {"a": 2, "b": 1}}
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"z": 1}, "q4": {"a": 1}}
    queries = [Query("q1", "", "identifier"), Query("q2", "", "identifier"),
               Query("q3", "", "semantic"), Query("q5", "", "unanswerable")]
    out = aggregate(per_query(ranking, qrels), queries)
    # q4 is not among the queries: it counts as the default kind, "general".
    assert out["rr_at_10"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert out["rr_at_10.identifier"] == pytest.approx(0.75)
    assert out["rr_at_10.semantic"] == 0.0
    assert out["rr_at_10.general"] == 1.0
    assert out["success_at_1.identifier"] == 0.5
    assert "rr_at_10.procedural" not in out and "rr_at_10.unanswerable" not in out
    kinds = {k.split(".", 1)[1] for k in out if "." in k}
    assert kinds == {"identifier", "semantic", "general"}
    assert len(out) == len(DEFAULT) * 4


def test_order_free_measures_are_those_no_order_of_every_unit_can_change():
    measures = parse_all(["R@1", "R@3", "Success@3", "P@3", "RR@10", "nDCG@10"])
    names = lambda found: [m.name for m in found]  # noqa: E731
    # three units, one relevant, all in the top 3: found by every order, first only by some
    assert names(order_free(measures, {"q": {"a": 1}}, ["a", "b", "c"])) == [
        "R@3", "Success@3", "P@3"]
    # one unit: it is every ranking, every measure is fixed
    assert names(order_free(measures, {"q": {"a": 1}}, ["a"])) == names(measures)
    # every unit relevant alike: any order is ideal; graded, nDCG (not RR) sees the order
    assert names(order_free(measures, {"q": {"a": 1, "b": 1}}, ["a", "b"])) == names(measures)
    assert "nDCG@10" not in names(order_free(measures, {"q": {"a": 2, "b": 1}}, ["a", "b"]))
    # one query with room for order is enough to keep a measure
    assert names(order_free(measures, {"q": {"a": 1}, "p": {"a": 1, "b": 1}}, ["a", "b"])) == [
        "R@3", "Success@3", "P@3"]
