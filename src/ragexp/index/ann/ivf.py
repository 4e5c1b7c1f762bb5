"""``index=ivf``: FAISS ``IndexIVFFlat`` (inverted lists over a k-means coarse quantizer, Jégou
et al., TPAMI 2011): ``nlist`` lists trained on a seeded sample; ``nprobe`` at query time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.index.ann import (ApproxSearch, BuiltIndex, DenseOption, DenseSearch, timed_build,
                              training_sample)
from ragexp.index.flat import faiss_module


@dataclass(frozen=True)
class IVFSpec(DenseOption):
    """``index=ivf``: FAISS ``IndexIVFFlat`` by inner product over ``nlist`` k-means lists,
    trained on ``train_size`` vectors (None: ``64 x nlist``) drawn with ``seed``; ``nprobe``
    lists searched per query. Raises ``InvalidValue`` at build when ``nlist`` exceeds the
    number of passages or ``train_size`` (FAISS's k-means needs at least ``nlist`` points; it
    warns below 39 x ``nlist``); composition refuses the same where it can know them
    (``config.validation``)."""

    name: str = "ivf"
    nlist: int = field(default=64, metadata={"ge": 1})  # k-means lists; at most the passages
    nprobe: int = field(default=8, metadata={"ge": 1})  # lists searched per query, <= nlist
    seed: int = 0  # of the training sample and of k-means
    train_size: int | None = field(default=None, metadata={"ge": 1})  # null: 64 x nlist
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
        return timed_build(make, vectors,
                            training_sample(vectors, self._train_size(), self.seed))

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, faiss_module().SearchParametersIVF(nprobe=self.nprobe))


OPTION = IVFSpec
