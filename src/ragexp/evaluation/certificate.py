"""How far a question set can be trusted to rank configurations: the figures of its certificate,
from per-question scores. Pure: no I/O, no MLflow (``decide.sources`` assembles a sweep's).

A source's scores over a sweep's ``k`` configurations on one measure are a ``(k, n)`` matrix
``S``: configurations x questions, the same questions in the same order in every row.

- **Split-half agreement** (``split_half``): ``SPLITS`` (200) seeded splits of the questions
  into two random halves of ``n // 2`` (an odd question out is left out of that split); on each,
  Kendall's tau-b (``stats.kendall_tau``) between the configurations' means on one half and on
  the other. Reported as the median with the 5th and 95th percentiles of the defined taus
  (undefined: a half on which every configuration has the same mean). Split ``s`` takes the
  ``s``-th ``permutation(n)`` of ``numpy.random.default_rng(seed)``: its first ``n // 2``
  positions are one half, the next ``n // 2`` the other. The test-retest reliability of the
  set's ranking (Voorhees & Buckley, SIGIR 2002; Sakai, SIGIR 2006), at half the set's size,
  so a low bound of what the whole set gives.
- **Discriminative power** (``ordered_pairs``): every pair of configurations tested on the
  paired per-question differences with the sweep's own test (``stats.paired``: two-sided
  sign-flip p), the ``k (k - 1) / 2`` p values adjusted together (Holm by default,
  ``stats.adjust``); the share of pairs with ``p_adj < alpha`` (Sakai 2006's discriminative
  power).
- **Between two sources** (``bootstrap_tau``): tau-b between the configurations' means on one
  source and on the other, with a 95% percentile bootstrap interval: ``RESAMPLES`` (1,000)
  resamples, each drawing ``n_a`` question indices of the first source with replacement then
  ``n_b`` of the second (``rng.integers(0, n, n)`` of one ``default_rng(seed)``, in that order),
  the interval the 2.5th and 97.5th percentiles of the defined taus. **Inversions**
  (``inversions``): pairs of configurations significantly ordered one way by one source and
  significantly the other way by the other (each source's own family).
- **Verdict** (``verdict``): ``not enough signal`` when the set has fewer than
  ``MIN_QUESTIONS`` (12: each half of a split then holds at least the 6 questions a sign-flip
  test needs to reach alpha 0.05, ``stats.least_testable_n``), or its median split-half tau is
  undefined or below ``SPLIT_HALF_FLOOR`` (0.5), or it tells no pair apart; else ``decides``
  when the best configuration is told apart (``stats.tied_with_best``, the sweep's rule) from at
  least ``DECIDES_SHARE`` (half) of the others, ``ties`` when it is not.
- **Coverage** (``coverage``): the share of documents holding the evidence of at least one
  question, and of sections: a section is a markdown heading with text of its own before the
  next heading; a question covers the section whose own text holds its evidence's start. A
  corpus without headings has no sections (``None``), and questions without evidence spans
  (a BEIR folder's, judged by document) no coverage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.evaluation import stats
from ragexp.records import Document, Query
from ragexp.text import markdown

SPLITS = 200
RESAMPLES = 1000
SEED = 0
MIN_QUESTIONS = 2 * stats.least_testable_n()  # 12
SPLIT_HALF_FLOOR = 0.5
DECIDES_SHARE = 0.5
DECIDES, TIES, NO_SIGNAL = "decides", "ties", "not enough signal"
VERDICT_CODES = {NO_SIGNAL: 0.0, TIES: 1.0, DECIDES: 2.0}  # as a metric


@dataclass(frozen=True)
class Spread:
    """A figure over resamples or splits: ``median`` (the point estimate of a split-half tau;
    for a bootstrap, the tau of the whole sets instead), ``low``/``high`` (the interval's
    percentiles), ``defined`` of ``total`` resamples gave a tau. NaN where none did."""

    median: float
    low: float
    high: float
    defined: int
    total: int


def _scores(matrix) -> np.ndarray:
    s = np.asarray(matrix, float)
    if s.ndim != 2 or not np.isfinite(s).all():
        raise InvalidValue(f"per-question scores must be a finite (configurations, questions) "
                           f"matrix, got shape {s.shape}")
    return s


def _spread(taus: np.ndarray, point: float, lo: float, hi: float) -> Spread:
    defined = taus[~np.isnan(taus)]
    if not len(defined):
        return Spread(point, math.nan, math.nan, 0, len(taus))
    low, high = np.percentile(defined, [lo, hi])
    return Spread(point, float(low), float(high), len(defined), len(taus))


def tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b (``stats.kendall_tau``) between the configurations' means on ``a``
    (``(k, n_a)``) and on ``b`` (``(k, n_b)``, the same configurations in the same order): how
    alike two question sets rank them. NaN when either ranking is all tied."""
    return stats.kendall_tau(a.mean(axis=1), b.mean(axis=1))


def halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random split of ``range(n)`` into a first half of ``n // 2`` positions and the rest
    (``n - n // 2``): the first ``n // 2`` of ``rng.permutation(n)``, then the others, in that
    permutation's order. ``split_half`` draws one per split (dropping the rest's odd question);
    calibration splits the hand questions into a tuning and a check half with one."""
    perm = rng.permutation(n)
    return perm[: n // 2], perm[n // 2:]


def split_half(scores, splits: int = SPLITS, seed: int = SEED) -> Spread:
    """Split-half agreement of the configurations' ranking (module docstring): median tau-b
    with its 5th and 95th percentiles over ``splits`` seeded splits. ``scores``: ``(k, n)``.
    NaN throughout with fewer than 2 configurations or 2 questions. Raises ``InvalidValue``
    for a matrix that is not 2-d and finite."""
    s = _scores(scores)
    k, n = s.shape
    half = n // 2
    if k < 2 or half == 0:
        return Spread(math.nan, math.nan, math.nan, 0, splits)
    rng = np.random.default_rng(seed)
    taus = np.empty(splits)
    for i in range(splits):
        first, rest = halves(n, rng)
        taus[i] = tau(s[:, first], s[:, rest[:half]])
    defined = taus[~np.isnan(taus)]
    median = float(np.median(defined)) if len(defined) else math.nan
    return _spread(taus, median, 5, 95)


def ordered_pairs(scores, measure: str, method: str = "holm", alpha: float = stats.ALPHA
                  ) -> dict[tuple[int, int], int]:
    """``{(i, j): sign}`` for every pair ``i < j`` of the ``(k, n)`` ``scores``' rows: ``1`` when
    configuration ``i`` is significantly above ``j``, ``-1`` below, ``0`` not told apart
    (``stats.paired``'s sign-flip p, adjusted over the ``k (k - 1) / 2`` pairs by ``method``,
    compared with ``alpha``). Needs at least one question."""
    s = _scores(scores)
    pairs = list(combinations(range(s.shape[0]), 2))
    if not pairs:
        return {}
    tests = stats.adjust_family([stats.paired(s[i], s[j], measure, interval=False)
                                 for i, j in pairs], method)
    return {p: (int(np.sign(t.mean_diff)) if t.p_adj < alpha else 0)
            for p, t in zip(pairs, tests)}


def power(ordered: dict[tuple[int, int], int]) -> float:
    """Discriminative power: the share of pairs told apart (NaN without pairs)."""
    return sum(1 for v in ordered.values() if v) / len(ordered) if ordered else math.nan


def inversions(a: dict[tuple[int, int], int], b: dict[tuple[int, int], int]
               ) -> list[tuple[int, int]]:
    """The pairs ``(i, j)`` ordered significantly by both sources, in opposite directions, as
    ``(higher on a, higher on b)``."""
    return [(i, j) if a[(i, j)] > 0 else (j, i)
            for (i, j) in a if a[(i, j)] * b.get((i, j), 0) < 0]


def bootstrap_tau(a, b, resamples: int = RESAMPLES, seed: int = SEED) -> Spread:
    """Tau-b between the configurations' means on source ``a`` (``(k, n_a)``) and on ``b``
    (``(k, n_b)``, the same configurations in the same order), with its 95% percentile
    bootstrap interval (module docstring); ``median`` holds the tau of the whole sets. NaN
    where either set has no question or fewer than 2 configurations. Raises ``InvalidValue``
    for matrices of different numbers of configurations."""
    sa, sb = _scores(a), _scores(b)
    if sa.shape[0] != sb.shape[0]:
        raise InvalidValue(f"the two sources score {sa.shape[0]} and {sb.shape[0]} "
                           f"configurations: tau needs the same ones")
    (k, na), nb = sa.shape, sb.shape[1]
    if k < 2 or not na or not nb:
        return Spread(math.nan, math.nan, math.nan, 0, resamples)
    point = tau(sa, sb)
    rng = np.random.default_rng(seed)
    taus = np.empty(resamples)
    for r in range(resamples):
        ia = rng.integers(0, na, na)
        ib = rng.integers(0, nb, nb)
        taus[r] = tau(sa[:, ia], sb[:, ib])
    return _spread(taus, point, 2.5, 97.5)


def verdict(n: int, agreement: Spread, told_apart: float, tied: int, k: int) -> tuple[str, str]:
    """``(verdict, why)`` of a set of ``n`` questions whose split-half agreement is
    ``agreement``, that tells the share ``told_apart`` of the pairs of ``k`` configurations
    apart, and leaves ``tied`` of them (the best included) tied with the best (module
    docstring: ``MIN_QUESTIONS``, ``SPLIT_HALF_FLOOR``, ``DECIDES_SHARE``)."""
    if n < MIN_QUESTIONS:
        return NO_SIGNAL, f"{n} question(s), fewer than {MIN_QUESTIONS}"
    if math.isnan(agreement.median):
        return NO_SIGNAL, "no split-half ranking (every configuration ties)"
    if agreement.median < SPLIT_HALF_FLOOR:
        return NO_SIGNAL, (f"split-half tau {agreement.median:.2f} below "
                           f"{SPLIT_HALF_FLOOR}")
    if not told_apart:
        return NO_SIGNAL, "no pair of configurations told apart"
    apart = k - tied
    if apart >= DECIDES_SHARE * (k - 1):
        return DECIDES, f"the best told apart from {apart} of {k - 1} others"
    return TIES, f"the best told apart from {apart} of {k - 1} others"


@dataclass(frozen=True)
class Coverage:
    """Documents (and sections) holding at least one question's evidence, of all there are.
    ``sections``/``sections_total`` are ``None`` for a corpus without headings; ``docs`` is
    ``None`` when no question has an evidence span. ``note`` says why a figure is missing."""

    docs: int | None
    docs_total: int
    sections: int | None
    sections_total: int | None
    note: str = ""


def _own_sections(doc: Document) -> list[tuple[int, int]]:
    """``[start, end)`` of each heading's own text (to the next heading of any level) that
    holds a block other than a heading."""
    found = markdown.blocks(doc.text)
    heads = [i for i, b in enumerate(found) if b.kind == "heading"]
    out = []
    for pos, i in enumerate(heads):
        nxt = heads[pos + 1] if pos + 1 < len(heads) else len(found)
        if nxt > i + 1:  # a block of its own before the next heading
            end = found[nxt].start if nxt < len(found) else len(doc.text)
            out.append((found[i].body, end))
    return out


def coverage(docs: Sequence[Document], queries: Iterable[Query]) -> Coverage:
    """Coverage of ``docs`` by the evidence of ``queries`` (module docstring)."""
    spans = [s for q in queries for s in q.evidence]
    own = {d.doc_id: _own_sections(d) for d in docs}
    total = sum(len(v) for v in own.values())
    sections_total = total or None
    if not spans:
        return Coverage(None, len(docs), None, sections_total,
                        "the questions name no evidence spans")
    names = set(own)
    covered_docs = {s.doc_id for s in spans if s.doc_id in names}
    covered = {(s.doc_id, j) for s in spans if s.doc_id in names
               for j, (a, b) in enumerate(own[s.doc_id]) if a <= s.start < b}
    note = "" if total else "the corpus has no markdown headings, so no sections"
    return Coverage(len(covered_docs), len(docs), len(covered) if total else None,
                    sections_total, note)
