"""Exact dense search: FAISS's flat inner-product search over L2-normalised float32 vectors
(= cosine).

``search`` runs ``faiss.knn`` with ``METRIC_INNER_PRODUCT``: the kernel ``IndexFlatIP.search``
runs (``knn_inner_product``), on the caller's matrix. An ``IndexFlatIP`` would copy the vectors
into its own storage on ``add``: at a million 384-d passages that is a second 1.5 GB, measured
by ``make bench-scale``, for the same results (``make bench`` checks the ids agree).

A zero vector (a text with nothing to embed, see ``HashEmbedder``) is allowed: its inner product
with anything is 0, the cosine convention for an empty text.

All queries of a run go through one ``search`` call. FAISS (1.8+) decides per call whether to
use its BLAS kernel (one sgemm for the whole batch) or a per-query scan, by comparing
``nq * d`` with ``distance_compute_blas_threshold`` (128,000 by default): a typical golden set
(about 100 queries x 384 dims) falls under it and is scanned query by query. ``search`` lowers
the threshold for batches so they take the BLAS path; ``make bench`` measures the difference.
"""

from __future__ import annotations

import faiss
import numpy as np

from ragexp.errors import InvalidValue


class FlatIPIndex:
    """Exact top-k by inner product over ``vectors``: (n, dim) float32, each row L2-normalised
    or all zero. Raises ``ValueError`` for an empty or non-2-D matrix or a row of another norm
    (inner product would not be cosine)."""

    def __init__(self, vectors: np.ndarray):
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or not len(vectors):
            raise InvalidValue(f"need a non-empty (n, d) matrix, got shape {vectors.shape}")
        # Row norms without an (n, dim) temporary (np.linalg.norm makes one: 1.5 GB at a
        # million 384-d vectors), accumulated in float64.
        norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))
        bad = np.flatnonzero(~(np.isclose(norms, 1.0, atol=1e-3) | (norms == 0)))
        if len(bad):
            raise InvalidValue(f"vectors must be L2-normalised (or zero) for inner product = "
                               f"cosine; {len(bad)} of {len(norms)} rows are not, first row "
                               f"{bad[0]} with norm {norms[bad[0]]:.4g}")
        self.dim = vectors.shape[1]
        self.vectors = vectors.view()  # searched in place, never copied; read-only here
        self.vectors.flags.writeable = False

    def __len__(self) -> int:
        return len(self.vectors)

    def search(self, queries: np.ndarray, k: int, blas: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids): float32 and int64, each (n_queries, k), best first (``k`` capped at
        the number of vectors). ``blas``: a batch takes FAISS's BLAS path (one sgemm) whatever
        its size, instead of the per-query scan FAISS picks below its threshold."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, len(self))
        old = faiss.cvar.distance_compute_blas_threshold
        if blas and len(queries) > 1:
            faiss.cvar.distance_compute_blas_threshold = 1
        try:
            return faiss.knn(queries, self.vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
        finally:
            faiss.cvar.distance_compute_blas_threshold = old
