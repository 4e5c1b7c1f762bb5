"""``index=flat``: exact search by inner product (``index.flat.FlatIPIndex``), the default and
the reference the approximate options are measured against (``index.recall_at_10_vs_exact``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragexp.index.ann import DenseOption, DenseSearch
from ragexp.index.flat import FlatIPIndex


@dataclass(frozen=True)
class FlatSpec(DenseOption):
    """``index=flat``: exact search, ``block_size`` passages per block (None: one FAISS call;
    see ``index/flat.py``)."""

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


OPTION = FlatSpec
