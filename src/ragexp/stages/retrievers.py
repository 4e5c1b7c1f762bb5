"""Retrievers: index chunks once, answer a batch of queries with a ``Ranking``.

``dense`` (FAISS over the run's embedder), ``bm25`` (sparse BM25, ``bm25.method``) and ``hybrid``
(``retriever.parts``, a mapping of named retrievers, each cut to its own depth in judged units
and fused by the ``fusion`` group; see ``stages/fusion``). Hybrid is a hypothesis to measure,
not a default: the ablation set runs each part alone and fused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from ragexp import settings
from ragexp.data.docrank import rank_documents
from ragexp.errors import InvalidValue, listed
from ragexp.index.bm25 import BM25Params
from ragexp.index.cutoff import top_k_by_id
from ragexp.index.embedders import Embedder, EmbedderIdentity
from ragexp.index.resources import Resources, dense_index
from ragexp.index.stagestore import stage_key
from ragexp.records import Ranking, ordered
from ragexp.text.analysis import tokenize


SHOWN_TERMS = 8  # query terms a "no passage shares a term" message names


class Retriever(Protocol):
    """Ranks chunks for a batch of queries. ragexp's own retrievers also say why a query's
    ranking is empty (``why_none(query) -> str``, a clause), which ``ragexp search`` and
    ``ask`` print; a retriever without it gets a plain statement (``serving.engine``)."""

    name: str

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking: ...


class Fusion(Protocol):
    """Several rankings of the same queries (``{part name: Ranking}``) made into one."""

    name: str

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking: ...


def check_k(k: int) -> None:
    """A depth below 1 would cut rankings to nothing or, as a negative slice, drop their end."""
    if k < 1:
        raise InvalidValue(f"retrieval depth k must be >= 1, got {k}")


class DenseRetriever:
    """Cosine search of the run's dense index (the ``index`` group, ``Resources.index_spec``)
    with the run's embedder, or a hybrid part's own (``Resources.with_embedder``). It keeps
    what it searches with, taken from ``resources`` when built: the index's searcher from the
    registry (``index.resources.dense_index``), the query-embedding callable, the chunk order and the
    sweep's replay."""

    name = "dense"

    def __init__(self, resources: Resources, name: str = "dense"):
        self.spec = resources.index_spec
        self.index = dense_index(resources)
        self.query_vectors = resources.query_vectors
        self.replay = resources.replay
        self.chunks = resources.chunks
        # a hybrid part's own embedder (``Resources.with_embedder``) has stages of its own
        self.stage = resources.dense_stage("dense_search")
        # a search's stage key: the built index's key and its query-time settings
        self.key = stage_key("dense_search", resources.key(self.spec),
                             self.spec.search_params())

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        """``cached`` False (latency measurement) embeds the queries and searches uncached,
        once per sweep (``SearchReplay.searched_alone``); True may reuse the ranking an earlier
        job of the sweep computed (``SearchReplay.searched``)."""
        check_k(k)
        if not queries:
            return {}
        if not cached:
            return self.replay.searched_alone(self.stage, queries, k,
                                              lambda: self._search(queries, k, cached), self.key)
        return self.replay.searched(self.stage, queries, k,
                                    lambda: self._search(queries, k, cached), self.key)

    def why_none(self, query: str) -> str:
        """Why ``search`` ranks no chunk for ``query``, as a clause. Dense search ranks every
        chunk by cosine, whatever terms it shares with the query, so only two things leave a
        query with nothing: a zero query vector (left unranked, ``_search``: it is no nearer
        one passage than another; the hash embedder gives it to a text without terms), or an
        approximate index that visited no passage vector (``index.nprobe`` lists of an IVF
        index can all be empty)."""
        if not self.query_vectors([query]).any():
            backend = self.query_vectors.embedder().identity.backend
            terms = "" if tokenize(query) else (
                " (the analyser leaves it no term: it drops stopwords, punctuation and symbols)")
            return (f"the {backend} embedder turns the query into the zero vector{terms}, "
                    f"which is no nearer one passage than another, so dense retrieval ranks "
                    f"none")
        spec = self.spec
        if spec.exact:  # it ranks every chunk for a nonzero vector
            return "the dense index returned no passage for it"
        knobs = ", ".join(f"index.{key}={value}" for key, value in spec.search_params().items())
        return (f"the approximate {spec.name} index found no passage vector in the part of "
                f"it a query visits ({knobs}); raise that to search more of it")

    def _search(self, queries: dict[str, str], k: int, cached: bool) -> Ranking:
        qids = list(queries)
        vectors = self.query_vectors([queries[q] for q in qids], cached=cached)
        chunks = self.chunks
        # A zero query vector (nothing to embed) ties every chunk at cosine 0: no ranking.
        asked = np.flatnonzero(vectors.any(axis=1))
        if self.spec.exact:  # ties at the k-th score cut as trec_eval orders
            rows = top_k_by_id(lambda r, depth: self.index.search(vectors[asked[r]], depth),
                               len(asked), k, len(chunks), lambda i: chunks[i].chunk_id)
        else:  # an approximate index's own top k
            rows = list(zip(*self.index.search(vectors[asked], k)[::-1]))
        ranking: Ranking = {q: {} for q in qids}
        for row, (irow, srow) in zip(asked, rows):
            ranking[qids[row]] = {chunks[i].chunk_id: float(s) for s, i in zip(srow, irow)
                                  if i >= 0}
        return ranking


