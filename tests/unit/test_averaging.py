"""Which queries are averaged: trec_eval's rule on judged data. A query judged with nothing
relevant counts with 0, a query missing from the run counts with 0, a query with no judgements
is left out and reported. Checked against ir_measures.calc_aggregate on randomised cases and on
the issue's BEIR example."""

from __future__ import annotations

import logging

import ir_measures
import numpy as np
import pytest
from conftest import jsonl, write_tree
from ir_measures import Qrel, ScoredDoc

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset
from ragexp.evaluation.measures import DEFAULT, parse_all
from ragexp.evaluation.metrics import aggregate, per_query
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.records import Query
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import WholeDocumentChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

MEASURES = parse_all(["Success@1", "Success@10", "R@5", "R@100", "P@10", "RR@10", "AP@100",
                      "nDCG@10", "nDCG@100"])


def _case(seed: int):
    """Qrels and a run where some judged queries have nothing relevant, some judged queries are
    missing from the run, and some run queries have no judgements. Scores have no ties (so
    every ir_measures provider orders alike)."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(int(rng.integers(20, 60))):
        qid = f"q{q}"
        docs = [f"d{j}" for j in range(int(rng.integers(5, 150)))]
        role = rng.choice(["normal", "all_zero", "not_run", "unjudged"], p=[.6, .15, .1, .15])
        if role != "unjudged":
            judged = rng.choice(docs, size=int(rng.integers(1, min(20, len(docs)) + 1)),
                                replace=False)
            grades = (np.zeros(len(judged), int) if role == "all_zero"
                      else rng.integers(0, 4, size=len(judged)))
            qrels[qid] = {str(d): int(g) for d, g in zip(judged, grades)}
        if role != "not_run":
            scores = rng.permutation(len(docs)) + rng.random()
            run[qid] = {d: float(s) for d, s in zip(docs, scores)}
    return qrels, run


@pytest.mark.parametrize("seed", range(6))
def test_means_equal_ir_measures_calc_aggregate(seed):
    qrels, run = _case(seed)
    roles = {"all_zero": [q for q, r in qrels.items() if not any(r.values())],
             "not_run": [q for q in qrels if q not in run],
             "unjudged": [q for q in run if q not in qrels]}
    assert all(roles.values()), roles  # every kind of query is in the mix
    ours = aggregate(per_query(run, qrels, MEASURES), [])
    ref = ir_measures.calc_aggregate(
        [ir_measures.parse_measure(m.name) for m in MEASURES],
        [Qrel(q, d, g) for q, rel in qrels.items() for d, g in rel.items()],
        [ScoredDoc(q, d, s) for q, sc in run.items() for d, s in sc.items()])
    for m in MEASURES:
        assert ours[m.key] == pytest.approx(ref[ir_measures.parse_measure(m.name)], abs=1e-9), \
            m.name


def test_per_query_scores_zero_for_all_zero_and_unretrieved_queries():
    scores = per_query({"a": {"x": 1.0}}, {"a": {"x": 0, "y": 0}, "b": {"x": 1}}, DEFAULT)
    assert scores == {"a": {m.key: 0.0 for m in DEFAULT}, "b": {m.key: 0.0 for m in DEFAULT}}
    assert aggregate(scores, [Query("a", ""), Query("b", "")])["ndcg_at_10"] == 0.0


def test_beir_query_judged_all_zero_counts_with_zero(tmp_path, caplog):
    corpus = [{"_id": "d1", "title": "", "text": "zebra calves are born in the wet season"},
              {"_id": "d2", "title": "", "text": "penguins huddle together in winter storms"},
              {"_id": "d3", "title": "", "text": "volcanoes erupt when magma reaches the top"},
              {"_id": "d4", "title": "", "text": "tides follow the moon"},
              {"_id": "d5", "title": "", "text": "deserts receive very little rain"}]
    queries = [{"_id": "q1", "text": "when are zebra calves born"},
               {"_id": "q2", "text": "how do penguins keep warm"},
               {"_id": "q3", "text": "a question nobody judged"}]
    qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\nq2\td3\t0\n"
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(corpus),
                                          "queries.jsonl": jsonl(queries),
                                          "qrels/test.tsv": qrels})
    with caplog.at_level(logging.WARNING, logger="ragexp.data.datasets"):
        ds = BeirDataset(path=str(root))
    said = [r.getMessage() for r in caplog.records]
    left_out = [m for m in said if "left out" in m]
    zero = [m for m in said if "count in every mean with 0" in m]
    assert len(left_out) == 1 and "q3" in left_out[0] and "no judgements" in left_out[0]
    assert len(zero) == 1 and "q2" in zero[0] and "every grade 0" in zero[0]
    assert "q3" not in zero[0] and "q2" not in left_out[0]

    result = run_experiment(ds, Stages(WholeDocumentChunker(), lambda: HashEmbedder(),
                                       BM25Retriever, NoReranker(), LexicalSignal(),
                                       cache=EmbeddingCache(str(tmp_path / "c"))),
                            measures=parse_all(["nDCG@10"]), k=10, progress=False)
    run = [ScoredDoc(q, d, s) for q, sc in result.ranking.items() for d, s in sc.items()]
    ref = ir_measures.calc_aggregate([ir_measures.parse_measure("nDCG@10")],
                                     [Qrel("q1", "d1", 1), Qrel("q2", "d2", 0),
                                      Qrel("q2", "d3", 0)], run)
    assert result.metrics["ndcg_at_10"] == pytest.approx(list(ref.values())[0])
    assert result.metrics["ndcg_at_10"] == pytest.approx(0.5)  # the right value
    assert set(result.per_question["id"]) == {"q1", "q2"}


@pytest.mark.parametrize("n_unanswerable,n_unjudged", [(2, 1), (0, 3)])
def test_beir_left_out_counts_match_the_scoring_line(tmp_path, caplog, n_unanswerable,
                                                     n_unjudged):
    """Trial item 10: a file of 8 queries with 2 unanswerable and 1 unjudged said "1 of 6
    queries" and then "scoring 7 of 7"; the warning now names both counts and the questions
    left (8 - 1 = 7, what the scoring line counts)."""
    corpus = [{"_id": f"d{i}", "title": "", "text": f"document number {i} about topic {i}"}
              for i in range(8)]
    queries = [{"_id": f"q{i}", "text": f"topic {i}",
                **({"answerable": False} if i < n_unanswerable else {})} for i in range(8)]
    judged = [f"q{i}" for i in range(n_unanswerable, 8 - n_unjudged)]
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td{q[1:]}\t1\n" for q in judged)
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(corpus),
                                          "queries.jsonl": jsonl(queries),
                                          "qrels/test.tsv": qrels})
    with caplog.at_level(logging.WARNING, logger="ragexp.data.datasets"):
        ds = BeirDataset(path=str(root), unanswerable_field="answerable",
                         unanswerable_value=False)
    (left_out,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    answerable, kept = 8 - n_unanswerable, 8 - n_unjudged
    assert left_out.startswith(
        f"{n_unjudged} of the {answerable} answerable queries (of 8 in queries.jsonl) have no "
        f"judgements in split 'test' and are left out of the questions and of every mean, "
        f"leaving {kept} questions (unanswerable ones included): ")
    assert len(ds.queries()) == kept
