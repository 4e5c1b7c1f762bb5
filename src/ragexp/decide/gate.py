"""The quality gate: may this run replace the reference (the champion, or a given run)?

Rule (``decide``, pure), for the tested measures over all questions and each question kind,
every test paired per question and p adjusted over that whole family (Holm by default):

- **no regression**: no group where the run is worse by more than ``margin`` *and* the drop is
  significant (``p_adj < alpha``). A drop within the margin, or one the golden set cannot tell
  from noise, does not fail the gate;
- **refusals within budget**: the run's cross-validated share of answerable questions refused
  (``abstain.cv.refused_answerable``, the honest estimate: the in-sample one is within budget
  by construction) is at most the run's ``abstain.budget`` plus ``refusal_slack``;
- **for promotion** (``min_effect`` set): the overall gain on the first measure is positive,
  at least ``min_effect`` and significant (``p_adj < alpha``);
- **for promoting a cheaper run** (``non_inferior``: ``promote --cheapest-tied --gate``): the
  run need not be better, only not worse beyond ``margin``: the lower end of the 95% interval
  of the first measure's overall difference is at least ``-margin`` (a non-inferiority test at
  one-sided level 2.5%; Schuirmann 1987, the interval form of the two one-sided tests).

``ragexp gate`` and ``ragexp promote --gate`` both apply this rule. ``evaluate`` is the edge
that loads the two runs from MLflow. With questions from several sources (hand-written and
generated), the tests use the run's ``objective_source`` questions (``sources.deciding``); the
verdict shows the certificate of the run's sweep's question sets (its parent's
``certificate.json``, ``sources.recorded_lines``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from ragexp.decide import compare, labels, sources
from ragexp.errors import InvalidValue, counted, listed
from ragexp.evaluation import significance, stats
from ragexp.evaluation.stats import ALL, Paired
from ragexp.records import HAND
from ragexp.tracking import store as tracking

CV_REFUSED = "abstain.cv.refused_answerable"
BUDGET_PARAM = "abstain.budget"


@dataclass(frozen=True)
class Rule:
    """Thresholds of the gate. ``measures``: ir_measures names, the first is the one promotion
    is judged on; ``margin``/``min_effect`` in that measure's units (0..1). ``non_inferior``:
    judge promotion by non-inferiority within ``margin`` instead of a gain (exclusive with
    ``min_effect``)."""

    measures: tuple[str, ...] = ("nDCG@10",)
    margin: float = 0.01
    min_effect: float | None = None
    alpha: float = stats.ALPHA
    correction: str = "holm"
    refusal_slack: float = 0.05
    non_inferior: bool = False

    def __post_init__(self):
        if not self.measures:
            raise InvalidValue("the gate needs at least one measure")
        if not 0 <= self.margin < 1:
            raise InvalidValue(f"margin must be in [0, 1), got {self.margin}")
        if self.min_effect is not None and not 0 <= self.min_effect < 1:
            raise InvalidValue(f"min_effect must be in [0, 1), got {self.min_effect}")
        if self.non_inferior and self.min_effect is not None:
            raise InvalidValue("a cheaper run is promoted for being no worse than the champion "
                               "(non-inferiority within --margin), not for a gain: drop "
                               "--min-effect")
        if not 0 < self.alpha < 1:
            raise InvalidValue(f"alpha must be in (0, 1), got {self.alpha}")
        if self.correction not in stats.CORRECTIONS:
            raise InvalidValue(f"correction must be one of {', '.join(stats.CORRECTIONS)}, "
                               f"got {self.correction!r}")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str]
    tests: list[Paired] = field(default_factory=list)
    refusal: str = ""
    header: str = ""

    def render(self, rule: Rule) -> str:
        """One screen: the header, one line per test, the refusal check, the outcome."""
        lines = [self.header] if self.header else []
        if self.tests:
            lines.append(f"{'measure':<9} {'group':<13} {'n':>4}  {'Δ [95% CI]':<26} "
                         f"{'p':>7} {'p_adj':>7}  n for 80% power")
            for t in self.tests:
                flag = ""
                if t.mean_diff < -rule.margin and t.p_adj < rule.alpha:
                    flag = "  REGRESSION"
                n80 = significance.format_n_needed(t.n_needed)
                lines.append(f"{t.measure:<9} {t.kind:<13} {t.n:>4}  "
                             f"{significance.format_delta(t):<26}"
                             f"{significance.format_p(t.p):>7} "
                             f"{significance.format_p(t.p_adj):>7}  {n80:>6}{flag}")
        if self.refusal:
            lines.append(self.refusal)
        lines.append(self.outcome(rule))
        return "\n".join(lines)

    def outcome(self, rule: Rule) -> str:
        """``PASS``, ``PASS (inconclusive: ...)`` or ``FAIL: reasons``: a pass is inconclusive
        when a measure's overall drop is beyond the margin but not significant, so the golden set
        may be too small to see it (each says how many questions 80% power needs,
        ``stats.questions_needed``), or when a kind's is (a plain PASS hid an identifier kind's
        -0.400), said when no overall drop is. Every measure of the rule is named, not only the
        first (a second measure's overall drop was not said at all)."""
        if not self.passed:
            return "FAIL: " + "; ".join(self.reasons)
        drops = [t for t in self.tests if t.mean_diff < -rule.margin]  # none significant here
        overall = [t for t in drops if t.kind == ALL]
        kinds = [t for t in drops if t.kind != ALL]
        if overall:
            return "PASS (inconclusive: " + "; ".join(
                f"{t.measure} {t.mean_diff:+.3f} is not significant; {_power(t)}"
                for t in overall) + ")"
        if not kinds:
            return "PASS"
        shown = listed((f"{t.measure} {t.kind} {t.mean_diff:+.3f} ({counted(t.n, 'question')})"
                        for t in kinds), 3)
        return (f"PASS (inconclusive for {len(kinds)} kind(s): {shown} beyond the margin, "
                f"not significant: too few questions of the kind to tell)")


def _power(t: Paired) -> str:
    """How far ``t``'s questions are from detecting its difference (80% power)."""
    needed = t.n_needed
    if math.isnan(needed) or math.isinf(needed):
        return f"no power estimate from {counted(t.n, 'question')} (too few, or differences without spread)"
    return (f"{t.n} of the {significance.format_n_needed(needed)} questions needed to detect "
            f"this difference")


def decide(tests: list[Paired], run_metrics: dict[str, float], run_params: dict[str, str],
           rule: Rule) -> Verdict:
    """Apply the rule to adjusted tests (``stats.adjust_family`` over exactly these tests) and
    the run's metrics and params. Pure."""
    reasons: list[str] = []
    for t in tests:
        if t.mean_diff < -rule.margin and t.significant(rule.alpha):
            reasons.append(f"{t.measure} {t.kind}: {t.mean_diff:+.3f} (p_adj "
                           f"{significance.format_p_against(t.p_adj, rule.alpha)} < "
                           f"{rule.alpha}, drop beyond "
                           f"margin {rule.margin})")
    refusal = ""
    if CV_REFUSED in run_metrics and BUDGET_PARAM in run_params:
        rate, budget = run_metrics[CV_REFUSED], float(run_params[BUDGET_PARAM])
        ok = rate <= budget + rule.refusal_slack + 1e-12
        # over every question the run scored, whatever objective_source decides the tests: the
        # abstain curve is not kept per source ("questions: source hand" stood above a rate of
        # hand and generated questions together)
        refusal = (f"refusals: answerable refused (cross-validated, of every question the run "
                   f"scored) {rate:.3f}, budget "
                   f"{budget:.3f} + slack {rule.refusal_slack:.3f}: {'ok' if ok else 'OVER'}")
        if not ok:
            reasons.append(f"refuses {rate:.3f} of answerable questions (cross-validated), over "
                           f"budget {budget:.3f} + slack {rule.refusal_slack:.3f}")
    else:
        refusal = "refusals: not checked (the run has no abstain metrics)"
    first = next((t for t in tests if t.measure == rule.measures[0] and t.kind == ALL), None)
    if first is None and (rule.non_inferior or rule.min_effect is not None):
        reasons.append(f"no test of {rule.measures[0]} over all questions to promote on")
    elif rule.non_inferior:
        reasons += _non_inferiority(first, rule)
    elif rule.min_effect is not None:
        reasons += _gain(first, rule)
    return Verdict(not reasons, reasons, list(tests), refusal)


def _gain(first: Paired, rule: Rule) -> list[str]:
    """Why ``first`` (the first measure, all questions) is no gain worth promoting: none when
    its mean difference is positive, at least ``min_effect`` and significant. A difference of
    exactly 0 (or one that rounds to it) is "no gain", never "below a minimum of 0"."""
    d = first.mean_diff
    if d <= 0:
        return [f"{first.measure} difference {d:+.4f} is no gain (promoting needs a "
                f"significant gain of at least {rule.min_effect:.3f}; a run tied with the "
                f"champion but cheaper: promote --cheapest-tied, judged by non-inferiority)"]
    if d < rule.min_effect:
        return [f"{first.measure} gain {d:+.4f} is below the minimum effect "
                f"{rule.min_effect:.4f} needed to promote"]
    if not first.significant(rule.alpha):
        return [f"{first.measure} gain {d:+.4f} is not significant (p_adj "
                f"{significance.format_p_against(first.p_adj, rule.alpha)} >= {rule.alpha})"]
    return []


def _non_inferiority(first: Paired, rule: Rule) -> list[str]:
    """Why ``first`` may be worse than the reference beyond the margin: none when the lower
    end of its 95% interval is at least ``-margin``. An interval of NaN (none: too few
    questions) counts as not shown, and says ``n/a`` and why (it printed ``95% CI low +nan <
    -0.01`` for 4 questions)."""
    low = first.ci_low
    if math.isfinite(low) and low >= -rule.margin - 1e-12:
        return []
    if math.isnan(low):
        return [f"{first.measure} is not shown to be no worse than the reference: difference "
                f"{first.mean_diff:+.4f}, 95% CI low n/a ({significance.no_interval(first.n)}; "
                f"non-inferiority needs an interval whose low end is at least -{rule.margin})"]
    return [f"{first.measure} may be worse than the reference by more than the margin: "
            f"difference {first.mean_diff:+.4f}, 95% CI low {low:+.4f} < -{rule.margin} "
            f"(non-inferiority not shown; more questions narrow the interval)"]


def family_tests(run_table: pd.DataFrame, ref_table: pd.DataFrame, rule: Rule,
                labels: tuple[str, str] = ("run", "reference")) -> list[Paired]:
    """The gate's family: every measure of the rule, overall and per kind, adjusted together."""
    raw = significance.tests_against(run_table, ref_table, rule.measures, labels)
    return stats.adjust_family(raw, rule.correction)


def evaluate(run_id: str, reference_id: str, rule: Rule, label: str = "") -> Verdict:
    """Load both runs (MLflow edge) and decide. Different data or questions -> a failing verdict
    saying so; an unknown run id -> ``InvalidValue``; a sweep's parent run, a deleted run or
    one not FINISHED, either of them -> ``tracking.SweepParentRun`` / ``UnusableRun``
    (``refuse_unusable``), before any other check."""

    c = tracking.client()

    def get(rid: str):
        try:
            return c.get_run(rid)
        except Exception:
            raise InvalidValue(f"no run {rid!r} in {tracking.tracking_uri()}") from None

    run, ref = get(run_id), get(reference_id)
    tracking.refuse_unusable(run)  # a refused input (exit 2), not a failing verdict
    tracking.refuse_unusable(ref)
    names = labels.of_runs({run_id: run, reference_id: ref}, ids=False)
    header = (f"gate: run {labels.beside_id(run_id, names[run_id])} against {label or 'run'} "
              f"{labels.beside_id(reference_id, names.get(reference_id, reference_id[:8]))}"
              f"; {stats.CORRECTION_NAMES[rule.correction]} over {len(rule.measures)} "
              f"measure(s) x (all + each kind), alpha {rule.alpha}, margin {rule.margin}"
              + (f", min effect {rule.min_effect}" if rule.min_effect is not None else "")
              + (", promoted if non-inferior within the margin" if rule.non_inferior else ""))
    differ = compare.data_differs(run, ref)
    if differ:
        return Verdict(False, [f"run and reference were evaluated on different data "
                               f"({', '.join(differ)} differ): the gate cannot compare them"],
                       header=header)
    source = run.data.params.get("objective_source", HAND)
    run_table, ref_table = compare.per_question(run_id), compare.per_question(reference_id)
    if len(sources.sources_of(run_table)) > 1:
        header += f"\nquestions: source {source} (objective_source) of " + ", ".join(
            sources.sources_of(run_table))
    if "mlflow.parentRunId" in run.data.tags:
        shown = sources.recorded_lines(c.get_run(run.data.tags["mlflow.parentRunId"]))
        if shown:
            header += "\nthe run's sweep: " + "\n  ".join(shown)
    try:
        tests = family_tests(sources.deciding(run_table, source),
                             sources.deciding(ref_table, source), rule,
                             (run_id[:8], reference_id[:8]))
    except significance.NotScored:
        raise  # a --measure the runs lack: a refused input (exit 2), not a regression
    except significance.NotPaired as exc:
        return Verdict(False, [str(exc)], header=header)
    verdict = decide(tests, run.data.metrics, run.data.params, rule)
    return Verdict(verdict.passed, verdict.reasons, verdict.tests, verdict.refusal, header)
