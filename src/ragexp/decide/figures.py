"""Which questions a printed number averages, said beside it: ``nDCG@10 (hand, 45 q)``.

A run whose questions come from several sources (hand-written and generated) logs every measure
over all of them (``<key>``) and per source (``<key>.source.<source>``); the source that decides
(``objective_source``, default ``hand``) is the one the sweep's choice, its tests and the gate
rest on. Wherever a number is printed to be read beside a decision (a run's console line,
``compare``'s default table, the sweep's page), it is the deciding source's figure, labelled
with its source and question count, and every source's together (``all``) only when asked for.
The run lines and ``compare`` printed every question's mean while the decision line used the
hand-written ones: a user read 0.930 against the "best" 0.903 and could not tell which decides.
A run with questions of one source shows that source's name, and its figures are the logged
``<key>`` (no per-source key is logged then).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import pandas as pd

from ragexp.decide import sources
from ragexp.errors import InvalidValue
from ragexp.records import HAND


class Figure(NamedTuple):
    """What one run's shown figure of a measure averages: the questions of ``source`` (``all``:
    every source's), ``n`` of them (None where the per-question table is not known), read from
    the per-source metric when ``per_source`` (``<key>.source.<source>``), else from ``<key>``
    itself (every question, or the run's only source)."""

    source: str
    n: int | None
    per_source: bool

    def key(self, key: str) -> str:
        """The logged metric this figure of measure ``key`` (``ndcg_at_10``) is."""
        return f"{key}.source.{self.source}" if self.per_source else key

    @property
    def tag(self) -> str:
        """``hand, 45 q``; ``hand`` with no count known."""
        return self.source if self.n is None else f"{self.source}, {self.n} q"

    def label(self, name: str) -> str:
        """``name`` with its source: ``nDCG@10 (hand, 45 q)``."""
        return f"{name} ({self.tag})"


def figure(table: pd.DataFrame | None, source: str, column: str, logged: Iterable[str] = (),
           option: str = "objective_source") -> Figure:
    """The figure of a run shown under ``objective_source=source`` (or ``compare --source``):
    that source's questions when the run's are of several, every question for ``all``, and the
    only source's when they are of one (whatever ``source`` says, as ``sources.deciding``
    takes them). ``table``: the run's per-question table (its ``source`` column names the
    sources; ``n`` counts the rows scored on ``column``, the answerable questions); None where
    it cannot be read, and then the sources are those of the per-source metric keys ``logged``
    (``sources.HAND`` when none). Raises ``InvalidValue`` naming ``option`` (where ``source``
    was given) and the sources there are when ``source`` is none of several."""
    if table is not None:
        have = sources.sources_of(table)
    else:
        have = sorted({k.split(".source.", 1)[1] for k in logged if ".source." in k}) or [HAND]
    several = len(have) > 1
    if several and source != sources.ALL_SOURCES and source not in have:
        raise InvalidValue(f"{option} {source!r}: the run's questions are of sources "
                           f"{', '.join(have)} (or all)")
    shown = source if several else have[0]
    n = None
    if table is not None and column in table:
        rows = table if not several or shown == sources.ALL_SOURCES else table[
            table["source"].astype(str) == shown]
        n = int(rows[column].notna().sum())
    return Figure(shown, n, several and shown != sources.ALL_SOURCES)


def together(shown: Iterable[Figure]) -> str:
    """One label for the figures of runs shown in one column: ``hand, 45 q``; where the runs
    differ, each source once and the range of counts (``hand, 40-45 q``); ``""`` for none."""
    shown = list(shown)
    if not shown:
        return ""
    names = "/".join(dict.fromkeys(f.source for f in shown))
    counts = sorted({f.n for f in shown if f.n is not None})
    if not counts:
        return names
    span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{names}, {span} q"