class BM25Retriever:
    """Sparse BM25 over the run's chunks (``index.bm25``). ``k1``, ``b``, ``method`` and
    ``delta`` left ``None`` are the run's ``bm25`` group; any one given fits an index of its own
    (``bm25_stage``), for a hybrid part such as ``{method: bm25l, k1: 1.2}`` beside the run's
    BM25. It keeps the built index from the registry (``Resources.index``), the chunk order and
    the sweep's replay. Raises ``InvalidValue`` for a value outside the ``bm25`` group's ranges
    (``BM25Params`` checks its own: ``k1 >= 0``, ``0 <= b <= 1``, ``delta >= 0``, a ``METHODS``
    name, bm25l's ``k1 + delta > 0``)."""

    name = "bm25"
    block = 64

    def __init__(self, resources: Resources, name: str = "bm25", k1: float | None = None,
                 b: float | None = None, method: str | None = None,
                 delta: float | None = None):
        own = {key: value for key, value in
               {"k1": k1, "b": b, "method": method, "delta": delta}.items() if value is not None}
        self.params = replace(resources.bm25_params, **own)  # BM25Params checks the ranges
        self.key = resources.key(self.params)
        # the run's parameters keep the stage names and keys every BM25 run has used
        stage = bm25_stage(self.params, resources.bm25_params, self.key)
        self.index = resources.index(self.params, stage)
        self.stage = f"{stage}_search"
        self.replay, self.chunks = resources.replay, resources.chunks

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        """``cached`` False (latency measurement) scores uncached, once per sweep
        (``SearchReplay.searched_alone``); True may reuse the ranking an earlier job of the
        sweep computed (``SearchReplay.searched``)."""
        check_k(k)
        if not queries:
            return {}
        if not cached:
            return self.replay.searched_alone(self.stage, queries, k,
                                              lambda: self._search(queries, k), self.key)
        return self.replay.searched(self.stage, queries, k,
                                    lambda: self._search(queries, k), self.key)

    def why_none(self, query: str) -> str:
        """Why ``search`` ranks no chunk for ``query``, as a clause: BM25 ranks exactly the
        chunks holding one of the query's terms (``text.analysis.tokenize``: lowercased,
        stopwords dropped, English words stemmed), so the query has no term, or no chunk holds
        any of its terms (which are named, at most ``SHOWN_TERMS``)."""
        terms = list(dict.fromkeys(tokenize(query)))
        if not terms:
            return ("the analyser leaves the query no term (it drops stopwords, punctuation "
                    "and symbols), and BM25 ranks only passages that share a term with it")
        return (f"no passage shares a term with the query: none holds any of its terms after "
                f"analysis (lowercased, stopwords dropped, English words stemmed): "
                f"{listed(terms, SHOWN_TERMS)}")

    def _search(self, queries: dict[str, str], k: int) -> Ranking:
        qids = list(queries)
        chunks, out = self.chunks, {}
        # Blocks of queries: scoring holds (queries x candidate documents) values, gigabytes
        # for 1,000 queries over a million passages if done at once.
        for start in range(0, len(qids), self.block):
            block = qids[start:start + self.block]
            texts = [queries[q] for q in block]

            def scored(r: np.ndarray, depth: int, texts: list[str] = texts):
                return self.index.top_k([texts[j] for j in r], depth)[::-1]

            # ties at the k-th score cut as trec_eval orders them (``index.cutoff``)
            rows = top_k_by_id(scored, len(block), k, len(chunks),
                               lambda i: chunks[i].chunk_id)
            # Every chunk holding a query term, even one scoring 0 (see bm25.py); -1 pads rows.
            out.update({q: {chunks[i].chunk_id: float(s) for i, s in zip(irow, srow) if i >= 0}
                        for q, (irow, srow) in zip(block, rows)})
        return out


