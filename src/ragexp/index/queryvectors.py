"""Query vectors of one embedder (``QueryVectors``): through the embedding cache, through a
bounded in-memory LRU (serving: questions never reach the disk cache), or embedded as serving
embeds them for the latency measurement (``SearchReplay.embedded_alone``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import Embedder
from ragexp.index.replay import SearchReplay


class QueryVectors:
    """``query_vectors(texts, cached=True) -> (len(texts), dim)`` float32 for ``embedder()``
    (called at the first query, so a run that embeds no query loads no model). ``memory`` > 0:
    vectors live in an in-memory LRU of that many questions and never reach ``cache``
    (serving); 0: ``cache``."""

    def __init__(self, embedder: Callable[[], Embedder], cache: EmbeddingCache,
                 replay: SearchReplay, memory: int = 0):
        self.embedder, self.cache, self.replay, self.memory = embedder, cache, replay, memory
        self.recent: OrderedDict[str, np.ndarray] = OrderedDict()

    def __call__(self, texts: list[str], cached: bool = True) -> np.ndarray:
        """(len(texts), dim) query vectors: through the embedding cache (or the serving LRU,
        ``memory``), or, ``cached`` False (the latency measurement), embedded as serving
        embeds them (``SearchReplay.embedded_alone``)."""
        if not cached:
            return self.replay.embedded_alone(self.embedder(), texts)
        if self.memory > 0:
            return self._remembered(texts)
        return self.cache.embed(self.embedder(), texts, "query", progress=False)

    def _remembered(self, texts: list[str]) -> np.ndarray:
        """Query vectors through a bounded LRU: at most ``memory`` questions are kept."""
        embedder = self.embedder()
        todo = list(dict.fromkeys(t for t in texts if t not in self.recent))
        if todo:
            for text, vec in zip(todo, embedder.embed(todo, "query")):
                self.recent[text] = vec
        out = np.stack([self.recent[t] for t in texts]) if texts else np.zeros(
            (0, embedder.identity.dim), dtype=np.float32)
        for t in texts:
            self.recent.move_to_end(t)
        while len(self.recent) > self.memory:
            self.recent.popitem(last=False)
        return out
