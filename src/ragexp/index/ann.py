"""The ``index`` group: how dense search finds a query's nearest passages.

``flat`` is exact (``flat.FlatIPIndex``, the default and ragexp's behaviour before the group
existed); ``hnsw``, ``ivf`` and ``ivfpq`` are FAISS's approximate indexes over the same
L2-normalised vectors, by inner product (= cosine):

- ``hnsw``: ``IndexHNSWFlat`` (Malkov and Yashunin, "Efficient and robust approximate nearest
  neighbor search using Hierarchical Navigable Small World graphs", TPAMI 2018); ``M`` links
  per node and ``ef_construction`` candidates while building, ``ef_search`` at query time.
- ``ivf``: ``IndexIVFFlat`` (inverted lists over a k-means coarse quantizer, Jégou et al.,
  "Product quantization for nearest neighbor search", TPAMI 2011); ``nlist`` lists, trained on
  a seeded sample, ``nprobe`` lists visited per query.
- ``ivfpq``: ``IndexIVFPQ``, the same lists holding product-quantised codes of ``m`` sub-vectors
  of ``nbits`` bits each (``m`` must divide the dimension).

Each option is a spec (Hydra instantiates it from ``conf/index/<name>.yaml``) that splits its
fields in two: ``build_params`` (what the built index depends on: the stage key, so a sweep
over ``ef_search`` or ``nprobe`` builds it once) and ``search_params`` (read at query time,
through FAISS's per-call ``SearchParameters``, so one built index serves every job).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.index.flat import FlatIPIndex, faiss_module

RECALL_DEPTH = 10  # index.recall_at_10_vs_exact


class DenseSearch(Protocol):
    """What a dense retriever searches: ``search(queries (n, d) float32, k) -> (scores, ids)``,
    each (n, k), best first, ids -1 where fewer than k were found."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class IndexSpec(Protocol):
    """One option of the ``index`` group: ``build(vectors)`` makes the index (its stage key:
    ``name`` and ``build_params()``), ``searcher(built)`` searches it with the query-time
    ``search_params()``; ``exact``: whether it returns exact search's results."""

    name: str
    exact: bool

    def build_params(self) -> dict: ...

    def search_params(self) -> dict: ...

    def build(self, vectors: np.ndarray) -> Any: ...

    def searcher(self, built: Any) -> DenseSearch: ...


@dataclass
class BuiltIndex:
    """A FAISS index built from a run's passage vectors, with what its build cost: ``build_s``
    (seconds, as measured when it was built, also when a later job reuses it) and ``nbytes``
    (its serialised size, ``faiss.serialize_index``). Pickles as its serialised bytes, so the
    stage store keeps it on disk."""

    index: Any
    build_s: float
    nbytes: int

    def __getstate__(self) -> dict:
        return {"bytes": faiss_module().serialize_index(self.index), "build_s": self.build_s,
                "nbytes": self.nbytes}

    def __setstate__(self, state: dict) -> None:
        self.index = faiss_module().deserialize_index(state["bytes"])
        self.build_s, self.nbytes = state["build_s"], state["nbytes"]


@dataclass(frozen=True)
class ApproxSearch:
    """A built approximate index searched with one run's query-time ``params`` (a FAISS
    ``SearchParameters``)."""

    built: BuiltIndex
    params: Any

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        return self.built.index.search(queries, min(k, self.built.index.ntotal),
                                       params=self.params)


@dataclass(frozen=True)
class FlatSpec:
    """``index=flat``: exact search, ``block_size`` passages per block (None: one FAISS call;
    see ``flat.py``)."""

    name: str = "flat"
    # passages per block of an exact search (rounded up to 1024s); null: one FAISS call
    block_size: int | None = field(default=None, metadata={"ge": 1})
    exact = True

    def build_params(self) -> dict:
        return {"block_size": self.block_size}

    def search_params(self) -> dict:
        return {}

    def build(self, vectors: np.ndarray) -> FlatIPIndex:
        return FlatIPIndex(vectors, self.block_size)

    def searcher(self, built: FlatIPIndex) -> DenseSearch:
        return built


