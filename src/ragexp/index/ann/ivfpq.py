"""``index=ivfpq``: FAISS ``IndexIVFPQ``: the IVF lists (``ivf.py``) hold product-quantised
codes of ``m`` sub-vectors of ``nbits`` bits each (``m`` must divide the dimension)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.index.ann.ivf import IVFSpec
from ragexp.index.flat import faiss_module


@dataclass(frozen=True)
class IVFPQSpec(IVFSpec):
    """``index=ivfpq``: FAISS ``IndexIVFPQ``: the IVF lists hold product-quantised codes, ``m``
    sub-vectors of ``nbits`` bits each (``m x nbits / 8`` bytes a passage). Raises
    ``InvalidValue`` at build when ``m`` does not divide the dimension, or the corpus or
    ``train_size`` holds fewer vectors than ``nlist`` or than the ``2**nbits`` centroids of each
    sub-quantizer."""

    name: str = "ivfpq"
    m: int = field(default=16, metadata={"ge": 1})  # sub-vectors; must divide the dimension
    nbits: int = field(default=8, metadata={"ge": 1, "le": 16})  # bits per sub-vector code

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


OPTION = IVFPQSpec
