"""Which generator settings make a question set that ranks configurations as the user's own
questions do (``ragexp questions calibrate``).

A source's ranking of a sweep's configurations is the order of the runs' mean score on its
questions; two sources agree when Kendall's tau-b of those means is high. Every figure is the
question-set certificate's (``evaluation.certificate``): ``tau`` between two sources,
``bootstrap_tau`` for its interval (resampling questions), ``halves`` for a seeded split.

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
from ragexp.evaluation import certificate as figures
from ragexp.evaluation import significance



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


KINDS = "kinds"  # a grid key that is no generator setting: the kinds mix, a list of kinds


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
        """The ``questions generate`` overrides that write this point's questions (every
        setting but the kinds mix, ``KINDS``)."""
        return [f"generator.{k}={v}" for k, v in self.settings if k != KINDS]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds mix asked for (``questions generate --kinds``, in turn): the ``kinds``
        setting, a list of kinds; ``()`` (every kind the generator writes) without one."""
        return tuple(next((v for k, v in self.settings if k == KINDS), None) or ())


def grid(declared: Mapping[str, Mapping[str, Sequence]]) -> list[GridPoint]:
    """Every combination of each generator's declared values (``{generator: {key: [values]}}``,
    as ``conf/calibrate.yaml`` declares them), generators and keys in the given order; the key
    ``kinds`` takes lists of kinds (``[[], [factual, procedural]]``: every kind, or those two in
    turn). Raises ``InvalidValue`` for a key with no value, or a kinds mix that is not a list
    of kind names."""
    points = []
    for generator, keys in declared.items():
        empty = [k for k, values in keys.items() if not list(values)]
        if empty:
            raise InvalidValue(f"calibration grid of {generator}: no value for {empty}")
        if any(not isinstance(mix, list) or not all(isinstance(k, str) for k in mix)
               for mix in keys.get(KINDS, ())):
            raise InvalidValue(f"calibration grid of {generator}: each value of {KINDS} is a "
                               f"list of kinds ([] for every kind), got {list(keys[KINDS])}")
        for combo in itertools.product(*(list(v) for v in keys.values())):
            points.append(GridPoint(generator, tuple(
                (k, tuple(v) if k == KINDS else v) for k, v in zip(keys, combo))))
    return points


@dataclass(frozen=True)
class Calibration:
    """The chosen point, every point's tau on the tuning half (nDCG or the given measure), and
    the chosen point's tau against the check half with its bootstrap interval
    (``figures.bootstrap_tau``: ``check.median`` is the tau of the whole halves); the halves'
    sizes."""

    chosen: str
    tuning: dict[str, float]
    check: figures.Spread
    n_tune: int
    n_check: int


def calibrate(tables: Mapping[str, pd.DataFrame], points: Sequence[str], measure: str,
              hand: str = "hand", seed: int = 0, resamples: int = figures.RESAMPLES
              ) -> Calibration:
    """Choose among the ``points`` (sources of the runs' tables) the one whose ranking of the
    runs agrees best with a tuning half of the ``hand`` questions, and measure it on the other.

    The hand questions (sorted ids) are split by ``figures.halves(n, default_rng(seed))``: the
    first half (``n // 2``) tunes, the rest checks (each in id order); the check tau's
    interval resamples with the same ``seed``. The chosen point has the highest tau on the
    tuning half; of equal taus, the first in ``points``; an undefined tau (every run tied on
    one side) never wins. Raises ``InvalidValue`` when fewer than 4 hand questions or 2 runs
    are there, or no point has a defined tau."""
    runs, ids, hand_scores = score_matrix(tables, hand, measure)
    if len(ids) < 4 or len(runs) < 2:
        raise InvalidValue(f"calibration needs at least 4 {hand} questions and 2 runs, got "
                           f"{len(ids)} and {len(runs)}")
    tune, check = (np.sort(h) for h in figures.halves(len(ids), np.random.default_rng(seed)))
    tuning, sets = {}, {}
    for point in points:
        _, _, sets[point] = score_matrix(tables, point, measure)
        tuning[point] = figures.tau(hand_scores[:, tune], sets[point])
    defined = [p for p in points if not math.isnan(tuning[p])]
    if not defined:
        raise InvalidValue("no grid point ranks the runs (every tau is undefined)")
    chosen = max(defined, key=lambda p: (tuning[p], -points.index(p)))
    interval = figures.bootstrap_tau(hand_scores[:, check], sets[chosen], resamples, seed)
    return Calibration(chosen, tuning, interval, len(tune), len(check))