def _timed_build(make: Any, vectors: np.ndarray, train: np.ndarray | None = None) -> BuiltIndex:
    start = time.perf_counter()
    index = make()
    if train is not None:
        index.train(train)
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    build_s = time.perf_counter() - start
    return BuiltIndex(index, build_s, int(faiss_module().serialize_index(index).nbytes))


@dataclass(frozen=True)
class HNSWSpec:
    """``index=hnsw``: FAISS ``IndexHNSWFlat`` by inner product. ``M``: links per node;
    ``ef_construction``: candidates kept while inserting; ``ef_search``: candidates kept per
    query (at least the depth retrieved, checked at composition)."""

    name: str = "hnsw"
    M: int = field(default=32, metadata={"ge": 2})
    ef_construction: int = field(default=200, metadata={"ge": 1})
    ef_search: int = field(default=128, metadata={"ge": 1})
    exact = False

    def build_params(self) -> dict:
        return {"M": self.M, "ef_construction": self.ef_construction}

    def search_params(self) -> dict:
        return {"ef_search": self.ef_search}

    def build(self, vectors: np.ndarray) -> BuiltIndex:
        def make():
            faiss = faiss_module()
            index = faiss.IndexHNSWFlat(vectors.shape[1], self.M, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.ef_construction
            return index
        return _timed_build(make, vectors)

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, faiss_module().SearchParametersHNSW(efSearch=self.ef_search))


