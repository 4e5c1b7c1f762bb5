"""Hand-written and generated questions side by side: which questions decide, and whether the
sources agree on the order of a sweep's configurations.

A dataset can hold questions from several sources (``hand``: written by a person, the default;
``generated``: ``ragexp questions generate``). The config key ``objective_source`` (default
``hand``) says which questions drive the objective, the sweep's choice and the gate: ``hand``
(or any source name) takes that source's questions, ``all`` every question. A run whose questions
come from one source is decided by all of them, whatever the key says.

Agreement between two sources ``a`` and ``b`` over a sweep's runs (``agreement``):

- **Kendall's tau-b** (``stats.kendall_tau``) between the runs' mean objective on ``a`` and on
  ``b``: 1 when both order the configurations alike;
- whether the **winner** (highest mean) is the same, and whether the **tied-with-best** sets
  (``stats.tied_with_best`` on each source's questions) are the same;
- a warning when tau is below ``TAU_FLOOR`` ("the generated questions rank configurations unlike
  yours"): a decision taken on them would not be the one the hand-written questions take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Mapping

import pandas as pd

from ragexp.errors import InvalidValue, counted
from ragexp.evaluation import significance, stats
from ragexp.records import HAND, OVERALL

ALL_SOURCES = OVERALL  # every source together: no source may be named so
TAU_FLOOR = 0.6


def sources_of(table: pd.DataFrame) -> list[str]:
    """The sources of a per-question table's questions, sorted (``hand`` for a table written
    before questions had a source)."""
    if "source" not in table:
        return [HAND]
    return sorted(table["source"].fillna(HAND).astype(str).unique())


def refuse_unknown(source: str, queries) -> None:
    """Raise ``InvalidValue`` when ``objective_source=source`` names none of the sources of
    ``queries`` (the questions a run scores) while they hold several, before the run does any
    work: a typo (``hnd``) ran the whole job and then failed it with a traceback, and in a sweep
    the first skipped job's objective stopped the sweep. ``all``, and any source over questions
    of one source (which decide whole), are taken as they are (``deciding``)."""
    have = sorted({q.source for q in queries})
    if source != ALL_SOURCES and len(have) > 1 and source not in have:
        raise InvalidValue(f"objective_source={source!r}: the scored questions' sources are "
                           f"{', '.join(have)} (or all); nothing was run")


def deciding(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """The rows of a per-question table that decide under ``objective_source=source``: all of
    them when the table has one source or ``source`` is ``all``, else that source's. Raises
    ``InvalidValue`` naming the sources there are when ``source`` is not one of them."""
    have = sources_of(table)
    if source == ALL_SOURCES or len(have) < 2:
        return table
    if source not in have:
        raise InvalidValue(f"objective_source={source!r}: the questions' sources are "
                           f"{', '.join(have)} (or all)")
    return table[table["source"].astype(str) == source]


@dataclass(frozen=True)
class Choice:
    """One source's choice: its question count, the best run, the runs tied with it, and each
    run's mean objective."""

    source: str
    n: int
    best: str
    tied: tuple[str, ...]
    means: dict[str, float]


@dataclass(frozen=True)
class Agreement:
    """Two sources compared over the same runs: Kendall's tau of their orders, and whether
    their winners and tied-with-best sets agree."""

    a: str
    b: str
    tau: float
    winner_agrees: bool
    tied_agree: bool

    @property
    def warn(self) -> bool:
        """Tau below ``TAU_FLOOR``; never when tau is undefined (a source on which every
        configuration ties has no order to agree with)."""
        return not math.isnan(self.tau) and self.tau < TAU_FLOOR


