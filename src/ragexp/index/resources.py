"""Shared, lazily built resources of one run: the embedder, the embedding cache, the chunk
lookup, the stage store, and a registry of built indexes by stage key (``Index``: BM25, the
dense options of the ``index`` group, ``index/ann/``), with the sweep's replayed searches
(``replay.SearchReplay``) and the query vectors (``queryvectors.QueryVectors``) as one field
each.

Retrievers are built on this, so the model loads once (and only when a stage needs it) and an
index is built once for the retriever, the abstain signal and ``explain``; the other stages
receive only what they read of it (a ``Passages`` view, a scorer).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import Callable

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.index import ann
from ragexp.index.base import Index
from ragexp.index.bm25 import BM25Index, BM25Params
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import BoundById, Embedder, TokenCounter
from ragexp.index.queryvectors import QueryVectors
from ragexp.index.replay import SearchReplay
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
    """A run's chunks and what is built over them, each once: the embedder
    (``embedder_factory()``, loaded when a stage first needs it), the passage vectors and the
    chunks' terms, and every ``Index`` built over them by stage key (``index(index, stage)``,
    ``key(index)``), kept in ``stages`` and shared with the ``with_embedder`` views. ``replay``
    keeps a sweep's first-stage searches for its next job (``share_searches`` False, serving:
    none), ``query_vectors`` embeds questions (``query_memory`` > 0, serving: through an LRU of
    that many questions, never the disk cache). Raises ``InvalidValue`` for no chunks."""

    chunks: list[Chunk]
    embedder_factory: Callable[[], Embedder]
    cache: EmbeddingCache = field(default_factory=EmbeddingCache)
    bm25_params: BM25Params = BM25Params()  # the run's ``bm25`` group, one value
    progress: bool = True
    query_memory: InitVar[int] = 0
    timings: dict[str, float] = field(default_factory=dict)
    stages: StageStore = field(default_factory=lambda: StageStore(enabled=False))
    chunks_key: str = ""  # stage key of ``chunks``: what tokens, BM25 and vectors derive from
    index_spec: ann.IndexSpec = field(default_factory=ann.FlatSpec)  # the ``index`` group
    questions: dict[str, str] = field(default_factory=dict)  # {qid: text}, for ``BoundById``
    # {chunk_id: judged unit id} when chunk scores roll up to sections, documents or parents
    # (``Corpus.rolls_up``): a hybrid part's ``depth`` counts these units; None: the chunk is
    # the unit
    unit_of: dict[str, str] | None = None
    share_searches: InitVar[bool] = True
    _embedder: Embedder | None = None
    _terms: TokenMatrix | None = None
    # {(stage, key): (built index, its searcher)}: every ``Index`` built, shared with the views
    _built: dict = field(default_factory=dict, repr=False)
    _passages: np.ndarray | None = None
    own_embedder: bool = False  # a view of ``with_embedder``: a hybrid part's own embedder

    def __post_init__(self, query_memory: int, share_searches: bool) -> None:
        if not self.chunks:
            raise InvalidValue("no chunks to index: the corpus produced nothing under this "
                                 "chunking")
        self.position = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        self.by_id = ChunksById(self.chunks, self.position)
        self.replay = SearchReplay(self.stages, share_searches)
        self.query_vectors = QueryVectors(lambda: self.embedder, self.cache, self.replay,
                                          query_memory)

    @property
    def passages(self) -> Passages:
        """These chunks as the stages after retrieval read them (``Passages``)."""
        return Passages(self.by_id, lambda chunk_id: self.terms[self.position[chunk_id]],
                        lambda: self.bm25, self._best_bm25_scores,
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
        the registry of built indexes, the embedding cache, the stage store, the timings and
        the replay (so replayed search time counts on the run's resources), copying none; its
        vectors, dense index (the run's ``index`` group) and query vectors are its own, keyed
        by its embedder's identity and kept under stage names of their own (``dense_stage``),
        so they neither read nor evict the run's."""
        view = copy.copy(self)  # shallow: no second position map, no __post_init__
        view.embedder_factory, view.own_embedder = factory, True
        view._embedder, view._passages = None, None
        view.query_vectors = QueryVectors(lambda: view.embedder, self.cache, self.replay,
                                          self.query_vectors.memory)
        return view

    def dense_stage(self, stage: str) -> str:
        """Stage-store name of a dense stage (``vectors``, ``dense_index``, ``dense_search``,
        ...): ``stage`` on the run's resources, ``<stage>_<8 hex digits of the embedder's
        identity>`` on a ``with_embedder`` view."""
        if not self.own_embedder:
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
        """The run's BM25 index (``bm25_params``, stage ``bm25``), shared by every lexical
        stage."""
        return self.index(self.bm25_params, "bm25")

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

    def built(self, index: Index, stage: str) -> tuple | None:
        """(built index, its searcher) of ``index`` under ``stage`` if a stage has built it
        (``index``), else None; builds nothing and, for a dense index, embeds nothing."""
        if index.source == "vectors" and not self.embedder_used:
            return None
        return self._built.get((stage, self.key(index)))

    def key(self, index: Index) -> str:
        """Stage key of ``index`` built over these chunks: ``index.key`` of its source's key
        (the passage vectors', which the embedder's identity keys, or the chunks')."""
        return index.key(self._vectors_key() if index.source == "vectors" else self.chunks_key)

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

    def _best_bm25_scores(self, texts: list[str]) -> np.ndarray:
        """(len(texts),) ``bm25.best_scores(texts)``, kept in memory for the next job of a
        sweep (``replay.kept``: it depends on the BM25 index and the texts only)."""
        key = stage_key("bm25_best", self.key(self.bm25_params),
                        hashlib.sha256(json.dumps(texts).encode()).hexdigest())
        return self.replay.kept("bm25_best", key, lambda: self.bm25.best_scores(texts))

    def _vectors_key(self) -> str:
        return stage_key("vectors", self.chunks_key, self.embedder.identity.key)

    def add_time(self, key: str, start: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - start


def dense_index(resources: Resources) -> ann.DenseSearch:
    """The run's dense index (``resources.index_spec``) over ``resources``' passage vectors,
    searched with its query-time settings, from the registry (``Resources.index``) under
    ``dense_stage(spec.stage)``: exact flat search is kept in memory between jobs, an
    approximate index on disk too (its build takes minutes at a million passages). Raises
    ``InvalidValue`` for settings the corpus cannot hold (``index.nlist`` above the passage
    count, ...)."""
    spec = resources.index_spec
    return resources.index(spec, resources.dense_stage(spec.stage), disk=not spec.exact)


def dense_facts(resources: Resources, texts: list[str]) -> dict[str, float]:
    """``ann.index_facts`` of the run's dense index, on ``texts``' query vectors (the first
    ``LATENCY_SAMPLE`` of them searched alone), once a stage searched it (else ``{}``)."""
    spec = resources.index_spec
    held = resources.built(spec, resources.dense_stage(spec.stage))
    if held is None:
        return {}
    return ann.index_facts(spec, *held, resources.passage_vectors(),
                           lambda: resources.query_vectors(texts), LATENCY_SAMPLE)
