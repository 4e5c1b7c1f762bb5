"""Per-query score normalisations for score-based fusion (``fusion.norm``).

Each is over the items one part returned for one query (after its depth cut), as ranx 0.3.21
defines them:

- ``minmax``:  ``(s - min) / max(max - min, 1e-9)``  -> [0, 1] (ranx ``min-max``)
- ``zscore``:  ``(s - mean) / max(std, 1e-9)``, std over the n scores (ddof 0) (ranx ``zmuv``)
- ``sum``:     ``(s - min) / max(sum(s) - n * min, 1e-9)``: shifted scores summing to 1 (ranx
  ``sum``)
- ``dbsf``:    distribution-based score fusion (Qdrant's, not in ranx): ``(s - lo) / (hi - lo)``
  with ``lo, hi = mean -+ 3 std`` (ddof 0), denominator floored at 1e-9 like the others; a
  score beyond 3 std falls outside [0, 1] and is kept so (no clipping).

The 1e-9 floor makes a query whose part returned one score (or equal scores) map them to 0
instead of dividing by zero.
"""

from __future__ import annotations

import numpy as np

from ragexp import settings
from ragexp.records import Ranking

FLOOR = 1e-9


def minmax(s: np.ndarray) -> np.ndarray:
    lo = s.min()
    return (s - lo) / max(s.max() - lo, FLOOR)


def zscore(s: np.ndarray) -> np.ndarray:
    return (s - s.mean()) / max(s.std(), FLOOR)


def sum_norm(s: np.ndarray) -> np.ndarray:
    lo = s.min()
    return (s - lo) / max(s.sum() - lo * len(s), FLOOR)


def dbsf(s: np.ndarray) -> np.ndarray:
    lo, hi = s.mean() - 3 * s.std(), s.mean() + 3 * s.std()
    return (s - lo) / max(hi - lo, FLOOR)


NORMS = {"minmax": minmax, "zscore": zscore, "sum": sum_norm, "dbsf": dbsf}


NORM = {"choices": tuple(NORMS)}  # what fusion.norm accepts (the field's metadata)


def check(norm: str) -> str:
    """``norm`` if it names a normalisation; raises ``InvalidValue`` listing them otherwise."""
    settings.refuse(settings.field_problems("fusion.norm", norm, NORM))
    return norm


def normalised(ranking: Ranking, norm: str) -> Ranking:
    """``ranking`` with each query's scores normalised by ``NORMS[norm]`` (shape kept: ``{qid:
    {item: score}}``). Raises ``InvalidValue`` for an unknown ``norm``."""
    fn = NORMS[check(norm)]
    out: Ranking = {}
    for qid, scores in ranking.items():
        items = list(scores)
        values = fn(np.array([scores[i] for i in items], dtype=np.float64)) if items else []
        out[qid] = {i: float(v) for i, v in zip(items, values)}
    return out
