"""``index=hnsw``: FAISS ``IndexHNSWFlat`` (Malkov and Yashunin, TPAMI 2018), approximate, built
once per (``M``, ``ef_construction``); ``ef_search`` at query time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragexp import settings
from ragexp.index.ann import ApproxSearch, BuiltIndex, DenseOption, DenseSearch, timed_build
from ragexp.index.flat import faiss_module


@settings.cross_field_rule
def ef_search_covers_depth(cfg) -> list[str]:
    """``index.ef_search`` (HNSW's candidates per query) at least the depth the first stage
    retrieves, ``max(k, reranker.top_n)``: FAISS would silently search ``k`` candidates
    instead, so the setting would not measure what it says."""
    index, reranker = cfg.get("index"), cfg.get("reranker")
    ef = index.get("ef_search") if hasattr(index, "keys") else None
    if not isinstance(ef, int) or "k" not in cfg:
        return []
    top_n = reranker.get("top_n") if hasattr(reranker, "keys") else None
    top_n = top_n if isinstance(top_n, int) else 0
    depth, binding = (top_n, "reranker.top_n") if top_n > cfg.k else (cfg.k, "k")
    if ef < depth:
        return [f"index.ef_search={ef} is out of range: must be >= the depth retrieved, "
                f"max(k, reranker.top_n) = {depth} (from {binding}); raise index.ef_search "
                f"or lower {binding}"]
    return []


@dataclass(frozen=True)
class HNSWSpec(DenseOption):
    """``index=hnsw``: FAISS ``IndexHNSWFlat`` by inner product. ``M``: links per node;
    ``ef_construction``: candidates kept while inserting; ``ef_search``: candidates kept per
    query (at least the depth retrieved, checked at composition)."""

    name: str = "hnsw"
    M: int = field(default=32, metadata={"ge": 2})  # links per node
    ef_construction: int = field(default=200, metadata={"ge": 1})  # candidates while building
    # candidates per query; at least the first stage's depth (ef_search_covers_depth)
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
        return timed_build(make, vectors)

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, faiss_module().SearchParametersHNSW(efSearch=self.ef_search))


OPTION = HNSWSpec
