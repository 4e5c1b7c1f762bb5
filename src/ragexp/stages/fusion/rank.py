"""Rank-based fusion: an item's fused score depends only on its rank in each part.

Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009)::

    RRF(d) = sum over parts p returning d of w_p / (k + rank_p(d))      (rank starts at 1)

with every ``w_p = 1`` (``rrf``) or one weight per part (``weighted_rrf``). ``k`` damps the
weight of top ranks: at k=60 (the paper's value) rank 1 and rank 2 differ by about 1.6%, so
agreement between parts dominates; at k=0 the score is plain reciprocal rank, so one first place
(1.0) ties second places in two lists (0.5 + 0.5) and beats third places in two (0.67). Ranks
follow ``records.ordered`` (ties by id descending, as trec_eval).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.records import Ranking, ordered


K = {"ge": 0}  # what fusion.k accepts (the field's metadata)
DEFAULT_K = 60.0  # the paper's value


def rrf(rankings: Mapping[str, Ranking], k: float = DEFAULT_K,
        weights: Mapping[str, float] | None = None) -> Ranking:
    """``{qid: {item: sum_p w_p / (k + rank_p(item))}}`` over ``rankings`` (``{part: Ranking}``);
    ``weights`` missing a part give it 1. Raises ``InvalidValue`` for ``k < 0``, a negative
    weight, or weight 0 for every part of ``rankings`` (every fused score would be 0). ranx's ``rrf`` is the unweighted case; the weighted one equals ranx's ``wsum`` of
    each part's ``rrf`` scores (no normalisation)."""
    settings.refuse(settings.field_problems("fusion.k", k, K))
    weights = dict(weights or {})
    negative = {p: w for p, w in weights.items() if w < 0}
    if negative:
        raise InvalidValue(f"fusion.weights must be >= 0, got {negative}")
    if rankings and all(weights.get(part, 1.0) == 0 for part in rankings):
        raise InvalidValue(f"fusion.weights are 0 for every part fused ({', '.join(rankings)}): "
                           f"every fused score would be 0")
    fused: Ranking = {}
    for part, ranking in rankings.items():
        w = float(weights.get(part, 1.0))
        for qid, scores in ranking.items():
            out = fused.setdefault(qid, {})
            for rank, item in enumerate(ordered(scores), start=1):
                out[item] = out.get(item, 0.0) + w / (k + rank)
    return fused


@dataclass(eq=False)
class RRF:
    """``fusion=rrf`` (the default): reciprocal rank fusion, every part weighted 1."""

    k: float = field(default=DEFAULT_K, metadata=K)
    name: str = "rrf"

    def __post_init__(self) -> None:
        settings.check(self, "fusion")
        self.k = float(self.k)

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        return rrf(rankings, self.k)


@dataclass(eq=False)
class WeightedRRF:
    """``fusion=weighted_rrf``: reciprocal rank fusion with ``weights`` (``{part: w >= 0}``; a
    part not named weighs 1), e.g. ``fusion.weights.bm25=0.5`` halves BM25's votes."""

    k: float = field(default=DEFAULT_K, metadata=K)
    weights: Mapping[str, float] = field(default_factory=dict)  # {part: w >= 0}
    name: str = "weighted_rrf"

    def __post_init__(self) -> None:
        self.k, self.weights = float(self.k), dict(self.weights or {})
        rrf({}, self.k, self.weights)  # the same checks, once, at construction

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        return rrf(rankings, self.k, self.weights)
