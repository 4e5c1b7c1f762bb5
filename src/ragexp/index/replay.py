"""A sweep's first-stage work kept for its later jobs (``SearchReplay``): a ranking searched
for a batch of queries on an index, the same search timed as serving runs it, and a batch of
query vectors embedded with nothing cached. Each depends only on the index (its stage key), the
query texts and the depth, never on what sweeps vary after retrieval (reranker, fusion, abstain
settings), so a later job reads it and, for the timed ones, adds the measured seconds."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ragexp.index.embedders import Embedder
from ragexp.index.stagestore import StageStore, stage_key


class SearchReplay:
    """First-stage rankings and timed query embeddings kept in ``stages`` (in memory) for the
    next job of a sweep. ``share`` False (serving): nothing is kept, every call computes.
    ``replayed_s`` is the first-stage seconds a replay added since the caller last set it to 0
    (the latency sample does, per query), ``replayed`` the batches replayed; ``warming`` is set
    inside ``warm_up``. One object serves a run's resources and their views
    (``Resources.with_embedder``), so a hybrid part's replays count on the run's."""

    def __init__(self, stages: StageStore, share: bool = True):
        self.stages, self.share = stages, share
        self.replayed_s = 0.0
        self.replayed = 0
        self.warming = False

    def searched(self, stage: str, queries: dict[str, str], k: int,
                 search: Callable[[], dict], index: str) -> dict:
        """A first-stage ranking of this batch of ``queries`` at depth ``k`` (``search()``),
        kept in memory (the latest per ``stage``) for the next job of a sweep under the index's
        stage key ``index``, the query texts and ``k``. Returns a copy, so callers may change
        what they get."""
        if not self.share:
            return search()
        texts = hashlib.sha256(json.dumps(list(queries.items())).encode()).hexdigest()
        ranking = self.stages.get(stage, stage_key(stage, index, texts, k), search, disk=False)
        return {q: dict(scores) for q, scores in ranking.items()}

    @contextmanager
    def warm_up(self) -> Iterator[None]:
        """A block whose searches alone (``searched_alone``, ``embedded_alone``) keep nothing
        and count no replay: the latency measurement's untimed first query, which loads what a
        server loads before it answers (a model whose vectors all came from the cache loads at
        its first query: 0.6-0.8 s for MiniLM). Kept, that first query's seconds would be
        replayed as the query's latency in every later job of the sweep. What an earlier job
        kept is read (the job that kept it loaded what it needs), so a later job's warm-up
        costs its reranker's work only."""
        self.warming = True
        try:
            yield
        finally:
            self.warming = False

    def searched_alone(self, stage: str, queries: dict[str, str], k: int,
                       search: Callable[[], dict], index: str) -> dict:
        """A first-stage ranking of ``queries`` computed as serving computes it (nothing
        cached: the latency measurement), timed. The first job of a sweep to search this batch
        on this index (stage key ``index``) searches and keeps (seconds, ranking); a later job
        that only differs in query-time settings gets the same ranking and adds the kept
        seconds to ``replayed_s``, so its measured latency still counts the first stage, as
        measured once in this process on the same index and queries; each replay adds 1 to
        ``replayed``. The kept seconds count a query embedding replayed inside the search
        (``embedded_alone``) at its measured time.
        Without a stage store (a lone run, serving) every call searches; in ``warm_up`` a
        call keeps nothing and counts nothing."""
        if not self.share:
            return search()
        book = self.stages.scratch(f"{stage}_alone",
                                   stage_key(f"{stage}_alone", index, k), dict)
        text = json.dumps(list(queries.items()))
        held = book.get(text)
        if self.warming:
            return {q: dict(s) for q, s in held[1].items()} if held else search()
        if held is None:
            start, replayed_before = time.perf_counter(), self.replayed_s
            ranking = search()
            took = time.perf_counter() - start + self.replayed_s - replayed_before
            book[text] = held = (took, ranking)
        else:
            self.replayed_s += held[0]
            self.replayed += 1
        return {q: dict(scores) for q, scores in held[1].items()}

    def embedded_alone(self, embedder: Embedder, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) query vectors embedded with nothing cached, timed: the first job
        of a sweep to embed these texts with this embedder (its identity key) embeds them and
        keeps (seconds, vectors); a later job, on any index (another chunking, another depth),
        gets the same vectors, adds the kept seconds to ``replayed_s`` and 1 to ``replayed``,
        as ``searched_alone`` does for a whole search: a query's embedding time does not depend
        on the index it then searches. Without a stage store (a lone run, serving) every call
        embeds; in ``warm_up`` a call keeps nothing and counts nothing."""
        if not self.share:
            return embedder.embed(texts, "query")
        key = embedder.identity.key
        book = self.stages.scratch(f"query_alone.{key}", stage_key("query_alone", key), dict)
        text = json.dumps(texts)
        held = book.get(text)
        if self.warming:
            return held[1].copy() if held else embedder.embed(texts, "query")
        if held is None:
            start = time.perf_counter()
            vectors = embedder.embed(texts, "query")
            book[text] = held = (time.perf_counter() - start, vectors)
        else:
            self.replayed_s += held[0]
            self.replayed += 1
        return held[1].copy()

    def kept(self, stage: str, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """``compute()`` kept in memory under ``stage`` and ``key`` for the next job of a sweep
        (a per-query statistic that depends on the index and the texts only, such as the best
        BM25 score), as a copy; computed each call when nothing is shared."""
        if not self.share:
            return compute()
        return self.stages.get(stage, key, compute, disk=False).copy()
