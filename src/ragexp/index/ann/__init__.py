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

Each option is a spec in a module of its own here (``flat.py``, ``hnsw.py``, ...; Hydra
instantiates it from ``conf/index/<name>.yaml``) that splits its fields in two: ``build_params``
(what the built index depends on: the stage key, so a sweep over ``ef_search`` or ``nprobe``
builds it once) and ``search_params`` (read at query time, through FAISS's per-call
``SearchParameters``, so one built index serves every job). A module declares its option as
``OPTION = <its spec class>``, whose fields carry their ranges (``metadata``): ``options()``
finds every module's, ``config.schema`` makes the group's schema from them, and configs name each
``ragexp.index.ann.<its class>`` (``__getattr__``), so a new option is its module, its yaml and
its test.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from ragexp import settings
from ragexp.index.base import Index
from ragexp.index.flat import FlatIPIndex, faiss_module
from ragexp.index.stagestore import stage_key

RECALL_DEPTH = 10  # index.recall_at_10_vs_exact


class DenseSearch(Protocol):
    """What a dense retriever searches: ``search(queries (n, d) float32, k) -> (scores, ids)``,
    each (n, k), best first, ids -1 where fewer than k were found."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class IndexSpec(Index, Protocol):
    """One option of the ``index`` group, an ``Index`` over the passage vectors:
    ``build(vectors)`` makes the index (its stage key: ``name`` and ``build_params()``),
    ``searcher(built)`` searches it with the query-time ``search_params()``; ``exact``: whether
    it returns exact search's results; ``stage``: the stage-store name it is kept under."""

    name: str
    exact: bool

    @property
    def stage(self) -> str: ...

    def build_params(self) -> dict: ...

    def search_params(self) -> dict: ...

    def build(self, vectors: np.ndarray) -> Any: ...

    def searcher(self, built: Any) -> DenseSearch: ...


class DenseOption:
    """What every option of the ``index`` group shares (mixed into each spec dataclass): it
    is built from the passage vectors, keyed by them, its ``name`` and its ``build_params()``,
    and kept under the stage ``dense_index`` when exact (in memory only, as it always was),
    ``<name>_index`` otherwise (on disk too: its build can take minutes).

    Its fields' ranges and its ``RULES`` (cross-field checks ``rule(spec or config node,
    "index") -> [message, ...]``, each registered in the option's module with
    ``settings.rule_for``, so composition says the same) are checked when it is built
    (``InvalidValue``); ``fits`` is what it needs of the data, which composition checks where
    it knows the passages and their dimension (``config.validation``) and ``build`` checks on
    the vectors."""

    source = "vectors"
    RULES: tuple[Callable[[Any, str], list[str]], ...] = ()

    def __post_init__(self) -> None:
        settings.check(self, "index", *(rule(self, "index") for rule in self.RULES))

    def fits(self, passages: tuple[int, str] | None, dimension: tuple[int, str] | None
             ) -> list[str]:
        """What is wrong with building this index over ``passages`` vectors of ``dimension``
        components, each ``(number, where it comes from)`` or None when unknown: nothing
        here; an option that trains on the vectors says what they cannot hold."""
        return []

    def refuse_unfit(self, vectors: np.ndarray) -> None:
        """Raise ``InvalidValue`` with ``fits`` of the (n, d) ``vectors`` to be built on."""
        n, dim = vectors.shape
        settings.refuse(self.fits((n, f"{n} passages"), (dim, "")))

    def key(self, source_key: str) -> str:
        """Stage key of the built index over the vectors keyed ``source_key``: never its
        query-time settings (``ef_search``, ``nprobe``)."""
        return stage_key("dense_index", source_key, self.name, self.build_params())

    @property
    def stage(self) -> str:
        return "dense_index" if self.exact else f"{self.name}_index"


def options() -> dict[str, type]:
    """``{option name: spec class}`` of every module of this package that declares ``OPTION``
    (the ``index`` group's options, ``conf/index/<name>.yaml``), by name."""
    found = {}
    for module in pkgutil.iter_modules(__path__):
        spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "OPTION", None)
        if spec is not None:
            found[spec.name] = spec
    return dict(sorted(found.items()))


def __getattr__(name: str) -> type:
    """``ragexp.index.ann.<Spec>``: an option's class by the path configs name it with
    (``_target_: ragexp.index.ann.HNSWSpec``: what every run recorded before the options had a
    module each, and part of a run's identity, ``tracking.config_hash``). Raises
    ``AttributeError`` for a name no option module declares."""
    for spec in options().values():
        if spec.__name__ == name:
            return spec
    raise AttributeError(f"module {__name__!r} has no index option {name!r}")


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
    ``SearchParameters``; None for an index without query-time settings, ``flat_fp16``)."""

    built: BuiltIndex
    params: Any

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        return self.built.index.search(queries, min(k, self.built.index.ntotal),
                                       params=self.params)


def timed_build(make: Any, vectors: np.ndarray, train: np.ndarray | None = None) -> BuiltIndex:
    """``make()``'s FAISS index, trained on ``train`` (when given) and holding ``vectors``, with
    its build seconds and serialised size."""
    start = time.perf_counter()
    index = make()
    if train is not None:
        index.train(train)
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    build_s = time.perf_counter() - start
    return BuiltIndex(index, build_s, int(faiss_module().serialize_index(index).nbytes))


def training_sample(vectors: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``min(size, n)`` rows of ``vectors`` drawn without replacement by
    ``numpy.random.default_rng(seed)``, in row order: the same sample for the same seed."""
    if size >= len(vectors):
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size, replace=False))
    return vectors[rows]


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


def index_facts(spec: IndexSpec, built: Any, searcher: DenseSearch, vectors: np.ndarray,
                queries: Callable[[], np.ndarray], latency_sample: int) -> dict[str, float]:
    """Metrics of a dense index ``built`` from ``vectors`` ((n, d) float32) by ``spec``:
    ``index.bytes`` (the vectors for flat, the serialised index otherwise) and
    ``index.build_s`` (seconds the build took when it ran, 0 for flat); for an approximate index
    also ``index.recall_at_10_vs_exact`` (``recall_vs_exact`` of its top 10 against exact flat
    search, ties at the 10th place counted as hits, on the query vectors ``queries()``
    returns, zero vectors left out; read only then) and ``index.search_p50_ms`` /
    ``index.search_p95_ms`` (each of the first ``latency_sample`` queries searched alone)."""
    if spec.exact:
        return {"index.bytes": float(built.nbytes), "index.build_s": 0.0}
    out = {"index.bytes": float(built.nbytes), "index.build_s": float(built.build_s)}
    asked = queries()
    asked = asked[asked.any(axis=1)]
    if len(asked):
        exact_scores, exact = FlatIPIndex(vectors).search(asked, RECALL_DEPTH)
        _, found = searcher.search(asked, RECALL_DEPTH)
        # the exact inner product of every returned id (-1 padding scores nothing)
        true = np.einsum("qkd,qd->qk", vectors[np.maximum(found, 0)], asked)
        out[f"index.recall_at_{RECALL_DEPTH}_vs_exact"] = recall_vs_exact(
            found, exact, true, exact_scores)
        out.update(search_latency_ms(searcher, asked[:latency_sample], RECALL_DEPTH))
    return out


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
