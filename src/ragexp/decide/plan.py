"""How many questions to generate: from a pilot sweep, the questions a paired test needs to tell
each pair of its top configurations apart (``ragexp questions plan``).

For the ``top`` runs by mean objective, every pair ``(a, b)`` gets the per-question differences
``d = score_a - score_b`` on the questions both were scored on, and ``stats.questions_needed(d)``:
the questions a two-sided paired t-test needs to detect ``mean(d)`` at 80 % power and alpha 0.05,
for the effect size ``d_z = mean(d) / sd(d)`` the pilot measured (Cohen 1988, ch. 2). The
largest finite need is how many questions tell every pair apart, if the pilot's effects are the
true ones; a pair with no difference (``inf``) can never be told apart, and a pair whose
difference is the same non-zero value on every question has no effect size (``nan``: the power
formula is undefined, ``stats.questions_needed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Mapping

import pandas as pd

from ragexp.errors import InvalidValue
from ragexp.evaluation import stats


@dataclass(frozen=True)
class PairNeed:
    """Runs ``a`` (the better by mean) and ``b``, their mean difference and the questions a
    paired test needs to tell them apart (``inf``: no difference; ``nan``: the same non-zero
    difference on every question, no effect size)."""

    a: str
    b: str
    delta: float
    needed: float


def pair_needs(scores: Mapping[str, pd.Series], top: int = 5) -> list[PairNeed]:
    """Every pair of the ``top`` runs by mean score (``scores``: per-question scores of each run
    over the same questions, indexed by question id), closest pair first. Raises
    ``InvalidValue`` for fewer than 2 runs or ``top < 2``."""
    if top < 2 or len(scores) < 2:
        raise InvalidValue(f"a plan needs at least 2 runs and --top >= 2 (got {len(scores)} "
                           f"runs, --top {top})")
    best = sorted(scores, key=lambda r: -float(scores[r].mean()))[:top]
    out = []
    for a, b in combinations(best, 2):
        d = (scores[a] - scores[b].loc[scores[a].index]).to_numpy(float)
        needed = stats.questions_needed(d)
        if math.isnan(needed) and not d.any():
            needed = math.inf  # identical on every question: no difference to detect
        out.append(PairNeed(a, b, float(d.mean()), needed))
    return sorted(out, key=lambda p: (-(p.needed if not math.isnan(p.needed) else -1.0), p.a,
                                      p.b))


def summary(needs: list[PairNeed], have: int) -> str:
    """One line: how many questions tell every pair apart, and how many pairs ``have`` does."""
    finite = [p.needed for p in needs if math.isfinite(p.needed)]
    told = sum(p.needed <= have for p in needs)
    never = sum(math.isinf(p.needed) for p in needs)
    most = int(max(finite)) if finite else None
    return (f"{told} of {len(needs)} pairs can be told apart with the pilot's {have} "
            f"questions; " + (f"{most} questions tell every pair apart that differs at all"
                              if most is not None else "no pair differs")
            + (f" ({never} pair(s) do not differ)" if never else "")
            + (f": generate about {max(most - have, 0)} more" if most is not None else ""))
