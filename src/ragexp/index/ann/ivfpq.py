"""``index=ivfpq``: FAISS ``IndexIVFPQ``: the IVF lists (``ivf.py``) hold product-quantised
codes of ``m`` sub-vectors of ``nbits`` bits each (``m`` must divide the dimension)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragexp import settings
from ragexp.index.ann.ivf import IVFSpec, inverted_lists

MAX_NBITS = 64  # beyond ``nbits``' range: 2**nbits is not computed (validation refuses it)


def training_covers_codebooks(pq, at: str) -> list[str]:
    """``train_size``, when set, at least the ``2**nbits`` centroids of each sub-quantizer,
    of an IVFPQ spec or its config node ``pq`` at key ``at``: each codebook's k-means needs a
    training vector per centroid."""
    size, nbits = pq.train_size, pq.nbits
    if not isinstance(size, int) or not isinstance(nbits, int) \
            or not 0 < nbits <= MAX_NBITS or size >= 2 ** nbits:
        return []
    return [f"{at}.train_size={size} is out of range: must be >= 2**{at}.nbits ({2 ** nbits}): "
            f"each codebook's k-means needs a training vector per centroid"]


train_size_covers_codebooks = settings.rule_for("index", ("train_size", "nbits"),
                                                training_covers_codebooks)


@dataclass(frozen=True)
class IVFPQSpec(IVFSpec):
    """``index=ivfpq``: FAISS ``IndexIVFPQ``: the IVF lists hold product-quantised codes, ``m``
    sub-vectors of ``nbits`` bits each (``m x nbits / 8`` bytes a passage). Raises
    ``InvalidValue`` as ``IVFSpec`` does, when built with ``train_size`` below ``2**nbits``,
    and at build when ``m`` does not divide the dimension or the corpus holds fewer vectors
    than the ``2**nbits`` centroids of each sub-quantizer (``fits``)."""

    name: str = "ivfpq"
    m: int = field(default=16, metadata={"ge": 1})  # sub-vectors; must divide the dimension
    nbits: int = field(default=8, metadata={"ge": 1, "le": 16})  # bits per sub-vector code
    RULES = (*IVFSpec.RULES, training_covers_codebooks)

    def _train_size(self) -> int:
        return self.train_size or 64 * max(self.nlist, 2 ** self.nbits)

    def fits(self, passages: tuple[int, str] | None, dimension: tuple[int, str] | None
             ) -> list[str]:
        out = super().fits(passages, dimension)
        if passages is not None and 2 ** self.nbits > passages[0]:
            out.append(f"index.nbits={self.nbits} needs at least {2 ** self.nbits} passages to "
                       f"train its codebooks ({passages[1]}): lower index.nbits")
        if dimension is not None and dimension[0] % self.m:
            dim, where = dimension
            divisors = ", ".join(str(d) for d in range(1, dim + 1) if dim % d == 0)
            out.append(f"index.m={self.m} does not divide the embedder's dimension "
                       f"({dim}{f', {where}' if where else ''}): choose a divisor of {dim} "
                       f"({divisors})")
        return out

    def _quantized(self, dim: int) -> Any:
        index = inverted_lists("IndexIVFPQ", dim, self.nlist, self.m, self.nbits)
        index.pq.cp.seed = self.seed
        return index


OPTION = IVFPQSpec