def bm25_stage(params: BM25Params, run: BM25Params, key: str) -> str:
    """Stage name of the BM25 index fitted with ``params`` (stage key ``key``): ``bm25`` for
    the run's own (``run``), ``bm25_<8 hex digits of its key>`` for any other, so a hybrid
    part with parameters of its own neither reads nor evicts the run's index (a name MLflow
    accepts in ``stage.<name>.built``, whatever the method: ``bm25+`` has a ``+``)."""
    return "bm25" if params == run else f"bm25_{key[:8]}"


def parts_switched_on(on) -> list[str]:
    """A hybrid keeps at least one part on (``on``: the names, or parts, of those not null)."""
    if on:
        return []
    return ["retriever.parts has every part switched off (each set to null): the hybrid would "
            "fuse nothing; enable at least one"]


@settings.cross_field_rule
def hybrid_has_a_part(cfg) -> list[str]:
    """``parts_switched_on`` of ``retriever=hybrid``'s ``retriever.parts``."""
    retriever = cfg.get("retriever")
    parts = retriever.get("parts") if hasattr(retriever, "keys") else None
    if not hasattr(parts, "keys"):
        return []
    return parts_switched_on([name for name in parts if parts[name] is not None])


DEPTH = {"ge": 1}  # what a part's depth accepts (``config.schema.HybridPartConf`` too)


@dataclass(frozen=True)
class Part:
    """One part of a hybrid retriever (``retriever.parts.<name>``): ``retriever`` builds it on
    the run's ``Resources`` (a retriever config with ``_partial_: true``), and ``depth`` is how
    many of its best judged units per query go into fusion (chunks at ``dataset.unit=chunk``;
    distinct sections, documents or parents when chunks roll up to them, ``HybridRetriever``).
    ``embedder`` (a factory; the config names an ``embedder`` option, ``config.build`` composes it)
    gives the part resources of its own embedder over the same chunks
    (``Resources.with_embedder``): its passage and query vectors both come from that one
    embedder."""

    retriever: Callable[[Resources], Retriever]
    depth: int = field(default=100, metadata=DEPTH)
    embedder: Callable[[], Embedder] | None = None


