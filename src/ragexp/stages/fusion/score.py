"""Score-based fusion: each part's scores normalised per query (``fusion.norm``, see
``norm.py``), then combined. With ``n_p(d)`` part p's normalised score of d (0 when p did not
return d) and ``|d|`` the number of parts that returned d:

- ``combsum`` (Fox & Shaw, TREC-2 1994):  ``CombSUM(d) = sum_p n_p(d)``
- ``combmnz`` (Fox & Shaw, TREC-2 1994):  ``CombMNZ(d) = |d| * sum_p n_p(d)``, so an item found
  by more parts is multiplied up (ranx's ``comb_mnz``; "MNZ": multiplied by the number of
  non-zero scores in the paper, counted by ranx, and here, as the parts that returned d even
  when its normalised score is 0, e.g. a part's minimum under ``minmax``)
- ``convex``: ``alpha * n_a(d) + (1 - alpha) * n_b(d)`` for exactly two parts, ``a`` named by
  ``fusion.part`` (the convex combination of Bruch, Gai & Ingber, TOIS 2023; ranx's ``wsum``
  with weights ``[alpha, 1 - alpha]``)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragexp import settings
from ragexp.records import Ranking
from ragexp.stages.fusion.norm import NORM, normalised


def combine(rankings: Mapping[str, Ranking], norm: str, weights: Mapping[str, float],
            by_count: bool = False) -> Ranking:
    """``{qid: {item: sum_p weights[p] * n_p(item)}}`` (times the number of parts that returned
    the item when ``by_count``), ``n_p`` part p's scores normalised by ``norm``."""
    fused: Ranking = {}
    counts: dict[str, dict[str, int]] = {}
    for part, ranking in rankings.items():
        w = float(weights[part])
        for qid, scores in normalised(ranking, norm).items():
            out, seen = fused.setdefault(qid, {}), counts.setdefault(qid, {})
            for item, s in scores.items():
                out[item] = out.get(item, 0.0) + w * s
                seen[item] = seen.get(item, 0) + 1
    if by_count:
        return {q: {i: s * counts[q][i] for i, s in scores.items()} for q, scores in fused.items()}
    return fused


@dataclass(eq=False)
class CombSUM:
    """``fusion=combsum``: the sum of each part's normalised scores."""

    # score normalisation before summing: minmax, zscore, sum or dbsf (norm.py)
    norm: str = field(default="minmax", metadata=NORM)
    name: str = "combsum"

    def __post_init__(self) -> None:
        settings.check(self, "fusion")

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        return combine(rankings, self.norm, {p: 1.0 for p in rankings})


@dataclass(eq=False)
class CombMNZ:
    """``fusion=combmnz``: CombSUM times the number of parts that returned the item."""

    norm: str = field(default="minmax", metadata=NORM)
    name: str = "combmnz"

    def __post_init__(self) -> None:
        settings.check(self, "fusion")

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        return combine(rankings, self.norm, {p: 1.0 for p in rankings}, by_count=True)


def two_parts(part: str, parts) -> list[str]:
    """``fusion=convex`` fuses exactly two ``parts`` (names), one of them ``part``."""
    if len(parts) == 2 and part in parts:
        return []
    return [f"fusion=convex combines exactly two parts, one of them fusion.part={part}; "
            f"retriever.parts has {sorted(parts)} on"]


@settings.cross_field_rule
def convex_fuses_two_parts(cfg) -> list[str]:
    """``two_parts`` of ``fusion=convex`` with ``retriever=hybrid``'s enabled parts."""
    fusion, retriever = cfg.get("fusion"), cfg.get("retriever")
    parts = retriever.get("parts") if hasattr(retriever, "keys") else None
    if not hasattr(parts, "keys") or not hasattr(fusion, "keys") \
            or fusion.get("name") != "convex":
        return []
    on = [name for name in parts if parts[name] is not None]
    return two_parts(fusion.get("part"), on) if on else []


@dataclass(eq=False)
class Convex:
    """``fusion=convex``: ``alpha`` times part ``part``'s normalised score plus ``1 - alpha``
    times the other part's. Raises ``InvalidValue`` for alpha outside [0, 1], or, when fusing,
    unless exactly two parts are on and one of them is ``part``."""

    alpha: float = field(default=0.5, metadata={"ge": 0, "le": 1})  # weight of fusion.part
    part: str = "dense"  # the part alpha weighs; the other one weighs 1 - alpha
    norm: str = field(default="minmax", metadata=NORM)
    name: str = "convex"

    def __post_init__(self) -> None:
        settings.check(self, "fusion")
        self.alpha = float(self.alpha)

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        settings.refuse(two_parts(self.part, rankings))
        weights = {p: self.alpha if p == self.part else 1 - self.alpha for p in rankings}
        return combine(rankings, self.norm, weights)