def training_sample(vectors: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``min(size, n)`` rows of ``vectors`` drawn without replacement by
    ``numpy.random.default_rng(seed)``, in row order: the same sample for the same seed."""
    if size >= len(vectors):
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size, replace=False))
    return vectors[rows]


@dataclass(frozen=True)
class IVFSpec:
    """``index=ivf``: FAISS ``IndexIVFFlat`` by inner product over ``nlist`` k-means lists,
    trained on ``train_size`` vectors (None: ``64 x nlist``) drawn with ``seed``; ``nprobe``
    lists searched per query. Raises ``InvalidValue`` at build when ``nlist`` exceeds the
    number of passages or ``train_size`` (FAISS's k-means needs at least ``nlist`` points; it
    warns below 39 x ``nlist``); composition refuses the same where it can know them
    (``run.validation``)."""

    name: str = "ivf"
    nlist: int = field(default=64, metadata={"ge": 1})  # at most the passages
    nprobe: int = field(default=8, metadata={"ge": 1})  # at most nlist
    seed: int = 0
    train_size: int | None = field(default=None, metadata={"ge": 1})
    exact = False

    def build_params(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("name", "nprobe")}

    def search_params(self) -> dict:
        return {"nprobe": self.nprobe}

    def _train_size(self) -> int:
        return self.train_size or 64 * self.nlist

    def _check(self, vectors: np.ndarray) -> None:
        if self.nlist > len(vectors):
            raise InvalidValue(f"index.nlist={self.nlist} is larger than the corpus "
                               f"({len(vectors)} passages): each list needs a training vector; "
                               f"lower index.nlist")
        if self.train_size is not None and self.train_size < self.nlist:
            raise InvalidValue(f"index.train_size={self.train_size} is out of range: must be >= "
                               f"index.nlist ({self.nlist}): k-means needs a training vector per "
                               f"list (FAISS refuses fewer, and warns below 39 x nlist)")

    def _quantized(self, dim: int) -> Any:
        faiss = faiss_module()
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.own_fields = True
        quantizer.this.disown()
        return index

    def build(self, vectors: np.ndarray) -> BuiltIndex:
        self._check(vectors)

        def make():
            index = self._quantized(vectors.shape[1])
            index.cp.seed = self.seed
            return index
        return _timed_build(make, vectors,
                            training_sample(vectors, self._train_size(), self.seed))

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, faiss_module().SearchParametersIVF(nprobe=self.nprobe))


@dataclass(frozen=True)
class IVFPQSpec(IVFSpec):
    """``index=ivfpq``: FAISS ``IndexIVFPQ``: the IVF lists hold product-quantised codes, ``m``
    sub-vectors of ``nbits`` bits each (``m x nbits / 8`` bytes a passage). Raises
    ``InvalidValue`` at build when ``m`` does not divide the dimension, or the corpus or
    ``train_size`` holds fewer vectors than ``nlist`` or than the ``2**nbits`` centroids of each
    sub-quantizer."""

    name: str = "ivfpq"
    m: int = field(default=16, metadata={"ge": 1})  # must divide the dimension
    nbits: int = field(default=8, metadata={"ge": 1, "le": 16})

    def _train_size(self) -> int:
        return self.train_size or 64 * max(self.nlist, 2 ** self.nbits)

    def _check(self, vectors: np.ndarray) -> None:
        super()._check(vectors)
        n, dim = vectors.shape
        if dim % self.m:
            raise InvalidValue(f"index.m={self.m} does not divide the embedder's dimension "
                               f"({dim}): choose a divisor of {dim}")
        if 2 ** self.nbits > n:
            raise InvalidValue(f"index.nbits={self.nbits} needs at least {2 ** self.nbits} "
                               f"passages to train its codebooks; the corpus has {n}: lower "
                               f"index.nbits")
        if self.train_size is not None and self.train_size < 2 ** self.nbits:
            raise InvalidValue(f"index.train_size={self.train_size} is out of range: must be >= "
                               f"2**index.nbits ({2 ** self.nbits}): each codebook's k-means "
                               f"needs a training vector per centroid")

    def _quantized(self, dim: int) -> Any:
        faiss = faiss_module()
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, self.nlist, self.m, self.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
        index.own_fields = True
        quantizer.this.disown()
        index.pq.cp.seed = self.seed
        return index


def recall_vs_exact(approx_ids: np.ndarray, exact_ids: np.ndarray,
                    true_scores: np.ndarray | None = None, exact_scores: np.ndarray | None = None,
                    epsilon: float = 1e-6) -> float:
    """Mean over queries of the share of the exact top k an approximate index also returns
    (recall@k against exact search), on (n, k) id arrays (-1: none found, ignored). NaN for no
    queries.

    With scores, ties count as ann-benchmarks counts them (Aumüller et al., "ANN-Benchmarks",
    Information Systems 2020, its ``knn`` recall): a returned item is a hit when its true score
    (``true_scores``: (n, k), the exact inner product of each returned id) reaches the k-th
    exact score (``exact_scores``: (n, k), best first) less ``epsilon``, so an index that
    returns another of several passages tied at the k-th place is not charged a miss. Without
    scores, ``|approx ∩ exact| / |exact|``."""
    shares = []
    for i, (a, e) in enumerate(zip(approx_ids, exact_ids)):
        n_true = int((e >= 0).sum())
        if not n_true:
            continue
        if true_scores is None or exact_scores is None:
            shares.append(len(set(e[e >= 0].tolist()) & set(a[a >= 0].tolist())) / n_true)
            continue
        threshold = exact_scores[i][e >= 0].min() - epsilon
        hits = int(((a >= 0) & (true_scores[i] >= threshold)).sum())
        shares.append(min(hits, n_true) / n_true)
    return float(np.mean(shares)) if shares else float("nan")


def search_latency_ms(index: DenseSearch, queries: np.ndarray, k: int) -> dict[str, float]:
    """``index.search_p50_ms`` / ``index.search_p95_ms``: each query of ``queries`` (n, d)
    searched alone, milliseconds (``time.perf_counter``)."""
    times = []
    for row in queries:
        start = time.perf_counter()
        index.search(row[None, :], k)
        times.append((time.perf_counter() - start) * 1000)
    if not times:
        return {}
    return {"index.search_p50_ms": float(np.percentile(times, 50)),
            "index.search_p95_ms": float(np.percentile(times, 95))}
