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

``block_size`` B (``index.block_size``, null by default: the one FAISS call above) searches in
blocks instead, bounding the score matrix: queries go ``QUERY_TILE`` at a time and passages B
at a time (B rounded up to a multiple of ``PASSAGE_TILE``), so the search holds at most
``QUERY_TILE x B`` scores beside its (n_queries, k) result, whatever the number of queries.
Every score comes from one float64 gemm of a fixed shape (``QUERY_TILE x PASSAGE_TILE``, the
last tiles padded with zero rows) rounded to float32, so its bits do not depend on B or on how
many queries were asked (``blocked_search``);
each query keeps its top k by score, ties by the lower passage id. The ranking is therefore
bit-identical (ids, scores, tie order) whatever B, one block included. Its scores can differ
from the unblocked FAISS kernel's in the last bit (a float32 sgemm), so a tie or near-tie
at the k-th place may resolve differently there.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ragexp.errors import InvalidValue

QUERY_TILE = 32  # queries per gemm of a blocked search
PASSAGE_TILE = 1024  # passages per gemm of a blocked search (FAISS's database tile too)


def faiss_module() -> Any:
    """The ``faiss`` module, imported at first use: 0.04 s that a BM25-only run never pays.
    Its loader's INFO lines (which CPU build it tried: "Could not load library with AVX512
    support due to: ModuleNotFoundError ...") are kept out of the run's log, as they were when
    faiss loaded before Hydra configured logging; its warnings still show."""
    loader = logging.getLogger("faiss.loader")
    level = loader.level
    loader.setLevel(max(level, logging.WARNING))
    try:
        # defer heavy import
        import faiss
    finally:
        loader.setLevel(level)
    return faiss


class FlatIPIndex:
    """Exact top-k by inner product over ``vectors``: (n, dim) float32, each row L2-normalised
    or all zero; ``block_size``: passages per block of a blocked search (None: one FAISS
    call). Raises ``InvalidValue`` for an empty or non-2-D matrix, a row of another norm (inner
    product would not be cosine) or a ``block_size`` below 1."""

    def __init__(self, vectors: np.ndarray, block_size: int | None = None):
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
        if block_size is not None and block_size < 1:
            raise InvalidValue(f"index.block_size must be >= 1 (passages per block), got "
                               f"{block_size}")
        self.block_size = block_size
        self.dim = vectors.shape[1]
        self.vectors = vectors.view()  # searched in place, never copied; read-only here
        self.vectors.flags.writeable = False

    def __len__(self) -> int:
        return len(self.vectors)

    @property
    def nbytes(self) -> int:
        """Bytes the index holds: the vectors it searches (n x dim x 4)."""
        return int(self.vectors.nbytes)

    def search(self, queries: np.ndarray, k: int, blas: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids): float32 and int64, each (n_queries, k), best first (``k`` capped at
        the number of vectors). ``blas``: a batch takes FAISS's BLAS path (one sgemm) whatever
        its size, instead of the per-query scan FAISS picks below its threshold; a blocked
        search (``block_size``) ignores it."""
        faiss = faiss_module()
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, len(self))
        if self.block_size is not None:
            return blocked_search(queries, self.vectors, k, self.block_size)
        old = faiss.cvar.distance_compute_blas_threshold
        if blas and len(queries) > 1:
            faiss.cvar.distance_compute_blas_threshold = 1
        try:
            return faiss.knn(queries, self.vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
        finally:
            faiss.cvar.distance_compute_blas_threshold = old


def blocked_search(queries: np.ndarray, vectors: np.ndarray, k: int,
                   block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner product of ``queries`` (nq, d) over ``vectors`` (n, d), both
    float32, ``k <= n``: (scores float32, ids int64), each (nq, k), best first, ties by the lower
    id. At most ``QUERY_TILE x block_size`` scores exist at once (``block_size`` rounded up to a
    multiple of ``PASSAGE_TILE``); each comes from a fixed-shape product, so the result does not
    depend on ``block_size`` or on the other queries of the batch. The product is a float64
    gemm rounded to float32: in a float32 sgemm a query's bits depended on its row within the
    tile on OpenBLAS's Haswell kernels (row 25 of a tile against row 0: 1 ulp; AVX-512 kernels
    gave the same bits), which a float64 sum rounded to float32 hides but for values within
    about 1e-16 of a float32 rounding boundary."""
    n, dim = vectors.shape
    step = -(-block_size // PASSAGE_TILE) * PASSAGE_TILE
    scores = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    tile = np.zeros((QUERY_TILE, dim), dtype=np.float64)
    spare = np.zeros((PASSAGE_TILE, dim), dtype=np.float64)
    for q0 in range(0, len(queries), QUERY_TILE):
        rows = min(QUERY_TILE, len(queries) - q0)
        tile[:rows], tile[rows:] = queries[q0:q0 + rows], 0.0
        best_s = np.zeros((rows, 0), dtype=np.float32)
        best_i = np.zeros((rows, 0), dtype=np.int64)
        for p0 in range(0, n, step):
            width = min(step, n - p0)
            block = np.empty((rows, width), dtype=np.float32)
            for t0 in range(0, width, PASSAGE_TILE):
                cols = min(PASSAGE_TILE, width - t0)
                # padded to the full tile: the gemm keeps its shape
                spare[:cols], spare[cols:] = vectors[p0 + t0:p0 + t0 + cols], 0.0
                block[:, t0:t0 + cols] = (tile @ spare.T)[:rows, :cols]
            cand_s = np.concatenate([best_s, block], axis=1)
            cand_i = np.concatenate([best_i, np.broadcast_to(
                np.arange(p0, p0 + width, dtype=np.int64), (rows, width))], axis=1)
            best_s, best_i = top_k_ties_by_id(cand_s, cand_i, k)
        scores[q0:q0 + rows], ids[q0:q0 + rows] = best_s, best_i
    return scores, ids


def top_k_ties_by_id(scores: np.ndarray, ids: np.ndarray,
                     k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores``/``ids`` (r, m), the ``min(k, m)`` best by score, ties by the lower
    id, best first: (r, min(k, m)) each. ``np.partition`` narrows each row to the items at or
    above its k-th score; the ties at that score are cut by id, then a ``lexsort`` orders them."""
    m = scores.shape[1]
    if m > k:
        kth = np.partition(scores, m - k, axis=1)[:, m - k:m - k + 1]
        above = scores > kth
        tied = scores == kth
        # among the tied, the lowest ids fill the places the items above leave
        need = k - above.sum(axis=1)
        t_rows, t_cols = np.nonzero(tied)
        by_id = np.lexsort((ids[t_rows, t_cols], t_rows))
        t_rows, t_cols = t_rows[by_id], t_cols[by_id]
        first = np.searchsorted(t_rows, t_rows)  # where each row's ties start
        chosen = np.arange(len(t_rows)) - first < need[t_rows]
        keep = above.copy()
        keep[t_rows[chosen], t_cols[chosen]] = True
        rows, cols = np.nonzero(keep)
        scores = scores[rows, cols].reshape(len(scores), k)
        ids = ids[rows, cols].reshape(len(scores), k)
    order = np.lexsort((ids, -scores), axis=1) if scores.size else np.zeros_like(ids)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)