def choices(tables: Mapping[str, pd.DataFrame], objective: str,
            method: str = "holm") -> dict[str, Choice]:
    """Per source (when the first table has several), the choice its questions make among the
    runs scored on the same questions (``selection``'s rule, on that source's rows)."""
    first = next(iter(tables.values()))
    col = significance.column(objective)
    out = {}
    names = sorted(sources_of(first), key=lambda s: (s != HAND, s))  # hand first
    for source in names if len(names) > 1 else []:
        sub = {r: t[t["source"].astype(str) == source] for r, t in tables.items()
               if "source" in t}
        series = {r: t.dropna(subset=[col]).set_index("id")[col].astype(float)
                  for r, t in sub.items()}
        ids = sorted(next(iter(series.values())).index)
        scores = {r: s.loc[ids] for r, s in series.items() if set(s.index) == set(ids)}
        if not ids or len(scores) < 2:
            continue
        tied = stats.tied_with_best(scores, objective, method, intervals=False)
        out[source] = Choice(source, len(ids), tied.best, tied.tied,
                             {r: float(s.mean()) for r, s in scores.items()})
    return out


def agreement(chosen: Mapping[str, Choice]) -> list[Agreement]:
    """Every pair of sources (``hand`` first when present), over the runs both scored."""
    names = sorted(chosen, key=lambda s: (s != HAND, s))
    out = []
    for a, b in combinations(names, 2):
        runs = [r for r in chosen[a].means if r in chosen[b].means]
        tau = (stats.kendall_tau([chosen[a].means[r] for r in runs],
                                 [chosen[b].means[r] for r in runs])
               if len(runs) >= 2 else float("nan"))
        out.append(Agreement(a, b, tau, chosen[a].best == chosen[b].best,
                             set(chosen[a].tied) == set(chosen[b].tied)))
    return out


def lines(chosen: Mapping[str, Choice], pairs: list[Agreement], label: Mapping[str, str],
          objective: str, deciding_source: str) -> list[str]:
    """What the console, ``compare``, the page and the gate print about the sources."""
    if not chosen:
        return []
    out = [f"by source ({objective}; objective_source={deciding_source} decides): " + "; ".join(
        f"{c.source} ({counted(c.n, 'question')}) best {label.get(c.best, c.best[:8])}, "
        f"{len(c.tied)} tied with it" for c in chosen.values())]
    for p in pairs:
        only = [f"{s} only: " + ", ".join(label.get(r, r[:8]) for r in mine if r not in theirs)
                for s, mine, theirs in ((p.a, chosen[p.a].tied, chosen[p.b].tied),
                                        (p.b, chosen[p.b].tied, chosen[p.a].tied))
                if set(mine) - set(theirs)]
        tau = ("undefined (every configuration ties on one source)" if math.isnan(p.tau)
               else f"{p.tau:.2f}")
        out.append(f"{p.a} vs {p.b}: Kendall's tau {tau}; winner "
                   f"{'agrees' if p.winner_agrees else 'differs'}; tied-with-best sets "
                   + ("agree" if p.tied_agree else f"differ ({'; '.join(only)})"))
        if p.warn:
            yours = "yours" if p.a == HAND else f"the {p.a} ones"
            out.append(f"warning: the {p.b} questions rank configurations unlike {yours} "
                       f"(Kendall's tau {p.tau:.2f} < {TAU_FLOOR})")
    return out


def to_json(chosen: Mapping[str, Choice], pairs: list[Agreement],
            label: Mapping[str, str], shown: list[str]) -> dict:
    """The ``ragexp.sources`` tag of a sweep's parent run: each source's choice, each pair's
    agreement, and the ``lines`` printed (``ragexp gate`` shows them for the run's sweep)."""
    return {"lines": shown, "sources": {c.source: {"n": c.n, "best": label.get(c.best, c.best),
                                   "tied": [label.get(r, r) for r in c.tied]}
                        for c in chosen.values()},
            "pairs": [{"a": p.a, "b": p.b, "kendall_tau": None if math.isnan(p.tau) else p.tau,
                       "winner_agrees": p.winner_agrees, "tied_agree": p.tied_agree}
                      for p in pairs]}
