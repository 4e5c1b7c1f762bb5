"""Families of paired tests between runs, from their per-question tables. No I/O.

A per-question table (``per_question.csv``) has ``id``, ``kind`` and one score column per
measure (NaN for questions a measure does not score, e.g. unanswerable ones). Every test of a
candidate against a baseline is made overall and per question kind, for every measure asked;
all the tests one table (or one gate) shows are one family, and their p-values are adjusted
together (``stats.adjust_family``). The statistics themselves are in ``stats.py``.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd

from ragexp.errors import RagexpError, counted, listed
from ragexp.evaluation import measures, stats
from ragexp.evaluation.stats import ALL, Paired

DEFAULT_MEASURES = ("nDCG@10", "RR@10")


class NotPaired(RagexpError, ValueError):
    """Two runs were not scored on the same questions, so they cannot be compared pairwise."""


class NotScored(NotPaired):
    """A run was not scored on the measure asked for: the request's fault, not the runs'."""


def column(measure: str) -> str:
    """``per_question.csv`` column of a measure: its MLflow key (``nDCG@10`` -> ``ndcg_at_10``).
    Raises ``ValueError`` for a name ``measures.parse`` does not know."""
    return measures.parse(measure).key


def _check_scored(table: pd.DataFrame, measure: str, label: str) -> str:
    col = column(measure)
    if col not in table:
        known = [c for c in table.columns if measures.from_key(c) is not None]
        raise NotScored(f"{label} was not scored on {measure} (its per_question.csv has "
                        f"{', '.join(known) or 'no measure columns'}): add it to the config key "
                        f"measures and rerun")
    return col


class Pairs(NamedTuple):
    """The questions two runs both scored on a measure, in the candidate's row order: their
    ``kind`` (object array) and the candidate's and baseline's scores (``run``, ``base``:
    float64), all of one length."""

    kind: np.ndarray
    run: np.ndarray
    base: np.ndarray


def aligned(run: pd.DataFrame, base: pd.DataFrame, measure: str,
            labels: tuple[str, str] = ("run", "baseline")) -> Pairs:
    """The questions both runs scored on ``measure``, each question's baseline score found by
    its id (ids are unique: ``compare.per_question`` refuses a repeated one), in ``run``'s row
    order: the rows an inner ``merge`` on ``id`` keeps, in the order it keeps them, without the
    merge's frames (a 12-run sweep aligns 44 times, and its page as many again).

    Raises :class:`NotPaired` when the runs hold different questions, or when a question is
    scored in one run but not in the other.
    """
    col = _check_scored(run, measure, labels[0])
    _check_scored(base, measure, labels[1])
    if set(run["id"]) != set(base["id"]):
        only = [(label, sorted(set(a["id"]) - set(b["id"])))
                for label, a, b in ((labels[0], run, base), (labels[1], base, run))]
        counts = "; ".join(f"{len(ids)} only in {label}, e.g. {', '.join(ids[:3])}"
                           for label, ids in only if ids)
        raise NotPaired(f"{labels[0]} and {labels[1]} were evaluated on different questions "
                        f"({counts}): a paired test needs the same questions (same golden set "
                        f"and split)")
    ids = run["id"].to_numpy(object)
    r = run[col].to_numpy()
    b = base[col].to_numpy()[pd.Index(base["id"]).get_indexer(ids)]
    scored_r, scored_b = pd.notna(r), pd.notna(b)
    if (scored_r != scored_b).any():
        odd = ids[scored_r != scored_b].tolist()
        raise NotPaired(f"{measure}: {len(odd)} question(s) scored in only one of "
                        f"{labels[0]} and {labels[1]}: {listed(odd, 5)}")
    return Pairs(run["kind"].to_numpy(object)[scored_r], r[scored_r].astype(float),
                 b[scored_r].astype(float))


def tests_against(run: pd.DataFrame, base: pd.DataFrame, measures: Sequence[str],
                  labels: tuple[str, str] = ("run", "baseline")) -> list[Paired]:
    """Raw (unadjusted) tests of ``run`` against ``base``: per measure, overall then per kind
    (the kinds in the data, sorted; a question without a kind counts only overall)."""
    out = []
    for measure in measures:
        pairs = aligned(run, base, measure, labels)
        if not len(pairs.run):
            raise NotPaired(f"{measure}: no question is scored in {labels[0]} and {labels[1]}")
        out.append(stats.paired(pairs.run, pairs.base, measure))
        codes, kinds = pd.factorize(pairs.kind)  # a missing kind: code -1, in no group
        for code in sorted(range(len(kinds)), key=lambda i: str(kinds[i])):
            group = codes == code
            out.append(stats.paired(pairs.run[group], pairs.base[group], measure,
                                    str(kinds[code])))
    return out


def family(tables: Mapping[str, pd.DataFrame], baseline: str, measures: Sequence[str],
           method: str = "holm") -> dict[str, list[Paired]]:
    """Every run in ``tables`` (``{run_id: per-question table}``) except ``baseline``, tested
    against it; p adjusted over all the tests together. Returns ``{run_id: tests}``."""
    raw = {r: tests_against(t, tables[baseline], measures, (r[:8], baseline[:8]))
           for r, t in tables.items() if r != baseline}
    flat = [t for tests in raw.values() for t in tests]
    adjusted = iter(stats.adjust_family(flat, method))
    return {r: [next(adjusted) for _ in tests] for r, tests in raw.items()}


def format_p(p: float) -> str:
    """A p value as every table and line of ragexp shows it (compare, confirm, gate, report,
    the sweep's page): three decimals, ``<0.001``, or ``n/a`` for NaN (none computed: a line
    printed ``p_adj nan``)."""
    if math.isnan(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def format_p_against(p: float, alpha: float) -> str:
    """``format_p``, with as many more decimals as a line comparing ``p`` with ``alpha`` needs
    to read true: ``p_adj 0.17298 < 0.173``, not ``p_adj 0.173 < 0.173`` (at most 12)."""
    shown, digits = format_p(p), 3
    while shown[0].isdigit() and digits < 12 and (
            (float(shown) == alpha) != (p == alpha) or (float(shown) < alpha) != (p < alpha)):
        digits += 1
        shown = f"{p:.{digits}f}"
    return shown


def format_p_adj(p_adj: float, alpha: float = stats.ALPHA) -> str:
    """An adjusted p as tables show it: ``format_p``, ``*`` appended below ``alpha``."""
    return format_p(p_adj) + ("*" if p_adj < alpha else "")


def format_delta(t: Paired) -> str:
    """A difference and its 95% interval as tables show them: ``+0.500 [n/a]`` where there is
    none (fewer questions than a test needs to be significant, ``stats.paired``), else
    ``+0.500 [+0.250, +0.750]``."""
    if t.n < 2:
        return f"{t.mean_diff:+.3f} [n/a]"
    return format_interval(t.mean_diff, t.ci_low, t.ci_high)


def format_interval(diff: float, low: float, high: float) -> str:
    """``format_delta`` of numbers read back from a run's metrics (``confirm.vs_baseline.*``):
    ``+0.500 [+0.250, +0.750]``, ``+0.500 [n/a]`` when a bound is NaN (none computed; a table
    printed ``[+nan, +nan]``)."""
    if math.isnan(low) or math.isnan(high):
        return f"{diff:+.3f} [n/a]"
    return f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]"


def no_interval(n: int) -> str:
    """Why a paired test of ``n`` questions has no 95% interval, for a message: ``"4
    questions; an interval needs at least 6"`` below ``stats.least_testable_n``, else that its
    bootstrap gave none."""
    least = stats.least_testable_n()
    if n < least:
        return f"{counted(n, 'question')}; an interval needs at least {least}"
    return f"no bootstrap interval from {counted(n, 'question')}"


def format_n_needed(n: float) -> str:
    """Questions needed for 80% power as tables show it: ``n/a`` when undefined (NaN: one
    question, or differences without spread), ``∞`` when there is no difference to detect,
    ``>10^6``, or the integer."""
    if math.isnan(n):
        return "n/a"
    return "∞" if math.isinf(n) else ">10^6" if n > 1e6 else f"{int(n)}"


def wide_columns(results: Mapping[str, list[Paired]], run_ids: Sequence[str], baseline: str,
                 measures: Sequence[str], alpha: float = stats.ALPHA) -> dict[str, list[str]]:
    """Columns for a one-row-per-run table, in ``run_ids`` order: per measure the overall
    difference with its interval, raw and adjusted p; the questions needed for 80% power on the
    first measure; and the kinds where the first measure fell (* where p_adj < alpha)."""
    first = measures[0]
    cols: dict[str, list[str]] = {}
    for m in measures:
        cols[f"Δ{m} [95% CI]"], cols[f"p({m})"], cols[f"p_adj({m})"] = [], [], []
    cols[f"n for 80% power ({first})"] = []
    cols[f"kinds worse ({first})"] = []
    for run in run_ids:
        if run == baseline:
            for v in cols.values():
                v.append("baseline")
            continue
        tests = results[run]
        for m in measures:
            t = next(t for t in tests if t.measure == m and t.kind == ALL)
            star = "*" if t.p_adj < alpha else ""
            cols[f"Δ{m} [95% CI]"].append(f"{format_delta(t)}{star}")
            cols[f"p({m})"].append(format_p(t.p))
            cols[f"p_adj({m})"].append(format_p(t.p_adj))
        overall = next(t for t in tests if t.measure == first and t.kind == ALL)
        cols[f"n for 80% power ({first})"].append(
            f"{format_n_needed(overall.n_needed)} of {overall.n}")
        worse = [f"{t.kind}{'*' if t.p_adj < alpha else ''} ({t.mean_diff:+.3f})"
                 for t in tests if t.measure == first and t.kind != ALL and t.mean_diff < 0]
        cols[f"kinds worse ({first})"].append(", ".join(worse) or "none")
    return cols


def long_table(results: Mapping[str, list[Paired]], names: Mapping[str, str] | None = None,
               alpha: float = stats.ALPHA) -> pd.DataFrame:
    """One row per test: run, measure, kind, n, difference [CI], p, p_adj, questions needed."""
    rows = []
    for run, tests in results.items():
        for t in tests:
            rows.append({"run": run[:8], "name": (names or {}).get(run, ""),
                         "measure": t.measure, "kind": t.kind, "n": t.n,
                         "Δ [95% CI]": format_delta(t),
                         "p": format_p(t.p), "p_adj": format_p_adj(t.p_adj, alpha),
                         "n for 80% power": format_n_needed(t.n_needed)})
    return pd.DataFrame(rows)


def note(method: str, results: Mapping[str, list[Paired]], measures: Sequence[str]) -> str:
    """What the tests are and which family their p-values were adjusted over."""
    n_tests = sum(len(t) for t in results.values())
    if not n_tests:
        return "No paired tests: no run besides the baseline."
    groups = len(next(iter(results.values()))) // max(len(measures), 1) if results else 0
    fam = (f"the {n_tests} tests of this table ({len(results)} run(s) x {len(measures)} "
           f"measure(s) x {groups} groups: all questions and each kind)")
    return ("Paired tests over per-question scores of the answerable questions: Δ = run − "
            "baseline; 95% CI by BCa bootstrap (10,000 resamples); p from a two-sided paired "
            "randomisation (sign-flip) test, 10,000 random sign flips, or every one (exact) "
            "where the non-zero differences have at most that many. "
            + stats.correction_note(method, fam)
            + " 'n for 80% power': questions a paired t-test would need to detect the observed "
              "difference (effect size mean/sd of the differences) at alpha 0.05, and never "
              f"fewer than the {stats.least_testable_n()} the sign-flip test needs to reach it, "
              "against the number compared; n/a when that effect size is undefined (one "
              "question, or differences without spread), ∞ when the mean difference is 0. "
              f"Below {stats.least_testable_n()} questions no interval is shown (n/a).")
