"""run_experiment end to end on the handbook with hash embeddings: the metric keys, and metrics
that agree with the per-question table and with a recomputation from the returned ranking."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import CORPUS, GOLDEN

from ragexp.config.build import Stages
from ragexp.data.datasets import MarkdownDataset
from ragexp.data.relevance import span_qrels
from ragexp.evaluation.measures import DEFAULT
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.records import ordered
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import DenseSignal, LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.rerankers import LexicalReranker, NoReranker
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part

ANSWERABLE = ("identifier", "semantic", "procedural", "factual")
MEASURE_KEYS = [m.key for m in DEFAULT]
COLUMNS = {"id", "kind", "first_relevant_rank", *MEASURE_KEYS, "abstain_signal", "refused",
           "top_item"}


@pytest.fixture(scope="module")
def dataset():
    return MarkdownDataset(str(CORPUS), str(GOLDEN))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("embeddings"))


@pytest.fixture(scope="module")
def bm25_run(dataset, cache_dir):
    return run_experiment(dataset, Stages(MarkdownChunker(), lambda: HashEmbedder(), BM25Retriever,
                                          LexicalReranker(top_n=20), LexicalSignal(),
                                          cache=EmbeddingCache(cache_dir)), progress=False)


def hybrid_50(res):
    """RRF (k=60) of dense and BM25, each 50 deep."""
    return HybridRetriever(res, {"dense": Part(DenseRetriever, 50),
                                 "bm25": Part(BM25Retriever, 50)}, RRF())


@pytest.fixture(scope="module")
def hybrid_run(dataset, cache_dir):
    return run_experiment(dataset, Stages(MarkdownChunker(), lambda: HashEmbedder(),
                                          hybrid_50, NoReranker(),
                                          DenseSignal(), cache=EmbeddingCache(cache_dir)),
                          progress=False)


@pytest.fixture(params=["bm25", "hybrid"])
def run(request, bm25_run, hybrid_run):
    return {"bm25": bm25_run, "hybrid": hybrid_run}[request.param]


def test_metric_keys(run):
    m = run.metrics
    for key in MEASURE_KEYS:
        assert 0.0 <= m[key] <= 1.0, key
        for kind in ANSWERABLE:
            assert 0.0 <= m[f"{key}.{kind}"] <= 1.0, f"{key}.{kind}"
        assert f"{key}.unanswerable" not in m
    for key in ("auc", "threshold", "refused_unanswerable", "refused_answerable",
                "cv.refused_unanswerable", "cv.refused_answerable"):
        assert math.isfinite(m[f"abstain.{key}"])
    for key in ("time.search_all_s", "time.query_p50_ms", "time.query_p95_ms", "time.index_s"):
        assert m[key] > 0, key
    assert m["time.query_p95_ms"] >= m["time.query_p50_ms"]
    assert m["index.chunks"] == len(run.chunks)
    assert {"cache.hits", "cache.misses"} <= set(m)
    assert all(isinstance(v, float) for v in m.values())


def test_ranking_is_cut_to_k(run, golden):
    assert set(run.ranking) == {q.qid for q in golden}
    assert all(0 < len(r) <= 100 for r in run.ranking.values())


def test_per_question_table(run, golden):
    table = run.per_question
    assert COLUMNS <= set(table.columns)
    assert list(table["id"]) == [q.qid for q in golden]
    assert list(table["kind"]) == [q.kind for q in golden]
    for row in table.itertuples():
        if row.kind == "unanswerable":
            assert row.rr_at_10 is None or np.isnan(row.rr_at_10)
            continue
        rank = row.first_relevant_rank
        if rank is None or (isinstance(rank, float) and np.isnan(rank)):
            assert row.rr_at_10 == 0.0
        else:
            assert row.rr_at_10 == pytest.approx(1 / rank if rank <= 10 else 0.0)
        assert row.top_item == ordered(run.ranking[row.id])[0]
        assert row.refused == (row.abstain_signal < run.abstain.threshold)


def test_metrics_agree_with_the_table(run):
    table, m = run.per_question, run.metrics
    answerable = table[table["kind"] != "unanswerable"]
    assert answerable["rr_at_10"].mean() == pytest.approx(m["rr_at_10"])
    assert answerable["ndcg_at_10"].mean() == pytest.approx(m["ndcg_at_10"])
    for kind in ANSWERABLE:
        part = table[table["kind"] == kind]
        assert part["rr_at_10"].mean() == pytest.approx(m[f"rr_at_10.{kind}"])
    una = table[table["kind"] == "unanswerable"]
    assert una["refused"].astype(bool).mean() == pytest.approx(m["abstain.refused_unanswerable"])
    assert answerable["refused"].astype(bool).mean() == pytest.approx(
        m["abstain.refused_answerable"])


def test_metrics_agree_with_a_recomputation(run, golden):
    qrels = span_qrels(golden, run.chunks)
    answerable = [q for q in golden if q.answerable]
    for k in (1, 3, 5, 10):
        hits = [any(c in qrels[q.qid] for c in ordered(run.ranking[q.qid])[:k])
                for q in answerable]
        recalls = [len(set(ordered(run.ranking[q.qid])[:k]) & set(qrels[q.qid]))
                   / len(qrels[q.qid]) for q in answerable]
        assert run.metrics[f"success_at_{k}"] == pytest.approx(np.mean(hits))
        assert run.metrics[f"r_at_{k}"] == pytest.approx(np.mean(recalls))
    ident = [q for q in answerable if q.kind == "identifier"]
    hits = [any(c in qrels[q.qid] for c in ordered(run.ranking[q.qid])[:1]) for q in ident]
    assert run.metrics["success_at_1.identifier"] == pytest.approx(np.mean(hits))


def test_the_runs_retrieve_something_relevant(bm25_run, hybrid_run):
    # Far better than chance (a random top 10 of ~235 chunks hits about 5% of the time).
    assert bm25_run.metrics["success_at_10"] > 0.5
    assert hybrid_run.metrics["success_at_10"] > 0.5


def test_embedder_is_built_only_when_needed(bm25_run, hybrid_run, golden):
    assert bm25_run.identity is None
    assert (bm25_run.metrics["cache.hits"], bm25_run.metrics["cache.misses"]) == (0, 0)
    assert "time.embed_s" not in bm25_run.metrics
    assert hybrid_run.identity == HashEmbedder().identity
    assert hybrid_run.metrics["time.embed_s"] > 0
    signal = hybrid_run.per_question["abstain_signal"]
    assert ((signal >= -1 - 1e-6) & (signal <= 1 + 1e-6)).all()


def test_cache_counts_and_a_warm_rerun(hybrid_run, dataset, cache_dir, golden):
    # Cold cache: every passage and every distinct question is embedded once; the dense
    # abstain signal then reads the question vectors back from the cache.
    n_texts = len(hybrid_run.chunks) + len({q.text for q in golden})
    assert hybrid_run.metrics["cache.misses"] == n_texts
    assert hybrid_run.metrics["cache.hits"] == len(golden)
    again = run_experiment(dataset, Stages(MarkdownChunker(), lambda: HashEmbedder(),
                                           hybrid_50, NoReranker(),
                                           DenseSignal(), cache=EmbeddingCache(cache_dir)),
                           progress=False)
    assert again.metrics["cache.misses"] == 0
    assert again.metrics["cache.hits"] == n_texts + len(golden)
    for key in MEASURE_KEYS:
        assert again.metrics[key] == hybrid_run.metrics[key]
    assert again.ranking == hybrid_run.ranking


def test_answer_settings_trade_answers_for_refusals(dataset, cache_dir, bm25_run):
    """A stricter answer.min_overlap can only refuse more: the answer rate falls (or holds)
    and refusals of unanswerable questions rise (or hold); the default run sits between."""
    from ragexp.answer.extractive import ExtractiveAnswerer as Answerer

    def run(min_overlap):
        return run_experiment(dataset, Stages(MarkdownChunker(), lambda: HashEmbedder(),
                                              BM25Retriever, LexicalReranker(top_n=20),
                                              LexicalSignal(),
                                              answerer=Answerer(min_overlap=min_overlap),
                                              cache=EmbeddingCache(cache_dir)),
                              progress=False).metrics

    loose, strict = run(0.1), run(0.6)
    default = bm25_run.metrics  # min_overlap 0.3
    for key, sign in (("answer.rate_answerable", -1), ("answer.refused_unanswerable", 1)):
        assert sign * (strict[key] - default[key]) >= 0 and sign * (default[key] - loose[key]) >= 0
    assert strict["answer.rate_answerable"] < loose["answer.rate_answerable"]
    with pytest.raises(ValueError, match="min_overlap"):
        Answerer(min_overlap=1.5)
