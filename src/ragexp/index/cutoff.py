"""A top-k cut that agrees with trec_eval's tie rule.

Every ranking ragexp scores or writes is ordered by score, ties by item id descending
(``records.ordered``, trec_eval's rule). An index cuts its top k by position instead (FAISS,
``bm25.TopK``: ties by the lower index), so where several items tie at the k-th score the ones
it keeps were not the ones trec_eval ranks first: RR@1 on three identical passages read 1.0 at
``k=1`` and 0.5 at ``k=10``. ``top_k_by_id`` asks an exact index one place deeper than ``k``;
a query whose (k+1)-th score equals its k-th is searched again, deeper (doubling), until its
last score is below the k-th or every item is in, and the tied items are then cut by id as
trec_eval orders them. Queries without a tie across the cut cost one extra place.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# search(rows, depth) -> (scores, ids), each (len(rows), depth), best first; -1 ids pad
Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def top_k_by_id(search: Search, n_rows: int, k: int, n_items: int,
                key: Callable[[int], str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query row, ``(positions, scores)`` of its best ``min(k, n_items)`` items, ties at
    the k-th score cut by ``key(position)`` (the item's id) descending (str order, which is
    UTF-8 byte order, as trec_eval compares ids). ``search`` must be exact (every item scoring
    above the last one it returns is returned) and return positions, -1 for padding (a BM25
    row with fewer matching items). Raises ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise ValueError(f"top_k_by_id needs k >= 1, got {k}")
    depth = min(k + 1, n_items)
    scores, ids = search(np.arange(n_rows), depth)
    rows = [(s, i) for s, i in zip(scores, ids)]
    pending = [r for r in range(n_rows) if _tied_past(*rows[r], k)]
    while pending and depth < n_items:
        depth = min(2 * depth, n_items)
        more_s, more_i = search(np.asarray(pending), depth)
        for r, s, i in zip(pending, more_s, more_i):
            rows[r] = (s, i)
        pending = [r for r in pending if _tied_past(*rows[r], k)]
    return [_cut(s, i, k, key) for s, i in rows]


def _tied_past(scores: np.ndarray, ids: np.ndarray, k: int) -> bool:
    """Whether the row's last item is a real one tied with its k-th: items beyond may tie too."""
    return len(ids) > k and ids[-1] >= 0 and scores[-1] == scores[k - 1]


def _cut(scores: np.ndarray, ids: np.ndarray, k: int,
         key: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
    real = ids >= 0
    scores, ids = scores[real], ids[real]
    if len(ids) <= k:
        return ids, scores
    kth = scores[k - 1]
    above = scores > kth
    tied = np.flatnonzero(scores == kth)
    need = k - int(above.sum())
    chosen = sorted(tied, key=lambda j: key(int(ids[j])), reverse=True)[:need]
    keep = np.flatnonzero(above).tolist() + chosen
    return ids[keep], scores[keep]
