"""``index=ivf``: FAISS ``IndexIVFFlat`` (inverted lists over a k-means coarse quantizer, Jégou
et al., TPAMI 2011): ``nlist`` lists trained on a seeded sample; ``nprobe`` at query time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ragexp import settings
from ragexp.index.ann import (ApproxSearch, BuiltIndex, DenseOption, DenseSearch, timed_build,
                              training_sample)
from ragexp.index.flat import faiss_module


def probes_within_lists(ivf, at: str) -> list[str]:
    """``nprobe`` (lists searched per query) at most ``nlist`` (lists built), of an IVF spec or
    its config node ``ivf`` at key ``at``."""
    return settings.ordered(f"{at}.nprobe", ivf.nprobe, f"{at}.nlist", ivf.nlist, strict=False)


def training_covers_lists(ivf, at: str) -> list[str]:
    """``train_size``, when set, at least ``nlist``: FAISS's k-means refuses fewer points than
    centroids (it only warns below 39 per centroid, ``Clustering.min_points_per_centroid``)."""
    size, nlist = ivf.train_size, ivf.nlist
    if not isinstance(size, int) or not isinstance(nlist, int) or size >= nlist:
        return []
    return [f"{at}.train_size={size} is out of range: must be >= {at}.nlist ({nlist}): k-means "
            f"needs a training vector per list (FAISS warns below 39 x nlist = {39 * nlist:,})"]


nprobe_within_nlist = settings.rule_for("index", ("nprobe", "nlist"), probes_within_lists)
train_size_covers_nlist = settings.rule_for("index", ("train_size", "nlist"),
                                            training_covers_lists)


def inverted_lists(kind: str, dim: int, nlist: int, *codes: int) -> Any:
    """FAISS's ``kind`` (``IndexIVFFlat``, ``IndexIVFPQ``) by inner product over ``nlist``
    lists of a flat coarse quantizer of dimension ``dim`` that the index owns; ``codes``: the
    arguments ``kind`` takes after ``nlist`` (``m``, ``nbits``)."""
    faiss = faiss_module()
    quantizer = faiss.IndexFlatIP(dim)
    index = getattr(faiss, kind)(quantizer, dim, nlist, *codes, faiss.METRIC_INNER_PRODUCT)
    index.own_fields = True
    quantizer.this.disown()
    return index


@dataclass(frozen=True)
class IVFSpec(DenseOption):
    """``index=ivf``: FAISS ``IndexIVFFlat`` by inner product over ``nlist`` k-means lists,
    trained on ``train_size`` vectors (None: ``64 x nlist``) drawn with ``seed``; ``nprobe``
    lists searched per query. Raises ``InvalidValue`` when built with ``nprobe`` above
    ``nlist`` or ``train_size`` below it (``RULES``), and at build when ``nlist`` exceeds the
    number of passages (``fits``: FAISS's k-means needs at least ``nlist`` points; it warns
    below 39 x ``nlist``); composition refuses the same, the passages where it can know them
    (``config.validation``)."""

    name: str = "ivf"
    nlist: int = field(default=64, metadata={"ge": 1})  # k-means lists; at most the passages
    nprobe: int = field(default=8, metadata={"ge": 1})  # lists searched per query, <= nlist
    seed: int = 0  # of the training sample and of k-means
    train_size: int | None = field(default=None, metadata={"ge": 1})  # null: 64 x nlist
    exact = False
    RULES = (probes_within_lists, training_covers_lists)

    def build_params(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("name", "nprobe")}

    def search_params(self) -> dict:
        return {"nprobe": self.nprobe}

    def _train_size(self) -> int:
        return self.train_size or 64 * self.nlist

    def fits(self, passages: tuple[int, str] | None, dimension: tuple[int, str] | None
             ) -> list[str]:
        if passages is None or self.nlist <= passages[0]:
            return []
        return [f"index.nlist={self.nlist} is larger than the corpus ({passages[1]}): each list "
                f"needs a training vector; lower index.nlist"]

    def _quantized(self, dim: int) -> Any:
        return inverted_lists("IndexIVFFlat", dim, self.nlist)

    def build(self, vectors: np.ndarray) -> BuiltIndex:
        self.refuse_unfit(vectors)

        def make():
            index = self._quantized(vectors.shape[1])
            index.cp.seed = self.seed
            return index
        return timed_build(make, vectors,
                            training_sample(vectors, self._train_size(), self.seed))

    def searcher(self, built: BuiltIndex) -> DenseSearch:
        return ApproxSearch(built, faiss_module().SearchParametersIVF(nprobe=self.nprobe))


OPTION = IVFSpec
