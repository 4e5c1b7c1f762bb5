"""One experiment, from Python: chunk -> index -> retrieve -> rerank -> abstain -> metrics.

No side effects beyond the embedding cache: tracking (MLflow) lives in ``tracking.py`` and the
Hydra entry point in ``app.py``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ragexp.answer.base import Answerer, AnswerInput, answer_columns, answer_metrics
from ragexp.answer.extractive import ExtractiveAnswerer
from ragexp.answer.judge import Judge, NoJudge
from ragexp.data import units
from ragexp.data.datasets import Dataset
from ragexp.errors import InvalidValue
from ragexp.evaluation import measures as measures_mod
from ragexp.evaluation import metrics
from ragexp.evaluation.docrank import rank_documents
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import Embedder, EmbedderIdentity
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore, stage_key
from ragexp.records import Chunk, Qrels, Ranking, ordered
from ragexp.stages.abstain import AbstainResult, AbstainSignal, evaluate_abstain
from ragexp.stages.chunking import Chunker
from ragexp.stages.rerankers import Reranker
from ragexp.stages.retrievers import Retriever
from ragexp.text.analysis import tokenize

log = logging.getLogger(__name__)
LATENCY_SAMPLE = 200


@dataclass
class RunResult:
    metrics: dict[str, float]
    per_question: pd.DataFrame
    abstain: AbstainResult | None
    ranking: Ranking
    chunks: list[Chunk]
    identity: EmbedderIdentity | None
    resources: Resources = field(repr=False)
    judged: Ranking = field(default_factory=dict, repr=False)  # at the scoring unit
    qrels: Qrels = field(default_factory=dict, repr=False)  # at the scoring unit
    tags: dict[str, str] = field(default_factory=dict)


def chunked(dataset: Dataset, chunker: Chunker, stages: StageStore,
            docs: list | None = None) -> tuple[list[Chunk], str]:
    """``(chunks, their stage key)``: the dataset's documents (``docs`` if already read)
    chunked, or the chunks an earlier job or run stored under the same key (data fingerprint +
    dataset type + chunker + ragexp code; see ``stagestore.py``)."""
    key = stage_key("chunks", dataset.fingerprint() if stages.enabled else "",
                    type(dataset).__qualname__, getattr(dataset, "level", ""),
                    f"{type(chunker).__module__}.{chunker!r}")
    return stages.get("chunks", key, lambda: chunker.chunk(
        dataset.documents() if docs is None else docs)), key


def rank(retriever: Retriever, reranker: Reranker, resources: Resources,
         queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
    """Retrieve deep enough for the reranker's head, rerank, keep the best ``k`` per query.
    The one ranking path shared by evaluation, latency measurement and serving. Raises
    ``ValueError`` for ``k < 1`` (``[:k]`` would silently drop items or keep none)."""
    found = retrieve(retriever, reranker, queries, k, cached)
    return rerank_top(reranker, resources, queries, found, k)


def retrieve(retriever: Retriever, reranker: Reranker, queries: dict[str, str], k: int,
             cached: bool = True) -> Ranking:
    """The first half of :func:`rank`: retrieve ``max(k, reranker.top_n)`` items per query (the
    reranker's whole head). Raises ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise InvalidValue(f"k must be >= 1, got {k}")
    return retriever.search(queries, max(k, reranker.top_n), cached)


def rerank_top(reranker: Reranker, resources: Resources, queries: dict[str, str],
               found: Ranking, k: int) -> Ranking:
    """The second half of :func:`rank`: rerank ``found`` and keep the best ``k`` per query."""
    ranking = reranker.rerank(queries, found, resources)
    return {q: {c: scores[c] for c in ordered(scores)[:k]} for q, scores in ranking.items()}


def run_experiment(dataset: Dataset, chunker: Chunker, make_embedder: Callable[[], Embedder],
                   make_retriever: Callable[[Resources], Retriever], reranker: Reranker,
                   signal: AbstainSignal, *, answerer: Answerer | None = None,
                   judge: Judge | None = None,
                   cache: EmbeddingCache | None = None, k: int = 100,
                   measures: tuple[measures_mod.Measure, ...] = measures_mod.DEFAULT,
                   budget: float = 0.125, folds: int = 5, bm25_k1: float = 1.5,
                   bm25_b: float = 0.75, bm25_method: str = "lucene", bm25_delta: float = 0.5,
                   progress: bool = True, stages: StageStore | None = None) -> RunResult:
    """``stages`` reuses chunks, tokens, BM25 and vectors built by earlier jobs (see
    ``stagestore.py``); None builds everything."""
    measures_mod.check_depth(k, measures)
    stages = stages or StageStore(enabled=False)
    queries, docs = dataset.queries(), dataset.documents()
    start = time.perf_counter()
    chunks, chunks_key = chunked(dataset, chunker, stages, docs)
    chunk_s = time.perf_counter() - start
    qrels = dataset.qrels(chunks)
    log.info("%d documents -> %d chunks; %d questions", len(docs), len(chunks), len(queries))
    res = Resources(chunks, make_embedder, cache or EmbeddingCache(), bm25_k1, bm25_b, progress,
                    bm25_method=bm25_method, bm25_delta=bm25_delta, stages=stages,
                    chunks_key=chunks_key)
    res.timings["time.chunk_s"] = chunk_s
    retriever = make_retriever(res)
    texts = {q.qid: q.text for q in queries}
    unit_of = units.unit_of(chunks, dataset.unit)

    def rank_judged(batch: dict[str, str], cached: bool = True) -> tuple[Ranking, Ranking]:
        """(ranking of the scoring unit, chunk ranking): per section or document, each unit by
        its best chunk (MaxP) with k distinct units; per chunk, the k-deep chunk ranking."""
        if dataset.unit != "chunk":
            return rank_documents(lambda qs, depth: rank(retriever, reranker, res, qs, depth,
                                                         cached), batch, k, unit_of)
        ranked = rank(retriever, reranker, res, batch, k, cached)
        return ranked, ranked

    start = time.perf_counter()
    judged, ranking = rank_judged(texts)
    res.timings["time.search_all_s"] = time.perf_counter() - start
    res.timings.update(_latency(rank_judged, texts, res))

    scores = metrics.per_query(judged, qrels, measures)
    results = metrics.aggregate(scores, queries)

    confidence = signal.compute(texts, ranking, res)
    abstain = None
    if any(not q.answerable for q in queries) and any(q.answerable for q in queries):
        abstain = evaluate_abstain(confidence, queries, signal.name, budget, folds)
        results.update(abstain.metrics())
    else:
        log.warning("no abstain curve: the golden set needs answerable and unanswerable questions")

    threshold = abstain.threshold if abstain is not None else float("-inf")
    answerer = answerer or ExtractiveAnswerer()
    inputs = [AnswerInput(q.text, [chunks[res.position[c]] for c in ordered(ranking[q.qid])],
                          confidence[q.qid], threshold) for q in queries]
    answers = dict(zip([q.qid for q in queries], answerer.answer(inputs, res.bm25, progress)))
    judged_units = {item for rel in qrels.values() for item in rel}
    chunks_of: dict[str, list[str]] = {}
    for c in chunks:  # only the judged units': a corpus has far more units than judgements
        unit = unit_of[c.chunk_id]
        if unit in judged_units:
            chunks_of.setdefault(unit, []).append(c.chunk_id)
    relevant = {q: {c for item, grade in rel.items() if grade > 0 for c in chunks_of.get(item, [])}
                for q, rel in qrels.items()}
    results.update(answer_metrics(answers, {q.qid: q.answerable for q in queries}, relevant))
    graded = (judge or NoJudge()).assess(queries, list(answers.values()),
                                         res.by_id, progress)
    results.update(graded.metrics)

    results.update(without_terms(docs, res, queries))
    results.update({key: float(v) for key, v in res.timings.items()})
    results.update({"cache.hits": float(res.cache.hits), "cache.misses": float(res.cache.misses),
                    "index.chunks": float(len(chunks))})
    results.update(stages.counts())  # with reuse off too: everything built, and said so
    log.info("stages: %s", ", ".join(f"{k} {v}" for k, v in stages.events.items()))
    table = _per_question(queries, judged, qrels, scores, confidence, abstain, measures)
    for column, values in {**answer_columns(list(answers.values())), **graded.columns}.items():
        table[column] = values
    table["cited_relevant"] = [  # how many cited chunks hold evidence (report.html's failures)
        sum(c in relevant.get(q.qid, set()) for c in answers[q.qid].cited_chunks) for q in queries]
    return RunResult(results, table, abstain, ranking, chunks,
                     res.embedder.identity if res.embedder_used else None, res, judged, qrels,
                     graded.tags)


def without_terms(docs, res: Resources, queries) -> dict[str, float]:
    """Counts of documents, chunks and questions that yield no terms (``text.tokenize``: empty,
    punctuation or stopwords only). They can only score 0 (BM25) or cosine 0 (hash embedder), so
    a run reports them, with a warning naming the first few, rather than measuring them silently."""
    lengths = res.terms.lengths()
    chunks = res.chunks
    with_terms = {chunks[i].doc_id for i in np.flatnonzero(lengths)}
    empty = {"documents": [d.doc_id for d in docs if d.doc_id not in with_terms],
             "questions": [q.qid for q in queries if not tokenize(q.text)]}
    for what, ids in empty.items():
        if ids:
            log.warning("%d %s have no terms (empty, or stopwords only) and can only score 0: "
                        "%s", len(ids), what, ", ".join(ids[:5]))
    return {"data.docs_without_terms": float(len(empty["documents"])),
            "data.chunks_without_terms": float((lengths == 0).sum()),
            "data.queries_without_terms": float(len(empty["questions"]))}


def _latency(rank_judged: Callable, texts: dict[str, str], res: Resources) -> dict:
    """Per-query serving latency (ms): each query alone, query embedding not cached. A first
    stage that an earlier job of this sweep already searched for the query on the same index is
    replayed with its measured time (``Resources.searched_alone``); ``time.query_replayed``
    counts the queries whose first stage was replayed."""
    qids = list(texts)[:LATENCY_SAMPLE]
    times, replayed = [], 0
    for qid in qids:
        res.replayed_s, before = 0.0, res.replayed
        start = time.perf_counter()
        rank_judged({qid: texts[qid]}, cached=False)
        times.append((time.perf_counter() - start + res.replayed_s) * 1000)
        replayed += res.replayed > before
    if not times:
        return {}
    return {"time.query_p50_ms": float(np.percentile(times, 50)),
            "time.query_p95_ms": float(np.percentile(times, 95)),
            "time.query_replayed": float(replayed)}


def _per_question(queries, ranking, qrels, scores, confidence, abstain,
                  measures) -> pd.DataFrame:
    """One row per question; one column per measure, keyed like the metric (empty when the
    question was not scored)."""
    rows = []
    for q in queries:
        ranked = ordered(ranking.get(q.qid, {}))
        rel = qrels.get(q.qid, {})
        s = confidence.get(q.qid)
        rows.append({
            "id": q.qid, "kind": q.kind, "question": q.text,
            "first_relevant_rank": metrics.first_relevant_rank(ranked, rel) if rel else None,
            **{m.key: scores[q.qid][m.key] if q.qid in scores else None for m in measures},
            "abstain_signal": s,
            "refused": (s < abstain.threshold) if abstain is not None and s is not None else None,
            "top_item": ranked[0] if ranked else None,
        })
    return pd.DataFrame(rows)
