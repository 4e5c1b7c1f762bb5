"""Rank fusion.

Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009)::

    RRF(d) = sum over rankings r containing d of 1 / (k + rank_r(d))      (rank starts at 1)

``k`` damps the weight of top ranks: at k=60 (the paper's value) rank 1 and rank 2 differ by
about 1.6%, so agreement between retrievers dominates; at k=0 the score is plain reciprocal
rank, so one first place (1.0) ties second places in two lists (0.5 + 0.5) and beats third
places in two (0.67). Each input ranking is cut to its best ``depth`` items first.
"""

from __future__ import annotations

from ragexp.errors import InvalidValue
from ragexp.records import Ranking, ordered


def rrf(rankings: list[Ranking], k: float = 60.0, depth: int | None = None) -> Ranking:
    if k < 0:
        raise InvalidValue(f"RRF k must be >= 0, got {k}")
    if depth is not None and depth < 1:
        raise InvalidValue(f"RRF depth must be >= 1 (or None: whole rankings), got {depth}")
    fused: Ranking = {}
    for ranking in rankings:
        for qid, scores in ranking.items():
            out = fused.setdefault(qid, {})
            for rank, item in enumerate(ordered(scores)[:depth], start=1):
                out[item] = out.get(item, 0.0) + 1.0 / (k + rank)
    return fused
