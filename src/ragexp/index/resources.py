"""Shared, lazily built resources of one run: the embedder, the embedding cache, the chunk
lookup, the stage store, and a registry of built indexes by stage key (``Index``: BM25, the
dense options of the ``index`` group, ``index/ann/``).

Retrievers are built on this, so the model loads once (and only when a stage needs it) and an
index is built once for the retriever, the abstain signal and ``explain``; the other stages
receive only what they read of it (a ``Passages`` view, a scorer).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.index import ann
from ragexp.index.base import Index
from ragexp.index.bm25 import BM25Index, BM25Params
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import BoundById, Embedder, TokenCounter
from ragexp.index.stagestore import StageStore, stage_key
from ragexp.records import Chunk
from ragexp.text.tokens import TokenMatrix

LATENCY_SAMPLE = 200  # queries timed alone by ``dense_facts``


class ChunksById(Mapping):
    """Read-only ``{chunk_id: Chunk}`` over a run's chunks through ``Resources.position``: the
    lookup a judge needs, without a second dict of every chunk (a million at scale)."""

    def __init__(self, chunks: list[Chunk], position: dict[str, int]):
        self._chunks, self._position = chunks, position

    def __getitem__(self, chunk_id: str) -> Chunk:
        return self._chunks[self._position[chunk_id]]

    def __iter__(self):
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)


@dataclass(frozen=True)
class Passages:
    """What a reranker or an abstain signal reads of a run's chunks, by chunk id, and nothing
    else of the run (``Resources.passages``): ``by_id`` (``{chunk_id: Chunk}``), ``terms(id)``
    (the chunk's analysed terms, in order), ``bm25()`` (the run's BM25 index: idf, coverage,
    score bound), ``best_bm25_scores(texts)`` ((len(texts),) the best BM25 score of each text,
    kept for a sweep's next job), ``vectors(ids)`` ((len(ids), dim) passage vectors) and
    ``query_vectors(texts)`` ((len(texts), dim), the same embedder). Each is built when first
    read: a run whose reranker reads text alone fits no BM25 and loads no model for it."""

    by_id: Mapping[str, Chunk]
    terms: Callable[[str], list[str]]
    bm25: Callable[[], BM25Index]
    best_bm25_scores: Callable[[list[str]], np.ndarray]
    vectors: Callable[[list[str]], np.ndarray]
    query_vectors: Callable[[list[str]], np.ndarray]


@dataclass
class Resources:
    chunks: list[Chunk]
    embedder_factory: Callable[[], Embedder]
    cache: EmbeddingCache = field(default_factory=EmbeddingCache)
    bm25_params: BM25Params = BM25Params()  # the run's ``bm25`` group, one value
    progress: bool = True
    query_memory: int = 0  # > 0: query vectors live in an in-memory LRU of this many questions
    #                        and never reach the disk cache (serving); 0: the disk cache
    timings: dict[str, float] = field(default_factory=dict)
    stages: StageStore = field(default_factory=lambda: StageStore(enabled=False))
    chunks_key: str = ""  # stage key of ``chunks``: what tokens, BM25 and vectors derive from
    index_spec: ann.IndexSpec = field(default_factory=ann.FlatSpec)  # the ``index`` group
    questions: dict[str, str] = field(default_factory=dict)  # {qid: text}, for ``BoundById``
    # {chunk_id: judged unit id} when chunk scores roll up to sections, documents or parents
    # (``Corpus.rolls_up``): a hybrid part's ``depth`` counts these units; None: the chunk is
    # the unit
    unit_of: dict[str, str] | None = None
    _embedder: Embedder | None = None
    _terms: TokenMatrix | None = None
    # {(stage, key): (built index, its searcher)}: every ``Index`` built, shared with the views
    _built: dict = field(default_factory=dict, repr=False)
    _passages: np.ndarray | None = None
    _recent: OrderedDict = field(default_factory=OrderedDict, repr=False)
    share_searches: bool = True  # False (serving): searches are never kept for later callers
    replayed_s: float = 0.0  # first-stage seconds replayed: searched_alone, query_vectors
    replayed: int = 0  # batches whose search or query embedding was replayed
    warming: bool = False  # ``warm_up`` under way: searches alone neither kept nor replayed
    # a view of ``with_embedder``: the run's resources (None on the run's own)
    parent: Resources | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.chunks:
            raise InvalidValue("no chunks to index: the corpus produced nothing under this "
                                 "chunking")
        self.position = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        self.by_id = ChunksById(self.chunks, self.position)

    @property
    def passages(self) -> Passages:
        """These chunks as the stages after retrieval read them (``Passages``)."""
        return Passages(self.by_id, lambda chunk_id: self.terms[self.position[chunk_id]],
                        lambda: self.bm25, self.best_bm25_scores,
                        lambda ids: self.passage_vectors()[[self.position[c] for c in ids]],
                        self.query_vectors)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            embedder = self.embedder_factory()
            if isinstance(embedder, BoundById):  # precomputed vectors: by chunk and question id
                embedder.bind(self.chunks, self.questions)
            self._embedder = embedder
        return self._embedder

    @property
    def embedder_used(self) -> bool:
        return self._embedder is not None

    def with_embedder(self, factory: Callable[[], Embedder]) -> Resources:
        """A view of these resources whose dense stages use ``factory()``'s embedder, for
        passage and query vectors alike (a hybrid part with an embedder of its own,
        ``retriever.parts.<name>.embedder``). It shares the chunks, their positions, the tokens,
        the registry of built indexes, the embedding cache, the stage store and the timings,
        copying none; its vectors, dense index (the run's ``index`` group) and searches are its
        own, keyed by its embedder's identity and kept under stage names of their own
        (``dense_stage``), so they neither read nor evict the run's. Replayed search time
        counts on the run's resources (``parent``)."""
        view = copy.copy(self)  # shallow: no second position map, no __post_init__
        view.embedder_factory, view.parent = factory, self.parent or self
        view._embedder, view._passages = None, None
        view._recent = OrderedDict()
        return view

    def dense_stage(self, stage: str) -> str:
        """Stage-store name of a dense stage (``vectors``, ``dense_index``, ``dense_search``,
        ...): ``stage`` on the run's resources, ``<stage>_<8 hex digits of the embedder's
        identity>`` on a ``with_embedder`` view."""
        if self.parent is None:
            return stage
        return f"{stage}_{hashlib.sha256(self.embedder.identity.key.encode()).hexdigest()[:8]}"

    @property
    def terms(self) -> TokenMatrix:
        """Each chunk's analysed terms (``text.tokenize``), computed once for BM25, the lexical
        reranker and the lexical abstain signal."""
        if self._terms is None:
            self._terms = self.stages.get(
                "tokens", stage_key("tokens", self.chunks_key),
                lambda: TokenMatrix.build(c.text for c in self.chunks))
        return self._terms

    @property
    def bm25(self) -> BM25Index:
        """The run's BM25 index (``bm25_params``), shared by every lexical stage."""
        return self.bm25_index(self.bm25_params)

    def index(self, index: Index, stage: str, disk: bool = True):
        """``index``'s searcher over these chunks, built once per stage key
        (``index.key(source key)``) and kept in the registry and in the stage store under
        ``stage`` (on disk too unless ``disk`` is False). Its source is read first: the passage
        vectors (their embedding time counts in ``time.embed_s``) or, only when it must be
        built, the chunks' terms; the build counts in ``time.index_s``."""
        vectors = self.passage_vectors() if index.source == "vectors" else None
        key = self.key(index)
        if (stage, key) not in self._built:
            start = time.perf_counter()
            built = self.stages.get(stage, key, lambda: index.build(
                self.terms if vectors is None else vectors), disk=disk)
            self.add_time("time.index_s", start)
            self._built[stage, key] = (built, index.searcher(built))
        return self._built[stage, key][1]

    def key(self, index: Index) -> str:
        """Stage key of ``index`` built over these chunks: ``index.key`` of its source's key
        (the passage vectors', which the embedder's identity keys, or the chunks')."""
        return index.key(self._vectors_key() if index.source == "vectors" else self.chunks_key)

    def bm25_index(self, params: BM25Params) -> BM25Index:
        """A BM25 index over the chunks' terms fitted with ``params`` (``index``), kept under
        ``bm25_stage(params)`` and ``bm25_key(params)``, so a hybrid part with parameters of
        its own (``BM25Retriever(k1=..., method=...)``) neither reads nor evicts the run's
        index; a part whose parameters equal the run's gets the run's."""
        return self.index(params, self.bm25_stage(params))

    def bm25_stage(self, params: BM25Params) -> str:
        """Stage name of the BM25 index fitted with ``params``: ``bm25`` for the run's own
        (``bm25_params``), ``bm25_<8 hex digits of its key>`` for any other (a name MLflow
        accepts in ``stage.<name>.built``, whatever the method: ``bm25+`` has a ``+``)."""
        if params == self.bm25_params:
            return "bm25"
        return f"bm25_{self.bm25_key(params)[:8]}"

    def passage_vectors(self) -> np.ndarray:
        if self._passages is None:
            start = time.perf_counter()
            self._passages = self.stages.get(
                self.dense_stage("vectors"), self._vectors_key(), self._embedded_passages)
            self.add_time("time.embed_s", start)
        return self._passages

    def _embedded_passages(self) -> np.ndarray:
        """(len(chunks), dim) float32: by chunk id for vectors that belong to ids
        (``BoundById``), else each chunk's text through the embedding cache."""
        embedder = self.embedder
        if isinstance(embedder, BoundById):
            return embedder.passage_vectors([c.chunk_id for c in self.chunks])
        return self.cache.embed(embedder, [c.text for c in self.chunks], "passage",
                                progress=self.progress)

    def passage_tokens(self, tokens: TokenCounter) -> np.ndarray:
        """(len(chunks),) int64: tokens the model is given for each chunk as a passage
        (``tokens.counts``), kept in the stage store beside the vectors (same chunks, same
        embedder: same counts)."""
        return self.stages.get(self.dense_stage("passage_tokens"), self._vectors_key(),
                               lambda: tokens.counts([c.text for c in self.chunks]))

    def dense_index(self) -> ann.DenseSearch:
        """The run's dense index (``index_spec``) over the passage vectors, searched with its
        query-time settings. Built once per build parameters (``_dense_key``): exact flat search
        is kept in memory between jobs, an approximate index on disk too (its build takes
        minutes at a million passages). Raises ``InvalidValue`` for settings the corpus cannot
        hold (``index.nlist`` above the passage count, ...)."""
        spec = self.index_spec
        return self.index(spec, self.dense_stage(spec.stage), disk=not spec.exact)

    def dense_facts(self, texts: list[str]) -> dict[str, float]:
        """``ann.index_facts`` of the run's dense index, on ``texts``' query vectors (the first
        ``LATENCY_SAMPLE`` of them searched alone), once a stage searched it (else ``{}``)."""
        spec = self.index_spec
        held = self._built.get((self.dense_stage(spec.stage), self._dense_key())
                               ) if self.embedder_used else None
        if held is None:
            return {}
        return ann.index_facts(spec, *held, self.passage_vectors(),
                               lambda: self.query_vectors(texts), LATENCY_SAMPLE)

    def searched(self, stage: str, queries: dict[str, str], k: int,
                 search: Callable[[], dict], index: str | None = None) -> dict:
        """A first-stage ranking of this batch of ``queries`` at depth ``k``, kept in memory
        (the latest per ``stage``) for the next job of a sweep: it depends only on the index
        (its stage key: ``index``, else ``_index_key(stage)``), the query texts and ``k``,
        never on the reranker, fusion or abstain settings that sweeps vary. Returns a copy, so
        callers may change what they get."""
        if not self.share_searches:
            return search()
        texts = hashlib.sha256(json.dumps(list(queries.items())).encode()).hexdigest()
        key = stage_key(stage, index or self._index_key(stage), texts, k)
        ranking = self.stages.get(stage, key, search, disk=False)
        return {q: dict(scores) for q, scores in ranking.items()}

    @contextmanager
    def warm_up(self) -> Iterator[None]:
        """A block whose searches alone (``searched_alone``, ``query_vectors(cached=False)``)
        keep nothing and count no replay: the latency measurement's untimed first query, which
        loads what a server loads before it answers (a model whose vectors all came from the
        cache loads at its first query: 0.6-0.8 s for MiniLM). Kept, that first query's seconds
        would be replayed as the query's latency in every later job of the sweep. What an
        earlier job kept is read (the job that kept it loaded what it needs), so a later job's
        warm-up costs its reranker's work only. Holds for the views of these resources
        (``with_embedder``) too."""
        owner = self.parent or self
        owner.warming = True
        try:
            yield
        finally:
            owner.warming = False

    def searched_alone(self, stage: str, queries: dict[str, str], k: int,
                       search: Callable[[], dict], index: str | None = None) -> dict:
        """A first-stage ranking of ``queries`` computed as serving computes it (nothing cached:
        the latency measurement), timed. The first job of a sweep to search this batch on this
        index (``stage``'s key) searches and keeps (seconds, ranking); a later job that only
        differs in query-time settings gets the same ranking and adds the kept seconds to
        ``replayed_s``, so its measured latency still counts the first stage, as measured once
        in this process on the same index and queries; each replay adds 1 to ``replayed``.
        ``index`` is the index's stage key, as for ``searched``. The kept seconds count a query
        embedding replayed inside the search (``query_vectors``, ``cached=False``) at its
        measured time.
        Without a stage store (a lone run, serving) every call searches; in ``warm_up`` a
        call keeps nothing and counts nothing."""
        if not self.share_searches:
            return search()
        book = self.stages.scratch(f"{stage}_alone",
                                   stage_key(f"{stage}_alone", index or self._index_key(stage),
                                             k), dict)
        text = json.dumps(list(queries.items()))
        held = book.get(text)
        owner = self.parent or self
        if owner.warming:
            return {q: dict(s) for q, s in held[1].items()} if held else search()
        if held is None:
            start, replayed_before = time.perf_counter(), owner.replayed_s
            ranking = search()
            took = time.perf_counter() - start + owner.replayed_s - replayed_before
            book[text] = held = (took, ranking)
        else:
            owner.replayed_s += held[0]
            owner.replayed += 1
        return {q: dict(scores) for q, scores in held[1].items()}

    def best_bm25_scores(self, texts: list[str]) -> np.ndarray:
        """(len(texts),) ``bm25.best_scores(texts)``, kept in memory for the next job of a
        sweep (it depends on the BM25 index and the texts only)."""
        if not self.share_searches:
            return self.bm25.best_scores(texts)
        key = stage_key("bm25_best", self.bm25_key(),
                        hashlib.sha256(json.dumps(texts).encode()).hexdigest())
        return self.stages.get("bm25_best", key, lambda: self.bm25.best_scores(texts),
                               disk=False).copy()

    def _index_key(self, stage: str) -> str:
        """Stage key of the index a first-stage search (``dense_search``/``bm25_search``) reads."""
        if stage != "dense_search":
            return self.bm25_key()
        return self.dense_search_key()

    def dense_search_key(self) -> str:
        """Stage key of a dense search: the built index's key and its query-time settings."""
        return stage_key("dense_search", self._dense_key(), self.index_spec.search_params())

    def _dense_key(self) -> str:
        """Stage key of the built dense index: the vectors' key, the index kind and its build
        parameters (never its query-time ones: ``ef_search``, ``nprobe``)."""
        return self.key(self.index_spec)

    def bm25_key(self, params: BM25Params | None = None) -> str:
        """Stage key of a BM25 index: the chunks' key and every field of ``params`` (default
        ``bm25_params``, the run's)."""
        return self.key(params or self.bm25_params)

    def _vectors_key(self) -> str:
        return stage_key("vectors", self.chunks_key, self.embedder.identity.key)

    def query_vectors(self, texts: list[str], cached: bool = True) -> np.ndarray:
        """(len(texts), dim) query vectors: through the embedding cache (or the serving LRU,
        ``query_memory``), or, ``cached`` False (the latency measurement), embedded as serving
        embeds them (``_embedded_alone``)."""
        if not cached:
            return self._embedded_alone(texts)
        if self.query_memory > 0:
            return self._remembered(texts)
        return self.cache.embed(self.embedder, texts, "query", progress=False)

    def _embedded_alone(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) query vectors embedded with nothing cached, timed: the first job of
        a sweep to embed these texts with this embedder (its identity key) embeds them and keeps
        (seconds, vectors); a later job, on any index (another chunking, another depth), gets the
        same vectors, adds the kept seconds to ``replayed_s`` and 1 to ``replayed``, as
        ``searched_alone`` does for a whole search: a query's embedding time does not depend on
        the index it then searches. Without a stage store (a lone run, serving) every call
        embeds; in ``warm_up`` a call keeps nothing and counts nothing."""
        if not self.share_searches:
            return self.embedder.embed(texts, "query")
        key = self.embedder.identity.key
        book = self.stages.scratch(f"query_alone.{key}", stage_key("query_alone", key), dict)
        text = json.dumps(texts)
        held = book.get(text)
        if (self.parent or self).warming:
            return held[1].copy() if held else self.embedder.embed(texts, "query")
        if held is None:
            start = time.perf_counter()
            vectors = self.embedder.embed(texts, "query")
            book[text] = held = (time.perf_counter() - start, vectors)
        else:
            owner = self.parent or self  # replayed time counts on the run's resources
            owner.replayed_s += held[0]
            owner.replayed += 1
        return held[1].copy()

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
