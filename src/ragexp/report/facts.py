"""The numbers of a sweep's HTML report, computed from plain data. Pure: no I/O, no MLflow.

- **Deltas** (:func:`delta`): ``value - reference`` for a headline measure, judged better or
  worse by the measure's direction (higher is better for every retrieval measure, the abstain
  AUC, unanswerable questions refused, the answer rate and citation precision; lower is better
  for answerable questions refused). A difference that rounds to 0 at the three decimals shown
  is neither, and a reference evaluated on other questions (another data fingerprint or split)
  is marked not comparable.
- **Per-kind tests**: every run against the reference run (the sweep's baseline, else its best
  run), per measure, overall and per kind: ``significance.family``, the same paired
  randomisation tests and BCa intervals as ``ragexp compare --baseline``, Holm-adjusted over
  all the tests of the page's tables as one family.
- **Wins by kind** (:func:`wins_by_kind`): per question kind (and over all questions), each
  run's mean of the measure over the kind's scored questions; the winner has the highest mean;
  the runs tied with it are those not significantly worse after Holm's correction over that
  kind's comparisons with the winner (``stats.tied_with_best``).
- **Depth curve** (:func:`depth_curve`): when the sweep's reranked runs differ in
  ``reranker.top_n``, each configuration's ceiling at the rerank depth (``R@top_n``,
  ``Success@top_n`` of the first stage), first-stage, reranked and oracle objective, and the
  realised share, against ``top_n`` (``evaluation/attribution.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ragexp.evaluation import measures as measures_mod
from ragexp.evaluation import significance, stats
from ragexp.evaluation.stats import ALL

SHOWN_DECIMALS = 3
EQUAL_BELOW = 0.5 * 10 ** -SHOWN_DECIMALS  # a difference that prints as 0.000 is no change

# (metric key, label, higher is better), after the retrieval measures
OTHER_HEADLINE = (("abstain.auc", "abstain AUC", True),
                  ("abstain.cv.refused_unanswerable", "unanswerable refused (CV)", True),
                  ("abstain.cv.refused_answerable", "answerable refused (CV)", False),
                  ("answer.rate_answerable", "answer rate", True),
                  ("answer.citation_precision", "citation precision", True))
RETRIEVAL_HEADLINE = ("RR@10", "nDCG@10", "Success@1", "R@100")


@dataclass(frozen=True)
class Delta:
    """``value - reference``; ``better``: True (green), False (red) or None (no change at the
    shown precision, or a value missing); ``comparable``: both were measured on the same
    questions."""

    value: float
    reference: float
    diff: float
    better: bool | None
    comparable: bool = True


def delta(value: float, reference: float, higher_is_better: bool,
          comparable: bool = True) -> Delta:
    """Difference of ``value`` over ``reference`` judged by direction (module docstring)."""
    if value is None or reference is None or math.isnan(value) or math.isnan(reference):
        return Delta(value, reference, math.nan, None, comparable)
    diff = float(value) - float(reference)
    better = None if abs(diff) < EQUAL_BELOW else (diff > 0) == higher_is_better
    return Delta(float(value), float(reference), diff, better, comparable)


def headline(objective: str, measured: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(metric key, label, higher is better)`` of the headline measures: the objective, then
    the usual retrieval measures the runs measured, then refusal and answer metrics."""
    names = [measures_mod.parse(n).name for n in measured]
    wanted = [n for n in dict.fromkeys([measures_mod.parse(objective).name,
                                        *RETRIEVAL_HEADLINE]) if n in names]
    return [(measures_mod.parse(n).key, n, True) for n in wanted] + list(OTHER_HEADLINE)


def same_questions(a: Mapping, b: Mapping) -> bool:
    """Whether two runs (rows of an MLflow runs frame) were scored on the same questions: same
    corpus and golden-set fingerprints and the same split."""
    keys = ("tags.corpus_hash", "tags.golden_hash", "params.split", "params.split_seed",
            "params.split_test_share")
    return all(str(a.get(k)) == str(b.get(k)) for k in keys)


def best_run(tables: Mapping[str, pd.DataFrame], measure: str) -> str:
    """The run with the highest mean ``measure`` over its scored questions (``stats.best_of``:
    ties to the first id, as the sweep chooses)."""
    col = significance.column(measure)
    return stats.best_of({r: float(t[col].dropna().astype(float).mean())
                          for r, t in tables.items()})


def reference_tests(tables: Mapping[str, pd.DataFrame], reference: str,
                    measures: Sequence[str], method: str = "holm"
                    ) -> dict[tuple[str, str, str], stats.Paired]:
    """``{(run, measure, kind): test}`` of every run against ``reference``, adjusted as one
    family (``significance.family``). Raises ``significance.NotPaired`` for runs scored on
    other questions."""
    results = significance.family(tables, reference, measures, method)
    return {(r, t.measure, t.kind): t for r, tests in results.items() for t in tests}