class HybridRetriever:
    """The enabled ``parts`` (``{name: Part}``; a part set to ``None`` is off), each cut to its
    best ``depth`` judged units, fused by ``fusion`` and cut to ``k`` chunks. With the chunk as
    the unit (``resources.unit_of`` None) a part retrieves ``max(k, depth)`` chunks and keeps
    its best ``depth``. When chunk scores roll up to units (``resources.unit_of``: ``{chunk_id:
    unit id}``) a part is searched deeper until it holds ``depth`` distinct units, as a single
    retriever is (``docrank.rank_documents``), and keeps every chunk down to the best chunk of
    its ``depth``-th unit: its MaxP unit ranking is then its best ``depth`` units, where
    ``depth`` chunks could hold a single long document. Raises ``InvalidValue`` when every part
    is off or a depth is below 1."""

    def __init__(self, resources: Resources, parts: Mapping[str, Part | None], fusion: Fusion,
                 name: str = "hybrid"):
        on = {part: p for part, p in parts.items() if p is not None}
        settings.refuse(parts_switched_on(on) or [
            problem for part, p in on.items()
            for problem in settings.field_problems(f"retriever.parts.{part}.depth", p.depth,
                                                   DEPTH)])
        # a part with an embedder of its own searches a view of the resources with it
        self.views = {part: resources.with_embedder(p.embedder) for part, p in on.items()
                      if p.embedder}
        self.parts = {part: p.retriever(self.views.get(part, resources))
                      for part, p in on.items()}
        self.unit_of = resources.unit_of
        self.depths = {part: p.depth for part, p in on.items()}
        self.fusion, self.name = fusion, name

    def part_embedders(self) -> dict[str, EmbedderIdentity]:
        """``{part: identity}`` of each part with an embedder of its own that has run."""
        return {part: view.embedder.identity for part, view in self.views.items()
                if view.embedder_used}

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        check_k(k)
        rankings = {part: self._part_ranking(part, queries, k, cached) for part in self.parts}
        return _cut(self.fusion.fuse(rankings), k)

    def why_none(self, query: str) -> str:
        """Why ``search`` ranks no chunk for ``query``, as a clause: fusion keeps every chunk
        any part ranks, so each part ranked none, for its own reason (``why_none``)."""
        reasons = "; ".join(f"{part}: {why_none(retriever, query)}"
                            for part, retriever in self.parts.items())
        return f"no part of the hybrid retriever ranks a passage ({reasons})"

    def _part_ranking(self, part: str, queries: dict[str, str], k: int,
                      cached: bool) -> Ranking:
        """The chunks part ``part`` puts into fusion: its best ``depth`` judged units' worth."""
        retriever, depth = self.parts[part], self.depths[part]
        unit_of = self.unit_of
        if unit_of is None:
            return _cut(retriever.search(queries, max(k, depth), cached), depth)
        _, chunks = rank_documents(lambda qs, n: retriever.search(qs, n, cached), queries,
                                   depth, unit_of)
        return {q: _down_to_unit(scores, depth, unit_of) for q, scores in chunks.items()}


def why_none(retriever: Retriever, query: str) -> str:
    """Why ``retriever`` ranks no chunk for ``query``, as a clause: its own ``why_none(query)``,
    or a plain statement for a retriever without one (a user's own)."""
    explain = getattr(retriever, "why_none", None)
    return explain(query) if explain else f"retriever {retriever.name} ranked no passage for it"


def _cut(ranking: Ranking, depth: int) -> Ranking:
    """Each query's best ``depth`` items (``records.ordered``)."""
    return {q: {i: s[i] for i in ordered(s)[:depth]} for q, s in ranking.items()}


def _down_to_unit(scores: dict[str, float], depth: int,
                  unit_of: dict[str, str]) -> dict[str, float]:
    """One query's chunks (``{chunk_id: score}``) in rank order down to, and including, the best
    chunk of the ``depth``-th distinct unit (``unit_of``); all of them when they hold fewer."""
    seen: set[str] = set()
    out: dict[str, float] = {}
    for c in ordered(scores):
        seen.add(unit_of[c])
        out[c] = scores[c]
        if len(seen) == depth:
            break
    return out
