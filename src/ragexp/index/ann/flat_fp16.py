"""``index=flat_fp16``: exhaustive search by inner product over passage vectors stored as
float16 (FAISS ``IndexScalarQuantizer`` with ``QT_fp16``): every passage is scored, as ``flat``
scores them, from half the memory (2 bytes a dimension instead of 4: a million 384-dimension
MiniLM vectors take 0.77 GB, not 1.5 GB). Each stored component is rounded to the nearest
float16 (relative error at most 2^-11), so a score moves by about 1e-5 on unit vectors, and
passages whose exact scores are that close may swap. It is therefore not ``exact``: a run
logs what the rounding costs against exact search (``index.recall_at_10_vs_exact``) and the
bytes it saves (``index.bytes``). Nothing to train, no query-time setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragexp.index.ann import ApproxSearch, BuiltIndex, DenseOption, DenseSearch, timed_build
from ragexp.index.flat import faiss_module


@dataclass(frozen=True)
class FlatFP16Spec(DenseOption):
    """``index=flat_fp16``: FAISS ``IndexScalarQuantizer(dim, QT_fp16, METRIC_INNER_PRODUCT)``
    over the passage vectors (the module's docstring: what it saves, what it may swap)."""

    name: str = "flat_fp16"
    exact = False

    def build_params(self) -> dict:
        return {}

    def search_params(self) -> dict:
        return {}

    def build(self, vectors: np.ndarray) -> BuiltIndex:
        def make():
            faiss = faiss_module()
            return faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_fp16,
                                              faiss.METRIC_INNER_PRODUCT)
        return timed_build(make, vectors)

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, None)


OPTION = FlatFP16Spec
