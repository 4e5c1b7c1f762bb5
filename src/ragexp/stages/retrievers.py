"""Retrievers: index chunks once, answer a batch of queries with a ``Ranking``.

``dense`` (FAISS over the run's embedder), ``bm25`` (sparse BM25, ``bm25.method``) and ``hybrid`` (RRF
over whichever of the two are switched on; see ``fusion.py``). Hybrid is a hypothesis to
measure, not a default: the ablation set runs each alone and fused.
"""

from __future__ import annotations

from typing import Protocol

from ragexp.errors import InvalidValue
from ragexp.index.resources import Resources
from ragexp.records import Ranking, ordered
from ragexp.stages.fusion import rrf


class Retriever(Protocol):
    name: str

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking: ...


def _check_k(k: int) -> None:
    """A depth below 1 would cut rankings to nothing or, as a negative slice, drop their end."""
    if k < 1:
        raise InvalidValue(f"retrieval depth k must be >= 1, got {k}")


class DenseRetriever:
    name = "dense"

    def __init__(self, resources: Resources, name: str = "dense"):
        self.resources = resources
        self.index = resources.dense_index()

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        """``cached`` False (latency measurement) embeds the queries and searches uncached,
        once per sweep (``Resources.searched_alone``); True may reuse the ranking an earlier
        job of the sweep computed (``Resources.searched``)."""
        _check_k(k)
        if not queries:
            return {}
        if not cached:
            return self.resources.searched_alone("dense_search", queries, k,
                                                 lambda: self._search(queries, k, cached))
        return self.resources.searched("dense_search", queries, k,
                                       lambda: self._search(queries, k, cached))

    def _search(self, queries: dict[str, str], k: int, cached: bool) -> Ranking:
        qids = list(queries)
        vectors = self.resources.query_vectors([queries[q] for q in qids], cached=cached)
        scores, ids = self.index.search(vectors, k)
        chunks = self.resources.chunks
        # A zero query vector (nothing to embed) ties every chunk at cosine 0: no ranking.
        empty = ~vectors.any(axis=1)
        return {q: {} if blank else {chunks[i].chunk_id: float(s)
                                     for s, i in zip(srow, irow) if i >= 0}
                for q, srow, irow, blank in zip(qids, scores, ids, empty)}


class BM25Retriever:
    name = "bm25"
    block = 64

    def __init__(self, resources: Resources, name: str = "bm25"):
        self.resources = resources
        self.index = resources.bm25

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        """``cached`` False (latency measurement) scores uncached, once per sweep
        (``Resources.searched_alone``); True may reuse the ranking an earlier job of the sweep
        computed (``Resources.searched``)."""
        _check_k(k)
        if not queries:
            return {}
        if not cached:
            return self.resources.searched_alone("bm25_search", queries, k,
                                                 lambda: self._search(queries, k))
        return self.resources.searched("bm25_search", queries, k,
                                       lambda: self._search(queries, k))

    def _search(self, queries: dict[str, str], k: int) -> Ranking:
        qids = list(queries)
        chunks, out = self.resources.chunks, {}
        # Blocks of queries: scoring holds (queries x candidate documents) values, gigabytes
        # for 1,000 queries over a million passages if done at once.
        for start in range(0, len(qids), self.block):
            block = qids[start:start + self.block]
            idx, scores = self.index.top_k([queries[q] for q in block], k)
            # Every chunk holding a query term, even one scoring 0 (see bm25.py); -1 pads rows.
            out.update({q: {chunks[i].chunk_id: float(s) for i, s in zip(irow, srow) if i >= 0}
                        for q, irow, srow in zip(block, idx, scores)})
        return out


class HybridRetriever:
    """RRF over the enabled signals, each retrieving ``depth`` candidates."""

    def __init__(self, resources: Resources, dense: bool = True, bm25: bool = True,
                 rrf_k: float = 60.0, depth: int = 100, name: str = "hybrid"):
        parts: list[Retriever] = []
        if bm25:
            parts.append(BM25Retriever(resources))
        if dense:
            parts.append(DenseRetriever(resources))
        if not parts:
            raise InvalidValue("retriever has every signal switched off (retriever.dense=false and "
                               "retriever.bm25=false): nothing would be retrieved; enable at least "
                               "one")
        if depth < 1:
            raise InvalidValue(f"retriever.depth must be >= 1, got {depth}")
        self.parts, self.rrf_k, self.depth = parts, rrf_k, depth
        self.name = name

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        _check_k(k)
        rankings = [p.search(queries, max(k, self.depth), cached) for p in self.parts]
        fused = rrf(rankings, k=self.rrf_k, depth=self.depth)
        return {q: {i: s[i] for i in ordered(s)[:k]} for q, s in fused.items()}
