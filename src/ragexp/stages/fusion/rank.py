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
from ragexp.records import Ranking, ordered


K = {"ge": 0}  # what fusion.k accepts (the field's metadata)
WEIGHT = {"ge": 0}  # what each of fusion.weights accepts


def weight_problems(weights: Mapping[str, float], on: list[str]) -> list[str]:
    """``fusion.weights`` (``{part: w}``; a part not named weighs 1) each ``>= 0``, and not 0
    for every part of ``on`` (the parts fused), where every fused score would be 0."""
    out = [p for name, w in weights.items()
           for p in settings.field_problems(f"fusion.weights.{name}", w, WEIGHT)]
    if on and all(weights.get(name, 1.0) == 0 for name in on):
        out.append(f"fusion.weights are 0 for every enabled part ({', '.join(on)}): every "
                   f"fused score would be 0; give at least one a weight > 0")
    return out


@settings.cross_field_rule
def weights_name_enabled_parts(cfg) -> list[str]:
    """``fusion.weights`` of a hybrid: ``weight_problems`` with ``retriever.parts``' enabled
    parts, and each weight naming a part of ``retriever.parts``, one on a part switched off
    only at the weight of no effect, 1."""
    fusion, retriever = cfg.get("fusion"), cfg.get("retriever")
    parts = retriever.get("parts") if hasattr(retriever, "keys") else None
    weights = fusion.get("weights") if hasattr(fusion, "keys") else None
    if not hasattr(parts, "keys") or not hasattr(weights, "keys"):
        return []
    on = [name for name in parts if parts[name] is not None]
    enabled = f"the enabled parts are {', '.join(on) or 'none'}"
    problems = weight_problems(weights, on)
    for name, w in weights.items():
        key = f"fusion.weights.{name}"
        if w < 0:
            continue  # weight_problems says it
        if name not in parts:
            problems.append(f"{key}={w} names no part of retriever.parts: {enabled}")
        elif name not in on and w != 1:
            problems.append(f"{key}={w} weighs a part switched off (retriever.parts.{name}="
                            f"null): {enabled}")
    return problems
DEFAULT_K = 60.0  # the paper's value


def rrf(rankings: Mapping[str, Ranking], k: float = DEFAULT_K,
        weights: Mapping[str, float] | None = None) -> Ranking:
    """``{qid: {item: sum_p w_p / (k + rank_p(item))}}`` over ``rankings`` (``{part: Ranking}``);
    ``weights`` missing a part give it 1. Raises ``InvalidValue`` for ``k < 0``, a negative
    weight, or weight 0 for every part of ``rankings`` (``weight_problems``). ranx's ``rrf`` is the unweighted case; the weighted one equals ranx's ``wsum`` of
    each part's ``rrf`` scores (no normalisation)."""
    weights = dict(weights or {})
    settings.refuse(settings.field_problems("fusion.k", k, K) + weight_problems(
        weights, list(rankings)))
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