def group_means(table: pd.DataFrame, col: str, groups: Sequence[str]) -> dict[str, float]:
    """``{group: mean of col}`` over the table's scored questions (``col`` not NaN): over all
    of them for ``ALL``, else over those of that ``kind``; NaN for a group with none. One pass
    over the table for every group (the same floats as pandas' mean of each group's rows)."""
    values = table[col].astype(float).to_numpy()
    scored = ~np.isnan(values)
    kinds = table["kind"].astype(str).to_numpy()
    out = {}
    for g in groups:
        chosen = values[scored if g == ALL else scored & (kinds == g)]
        out[g] = float(chosen.mean()) if len(chosen) else math.nan
    return out


SHOWN_DECIMALS = 3  # the page's and the chart's means (``html.fmt``, ``charts.wins_svg``)


@dataclass
class Wins:
    """``values``: runs x groups (``all`` then each kind) of mean scores; ``n``: questions per
    group; ``winner``/``tied``: per group, the best run and the runs tied with it;
    ``left_out``: runs scored on other questions than the first."""

    measure: str
    values: pd.DataFrame
    n: dict[str, int]
    winner: dict[str, str]
    tied: dict[str, tuple[str, ...]]
    left_out: list[str] = field(default_factory=list)

    def starred(self, group: str) -> set[str]:
        """The runs the page and the chart star as best on ``group``: the winner and every
        run whose mean prints the same at the ``SHOWN_DECIMALS`` the tables show (a tie on the
        printed value is starred alike; the reader cannot tell those runs apart)."""
        best = f"{self.values.loc[self.winner[group], group]:.{SHOWN_DECIMALS}f}"
        return {r for r, v in self.values[group].items()
                if f"{v:.{SHOWN_DECIMALS}f}" == best}


def wins_by_kind(tables: Mapping[str, pd.DataFrame], measure: str,
                 method: str = "holm") -> Wins:
    """Which run wins on which question kind (module docstring). ``tables``: ``{run id:
    per-question table}``; runs whose scored questions differ from the first run's are left
    out (they cannot be paired)."""
    col = significance.column(measure)
    scored = {r: t.dropna(subset=[col]) for r, t in tables.items()}
    first = next(iter(scored.values()))
    ids = set(first["id"])
    kept = {r: t for r, t in scored.items() if set(t["id"]) == ids}
    kind_of = dict(zip(first["id"], first["kind"].astype(str)))
    groups = [ALL, *sorted(set(kind_of.values()))]
    by_id = {r: (dict(zip(t["id"], range(len(t)))), t[col].astype(float).to_numpy())
             for r, t in kept.items()}
    values, n, winner, tied = {}, {}, {}, {}
    for g in groups:
        qids = sorted(i for i in ids if g == ALL or kind_of[i] == g)
        scores = {r: column[[row[q] for q in qids]] for r, (row, column) in by_id.items()}
        values[g] = {r: float(s.mean()) for r, s in scores.items()}
        n[g] = len(qids)
        outcome = stats.tied_with_best(scores, measure, method, intervals=False)
        winner[g], tied[g] = outcome.best, outcome.tied
    frame = pd.DataFrame(values)[groups]
    return Wins(measure, frame, n, winner, tied, [r for r in tables if r not in kept])


DEPTH_COLUMNS = ("ceiling_r", "ceiling_success", "first_stage", "reranked", "oracle", "share")


def depth_curve(runs: pd.DataFrame, objective: str) -> pd.DataFrame:
    """One row per reranked run of a sweep that varies ``reranker.top_n``, sorted by
    configuration (``group``: every other param that differs across those runs, ``"all"`` when
    none does) and ``top_n``, with ``run_id`` and ``DEPTH_COLUMNS`` read from the run's
    ``rerank.*`` metrics (NaN where one is missing). Empty when fewer than two depths were run
    (``runs``: an MLflow ``search_runs`` frame, ``params.*``, ``metrics.*``)."""
    key = measures_mod.parse(objective).key
    col = "params.reranker.top_n"
    if col not in runs:
        return pd.DataFrame(columns=["group", "top_n", "run_id", *DEPTH_COLUMNS])
    top_n = pd.to_numeric(runs[col], errors="coerce")
    reranked = runs[top_n.fillna(0) >= 1].assign(top_n=top_n[top_n.fillna(0) >= 1].astype(int))
    if reranked["top_n"].nunique() < 2:
        return pd.DataFrame(columns=["group", "top_n", "run_id", *DEPTH_COLUMNS])
    others = [c for c in reranked.columns if c.startswith("params.") and c != col
              and reranked[c].astype(str).nunique() > 1]

    def metric(row, name: str) -> float:
        v = row.get(f"metrics.rerank.{name}")
        return math.nan if v is None or pd.isna(v) else float(v)

    rows = []
    for _, row in reranked.iterrows():
        n = row["top_n"]
        group = " ".join(f"{c[len('params.'):]}={row[c]}" for c in others) or "all"
        rows.append({"group": group, "top_n": n, "run_id": row["run_id"],
                     "ceiling_r": metric(row, f"ceiling.r_at_{n}"),
                     "ceiling_success": metric(row, f"ceiling.success_at_{n}"),
                     "first_stage": metric(row, f"first_stage.{key}"),
                     "reranked": metric(row, f"reranked.{key}"),
                     "oracle": metric(row, f"oracle.{key}"),
                     "share": metric(row, "realised_share")})
    return pd.DataFrame(rows).sort_values(["group", "top_n"]).reset_index(drop=True)
