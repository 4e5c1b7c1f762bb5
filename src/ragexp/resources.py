"""Shared, lazily built resources of one run: the embedder, the embedding cache, BM25.

Stages receive this instead of building their own, so the model loads once (and only when a
stage needs it) and BM25 is fitted once for the retriever, the abstain signal and ``explain``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ragexp.bm25 import BM25Index
from ragexp.cache import EmbeddingCache
from ragexp.embedders import Embedder
from ragexp.records import Chunk
from ragexp.text import tokenize


@dataclass
class Resources:
    chunks: list[Chunk]
    embedder_factory: Callable[[], Embedder]
    cache: EmbeddingCache = field(default_factory=EmbeddingCache)
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    progress: bool = True
    bm25_method: str = "lucene"
    bm25_delta: float = 0.5
    query_memory: int = 0  # > 0: query vectors live in an in-memory LRU of this many questions
    #                        and never reach the disk cache (serving); 0: the disk cache
    timings: dict[str, float] = field(default_factory=dict)
    _embedder: Embedder | None = None
    _terms: list[list[str]] | None = None
    _bm25: BM25Index | None = None
    _passages: np.ndarray | None = None
    _recent: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        if not self.chunks:
            raise ValueError("no chunks to index: the corpus produced nothing under this chunking")
        self.position = {c.chunk_id: i for i, c in enumerate(self.chunks)}

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self.embedder_factory()
        return self._embedder

    @property
    def embedder_used(self) -> bool:
        return self._embedder is not None

    @property
    def terms(self) -> list[list[str]]:
        """Each chunk's analysed terms (``text.tokenize``), computed once for BM25, the lexical
        reranker and the lexical abstain signal."""
        if self._terms is None:
            self._terms = [tokenize(c.text) for c in self.chunks]
        return self._terms

    @property
    def bm25(self) -> BM25Index:
        if self._bm25 is None:
            start = time.perf_counter()
            self._bm25 = BM25Index(self.bm25_k1, self.bm25_b, self.bm25_method,
                                   self.bm25_delta).fit_terms(self.terms)
            self.add_time("time.index_s", start)
        return self._bm25

    def passage_vectors(self) -> np.ndarray:
        if self._passages is None:
            start = time.perf_counter()
            self._passages = self.cache.embed(self.embedder, [c.text for c in self.chunks],
                                              "passage", progress=self.progress)
            self.add_time("time.embed_s", start)
        return self._passages

    def query_vectors(self, texts: list[str], cached: bool = True) -> np.ndarray:
        if not cached:
            return self.embedder.embed(texts, "query")
        if self.query_memory > 0:
            return self._remembered(texts)
        return self.cache.embed(self.embedder, texts, "query", progress=False)

    def _remembered(self, texts: list[str]) -> np.ndarray:
        """Query vectors through a bounded LRU: at most ``query_memory`` questions are kept."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._recent))
        if todo:
            for text, vec in zip(todo, self.embedder.embed(todo, "query")):
                self._recent[text] = vec
        out = np.stack([self._recent[t] for t in texts]) if texts else np.zeros(
            (0, self.embedder.identity.dim), dtype=np.float32)
        for t in texts:
            self._recent.move_to_end(t)
        while len(self._recent) > self.query_memory:
            self._recent.popitem(last=False)
        return out

    def add_time(self, key: str, start: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - start
