"""Reranker attribution (``evaluation/attribution.py``) on a hand-labelled case, and logged by a
run with a reranker, not by one without."""

from __future__ import annotations

import math

import pytest

from ragexp.evaluation.attribution import oracle_order, rerank_attribution
from ragexp.evaluation.measures import DEFAULT, parse

# a is highly relevant (2), b relevant (1); the first stage puts b 2nd and a 4th.
QRELS = {"q": {"a": 2, "b": 1}, "r": {"c": 1}}
FIRST = {"q": {"x": 5.0, "b": 4.0, "y": 3.0, "a": 2.0, "z": 1.0},
         "r": {"c": 2.0, "w": 1.0}}


def test_oracle_sorts_only_the_head_by_grade():
    assert oracle_order(["x", "b", "y", "a", "z"], QRELS["q"], 3) == ["b", "x", "y", "a", "z"]
    assert oracle_order(["x", "b", "y", "a", "z"], QRELS["q"], 5) == ["a", "b", "x", "y", "z"]


def test_attribution_by_hand():
    reranked = {"q": {"y": 3.0, "b": 2.0, "x": 1.0, "a": 0.0, "z": -1.0}, "r": {"w": 2.0, "c": 1.0}}
    out = rerank_attribution(FIRST, reranked, QRELS, 3, parse("RR@10"))
    # ceiling at 3: q finds b of {a, b} (R 1/2, Success 1); r finds c (1, 1)
    assert out["rerank.ceiling.r_at_3"] == pytest.approx((0.5 + 1.0) / 2)
    assert out["rerank.ceiling.success_at_3"] == 1.0
    # RR@10: first stage q 1/2, r 1; oracle q 1 (b first), r 1; reranked q 1/2, r 1/2
    assert out["rerank.first_stage.rr_at_10"] == pytest.approx(0.75)
    assert out["rerank.oracle.rr_at_10"] == pytest.approx(1.0)
    assert out["rerank.reranked.rr_at_10"] == pytest.approx(0.5)
    assert out["rerank.realised_share"] == pytest.approx(0.5 / 1.0)
    # gain share: (0.5 - 0.75) / (1.0 - 0.75): the reranker gave back all the room and more
    assert out["rerank.gain_share"] == pytest.approx(-1.0)


def test_oracle_ndcg_by_hand():
    # top 5 reordered: a (2), b (1): DCG = 2 + 1/log2(3) = the ideal: nDCG 1 for q.
    out = rerank_attribution(FIRST, FIRST, {"q": QRELS["q"]}, 5, parse("nDCG@10"))
    first = (1 / math.log2(3) + 2 / math.log2(5)) / (2 + 1 / math.log2(3))
    assert out["rerank.first_stage.ndcg_at_10"] == pytest.approx(first)
    assert out["rerank.oracle.ndcg_at_10"] == pytest.approx(1.0)
    assert out["rerank.realised_share"] == pytest.approx(first)  # no reranking: the first stage
    assert out["rerank.gain_share"] == 0.0  # ... closes none of the room above it


def test_no_relevant_item_in_reach_has_no_share():
    out = rerank_attribution({"q": {"x": 1.0}}, {"q": {"x": 1.0}}, {"q": {"a": 1}}, 1,
                             parse("nDCG@10"))
    assert out["rerank.ceiling.r_at_1"] == 0.0 and "rerank.realised_share" not in out
    assert "rerank.gain_share" not in out  # the first stage already reaches the oracle (0)


def test_a_run_logs_attribution_only_with_a_reranker(golden, docs, tmp_path):
    from ragexp.config.build import Stages
    from ragexp.data import shipped
    from ragexp.data.datasets import MarkdownDataset
    from ragexp.index.bm25 import BM25Params
    from ragexp.index.cache import EmbeddingCache
    from ragexp.index.embedders import HashEmbedder
    from ragexp.run.pipeline import run_experiment
    from ragexp.stages.abstain import LexicalSignal
    from ragexp.stages.chunking import MarkdownChunker
    from ragexp.stages.rerankers import LexicalReranker, NoReranker
    from ragexp.stages.retrievers import BM25Retriever

    dataset = MarkdownDataset(corpus_dir=shipped.path("handbook/corpus"),
                              questions=shipped.path("handbook/golden"))
    got = {}
    for reranker in (LexicalReranker(top_n=20), NoReranker()):
        stages = Stages(MarkdownChunker(), lambda: HashEmbedder(dim=64), BM25Retriever, reranker,
                        LexicalSignal(), cache=EmbeddingCache(str(tmp_path)), bm25=BM25Params())
        got[reranker.name] = run_experiment(dataset, stages, progress=False,
                                            measures=(*DEFAULT, parse("R@20"),
                                                      parse("Success@20"))).metrics
    with_r = got["lexical"]
    assert with_r["rerank.reranked.ndcg_at_10"] == pytest.approx(with_r["ndcg_at_10"])
    assert with_r["rerank.realised_share"] == pytest.approx(
        with_r["ndcg_at_10"] / with_r["rerank.oracle.ndcg_at_10"])
    # the first stage is the run without the reranker
    assert with_r["rerank.first_stage.ndcg_at_10"] == pytest.approx(got["none"]["ndcg_at_10"])
    assert with_r["rerank.ceiling.r_at_20"] == pytest.approx(got["none"]["r_at_20"])
    assert with_r["rerank.ceiling.success_at_20"] == pytest.approx(got["none"]["success_at_20"])
    assert with_r["rerank.oracle.ndcg_at_10"] >= max(with_r["ndcg_at_10"],
                                                     with_r["rerank.first_stage.ndcg_at_10"])
    assert not any(key.startswith("rerank.") for key in got["none"])
