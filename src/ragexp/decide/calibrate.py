"""Whether a question set ranks configurations as the user's own questions do, and which
generator settings make one that does (``ragexp questions calibrate``, ``tools.question_validity``).

A source's ranking of a sweep's configurations is the order of the runs' mean score on its
questions. Two sources agree when Kendall's tau-b of those means (``stats.kendall_tau``) is
high; how far that tau is from chance is read from a **bootstrap over questions** (Efron &
Tibshirani 1993, ch. 13, percentile interval): each resample draws each source's questions with
replacement, independently, and recomputes the runs' means and their tau. A source's own
**split-half agreement** is the tau between the means on two random halves of its questions
(seeded; Voorhees & Buckley, "The effect of topic set size on retrieval experiment error",
SIGIR 2002): the agreement a second set of the same kind of questions could reach, so a
generated set below the hand set's split-half agreement disagrees beyond the hand set's noise.

Calibration (Azzopardi, de Rijke & Balog 2007 validate a query simulator by whether it ranks
systems as real queries do): the hand questions are split, seeded, into a tuning and a check
half; each grid point's set (a source of the pilot sweep) is scored by its tau against the
tuning half, the best is chosen, and its tau against the check half, which took no part in the
choice, is reported with its interval.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ragexp.errors import InvalidValue
from ragexp.evaluation import significance, stats

RESAMPLES = 1000
SPLITS = 200
LEVEL = 0.95


def score_matrix(tables: Mapping[str, pd.DataFrame], source: str, measure: str,
                 ids: Sequence[str] | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """``(runs, question ids, scores)``: ``scores[i, j]`` is run ``runs[i]``'s ``measure`` on
    question ``ids[j]`` of ``source`` (the ``source`` column of each run's per-question table;
    ``hand`` for a table without one). Questions are those every run scored, sorted by id, or
    ``ids`` in their order. Raises ``InvalidValue`` naming the source when no question is
    common to every run, or a run lacks one of ``ids``."""
    col = significance.column(measure)
    series = {}
    for run, table in tables.items():
        rows = table[table["source"].fillna("hand").astype(str) == source] \
            if "source" in table else (table if source == "hand" else table.iloc[:0])
        series[run] = rows.dropna(subset=[col]).set_index("id")[col].astype(float)
    common = set.intersection(*(set(s.index) for s in series.values())) if series else set()
    wanted = sorted(common) if ids is None else list(ids)
    if not wanted or not set(wanted) <= common:
        raise InvalidValue(f"source {source!r}: no {measure} scores common to every run"
                           if ids is None else f"source {source!r}: a run lacks questions "
                           f"{sorted(set(wanted) - common)[:3]}")
    runs = list(series)
    return runs, wanted, np.vstack([series[r].loc[wanted].to_numpy(float) for r in runs])


def tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b between the row means of ``a`` (runs x questions) and of ``b`` (the same
    runs, other questions); NaN when either ranking is all tied."""
    return stats.kendall_tau(a.mean(axis=1), b.mean(axis=1))


@dataclass(frozen=True)
class Interval:
    """A statistic and its percentile interval (``low``, ``high``); ``n``: the resamples whose
    statistic was defined (a resample on which every run ties has no tau)."""

    value: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.value:+.2f}"
        return f"{self.value:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def _percentiles(values: list[float], value: float, level: float) -> Interval:
    defined = np.array([v for v in values if not math.isnan(v)])
    if not len(defined):
        return Interval(value, math.nan, math.nan, 0)
    low, high = np.quantile(defined, [(1 - level) / 2, (1 + level) / 2])
    return Interval(value, float(low), float(high), len(defined))


def tau_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = 0,
                 level: float = LEVEL) -> Interval:
    """Tau between ``a`` and ``b`` (``tau``) with a bootstrap percentile interval: each of
    ``resamples`` draws ``a``'s and ``b``'s question columns with replacement (one seeded
    ``numpy.random.default_rng(seed)``: ``a``'s indices, then ``b``'s, per resample)."""
    if a.shape[0] != b.shape[0] or a.shape[0] < 2:
        raise InvalidValue(f"tau needs the same runs (>= 2) on both sources, got "
                           f"{a.shape[0]} and {b.shape[0]}")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        ia = rng.integers(0, a.shape[1], a.shape[1])
        ib = rng.integers(0, b.shape[1], b.shape[1])
        draws.append(tau(a[:, ia], b[:, ib]))
    return _percentiles(draws, tau(a, b), level)


def halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split of ``range(n)`` into two halves (the first gets ``n // 2``),
    each sorted: ``numpy.random.default_rng(seed).permutation(n)``."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def split_half(a: np.ndarray, splits: int = SPLITS, seed: int = 0,
               level: float = LEVEL) -> Interval:
    """A source's split-half agreement: the median tau between the run means on two random
    halves of its questions (``halves(n, seed + i)`` for ``i < splits``), with the spread of the
    splits as the interval. Raises ``InvalidValue`` for fewer than 2 questions."""
    if a.shape[1] < 2:
        raise InvalidValue("split-half agreement needs at least 2 questions")
    taus = []
    for i in range(splits):
        first, second = halves(a.shape[1], seed + i)
        taus.append(tau(a[:, first], a[:, second]))
    defined = [t for t in taus if not math.isnan(t)]
    median = float(np.median(defined)) if defined else math.nan
    return _percentiles(taus, median, level)


@dataclass(frozen=True)
class GridPoint:
    """One generator setting to try: the generator and its ``generator.*`` values; ``name`` is
    the source its questions carry in the pilot sweep (``known_item-strategy=popular-lam=0.1``
    reads back as the settings)."""

    generator: str
    settings: tuple[tuple[str, object], ...]

    @property
    def name(self) -> str:
        return "-".join([self.generator, *(f"{k}={v}" for k, v in self.settings)])

    @property
    def overrides(self) -> list[str]:
        """The ``questions generate`` overrides that write this point's questions."""
        return [f"generator.{k}={v}" for k, v in self.settings]


def grid(declared: Mapping[str, Mapping[str, Sequence]]) -> list[GridPoint]:
    """Every combination of each generator's declared values (``{generator: {key: [values]}}``,
    as ``conf/calibrate.yaml`` declares them), generators and keys in the given order. Raises
    ``InvalidValue`` for a key with no value."""
    points = []
    for generator, keys in declared.items():
        empty = [k for k, values in keys.items() if not list(values)]
        if empty:
            raise InvalidValue(f"calibration grid of {generator}: no value for {empty}")
        for combo in itertools.product(*(list(v) for v in keys.values())):
            points.append(GridPoint(generator, tuple(zip(keys, combo))))
    return points


@dataclass(frozen=True)
class Calibration:
    """The chosen point, every point's tau on the tuning half (nDCG or the given measure), and
    the chosen point's tau against the check half with its interval; the halves' sizes."""

    chosen: str
    tuning: dict[str, float]
    check: Interval
    n_tune: int
    n_check: int


def calibrate(tables: Mapping[str, pd.DataFrame], points: Sequence[str], measure: str,
              hand: str = "hand", seed: int = 0, resamples: int = RESAMPLES) -> Calibration:
    """Choose among the ``points`` (sources of the runs' tables) the one whose ranking of the
    runs agrees best with a tuning half of the ``hand`` questions, and measure it on the other.

    The hand questions (sorted ids) are split by ``halves(n, seed)``: the first half tunes, the
    second checks. The chosen point has the highest tau on the tuning half; of equal taus, the
    first in ``points``; an undefined tau (every run tied on one side) never wins. Raises
    ``InvalidValue`` when fewer than 4 hand questions or 2 runs are there, or no point has a
    defined tau."""
    runs, ids, hand_scores = score_matrix(tables, hand, measure)
    if len(ids) < 4 or len(runs) < 2:
        raise InvalidValue(f"calibration needs at least 4 {hand} questions and 2 runs, got "
                           f"{len(ids)} and {len(runs)}")
    tune, check = halves(len(ids), seed)
    tuning, sets = {}, {}
    for point in points:
        _, _, sets[point] = score_matrix(tables, point, measure)
        tuning[point] = tau(hand_scores[:, tune], sets[point])
    defined = [p for p in points if not math.isnan(tuning[p])]
    if not defined:
        raise InvalidValue("no grid point ranks the runs (every tau is undefined)")
    chosen = max(defined, key=lambda p: (tuning[p], -points.index(p)))
    interval = tau_interval(hand_scores[:, check], sets[chosen], resamples, seed)
    return Calibration(chosen, tuning, interval, len(tune), len(check))
