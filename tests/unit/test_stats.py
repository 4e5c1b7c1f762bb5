"""stats.py against independent computations: corrections from their definitions (and a published
example), the exact sign-flip distribution, the t-interval, the noncentral-t power function."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from ragexp.evaluation import stats


def holm_by_definition(p):
    """Holm (1979): reject H_(1..i) while p_(i) <= alpha / (m - i + 1); adjusted p is the
    running max of (m - i + 1) p_(i), capped at 1. Written from the paper, loop by loop."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order, start=1):
        running = max(running, min(1.0, (m - rank + 1) * p[i]))
        out[i] = running
    return out


def bh_by_definition(p):
    """Benjamini-Hochberg (1995): adjusted p_(i) = min over j >= i of m p_(j) / j, capped at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, m * p[i] / rank)
        out[i] = min(1.0, running)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_corrections_match_their_definitions_on_random_p_vectors(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 40))
    # a mix of tiny, moderate and null-like p-values, with ties
    p = np.concatenate([rng.uniform(0, 0.01, m // 3), rng.uniform(0, 1, m - m // 3)])
    p[: m // 5] = p[0]
    rng.shuffle(p)
    assert stats.adjust(p, "holm") == pytest.approx(holm_by_definition(list(p)), abs=1e-12)
    assert stats.adjust(p, "bh") == pytest.approx(bh_by_definition(list(p)), abs=1e-12)


def test_corrections_on_a_published_example():
    # Benjamini & Hochberg (1995), section 4: 15 p-values; at q = 0.05 BH rejects the 4
    # smallest, Bonferroni-type procedures (Holm) only the 3 smallest.
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240,
         0.4262, 0.5719, 0.6528, 0.7590, 1.0000]
    assert (stats.adjust(p, "bh") < 0.05).sum() == 4
    assert (stats.adjust(p, "holm") < 0.05).sum() == 3
    assert stats.adjust(p, "holm")[0] == pytest.approx(15 * 0.0001)


def test_adjust_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown correction 'bonf'"):
        stats.adjust([0.1], "bonf")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.adjust([0.1, 1.5])
    assert stats.adjust([]).size == 0


def test_randomisation_p_value_is_exact_on_small_samples():
    rng = np.random.default_rng(3)
    d = rng.random(12) - rng.random(12)
    flips = np.array(list(itertools.product((1, -1), repeat=len(d))))
    null = (flips * d).mean(axis=1)
    exact = np.mean(np.abs(null) >= abs(d.mean()) - 1e-12)
    assert stats.randomisation_p(d) == pytest.approx(exact)


def test_zero_differences_leave_the_p_exact_where_the_others_can_be_enumerated():
    """26 questions: 2**26 flips are too many to enumerate, but a zero's flip changes no mean,
    so they are copies of the non-zero differences' flips and the exact p is theirs. Seven
    differing, all by -0.1: the share of flips reaching |mean| is 2/2**7 exactly. Nine random
    ones among 17 zeros: brute force over their 2**9 flips."""
    d = np.zeros(26)
    d[[1, 4, 6, 9, 15, 20, 25]] = -0.1
    assert stats.randomisation_p(d) == 2 / 128
    nine = np.round(np.random.default_rng(11).random(9) - 0.5, 2)
    flips = np.array(list(itertools.product((1, -1), repeat=len(nine))))
    exact = np.mean(np.abs((flips * nine).mean(axis=1)) >= abs(nine.mean()) - 1e-12)
    assert stats.randomisation_p(np.concatenate([nine, np.zeros(17)])) == pytest.approx(
        exact, abs=1e-12)


def test_randomisation_p_on_large_samples_is_close_to_the_t_test():
    rng = np.random.default_rng(5)
    d = rng.normal(0.05, 0.3, 300)
    t_p = sps.ttest_1samp(d, 0).pvalue
    assert stats.randomisation_p(d) == pytest.approx(t_p, abs=0.01)


def test_bca_interval_is_close_to_the_t_interval_on_normal_data():
    rng = np.random.default_rng(7)
    d = rng.normal(0.1, 0.2, 400)
    half = sps.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    low, high = stats.bootstrap_ci(d)
    assert low == pytest.approx(d.mean() - half, abs=0.1 * half)
    assert high == pytest.approx(d.mean() + half, abs=0.1 * half)


def test_bca_falls_back_when_undefined_and_collapses_on_constant_differences():
    d = np.zeros(50)
    d[3] = 1.0  # jackknife acceleration is 0/0 for BCa here
    low, high = stats.bootstrap_ci(d)
    assert np.isfinite([low, high]).all() and 0 <= low <= d.mean() <= high
    assert stats.bootstrap_ci(np.full(5, 0.25)) == (0.25, 0.25)


def noncentral_t_power(n, dz, alpha=0.05):
    """Power of the two-sided one-sample t-test, from the noncentral t distribution (scipy)."""
    df, nc = n - 1, dz * math.sqrt(n)
    crit = sps.t.ppf(1 - alpha / 2, df)
    return sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)


@pytest.mark.parametrize("mean,sd", [(0.05, 0.3), (0.1, 0.2), (-0.02, 0.25), (0.3, 0.3)])
def test_questions_needed_is_the_least_n_with_80_percent_power(mean, sd):
    rng = np.random.default_rng(11)
    d = rng.normal(0, 1, 60)
    d = (d - d.mean()) / d.std(ddof=1) * sd + mean  # exactly this mean and sd
    n = stats.questions_needed(d)
    dz = abs(mean) / sd
    assert noncentral_t_power(n, dz) >= 0.8
    assert n == 2 or noncentral_t_power(n - 1, dz) < 0.8


def questions_needed_one_n_at_a_time(d, power=0.8, alpha=0.05):
    """The implementation ``stats.questions_needed`` replaced (one ``TTestPower`` call per n:
    doubling, then bisection), kept as the reference for its numbers."""
    from statsmodels.stats.power import TTestPower

    d = np.asarray(d, float)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if np.all(d == d[0]) or sd <= 1e-12 * abs(mean):
        return math.nan
    if mean == 0:
        return math.inf
    effect = abs(mean) / sd

    def enough(n):
        return float(TTestPower().power(effect_size=effect, nobs=n, alpha=alpha,
                                        alternative="two-sided")) >= power

    high = 2
    while not enough(high):
        if high > 10**9:
            return math.inf
        high *= 2
    low = high // 2 if high > 2 else 1
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return float(high)


def test_questions_needed_is_what_one_n_at_a_time_gives():
    """Effect sizes from 3 (2 questions) to 1e-5 (past 2**30: inf), over 2 to 200 questions,
    and each of the ablation set's per-question differences' shapes (many ties at 0)."""
    rng = np.random.default_rng(5)
    cases = []
    for dz in [3.0, 1.5, 0.9, 0.5, 0.31, 0.2, 0.12, 0.05, 0.02, 0.01, 3e-3, 1e-3, 1e-4, 1e-5]:
        for n in (2, 7, 53, 200):
            d = rng.normal(0, 1, n)
            cases.append((d - d.mean()) / d.std(ddof=1) + dz)
    ties = rng.choice([0.0, 0.0, 0.0, 0.1, -0.13, 0.37, 1.0, -0.5], size=(12, 53))
    cases += [row for row in ties if not np.all(row == row[0])]
    for d in cases:
        old, new = questions_needed_one_n_at_a_time(d), stats.questions_needed(d)
        # never below the 6 questions the sign-flip test needs to reach alpha 0.05 at all
        assert max(old, 6.0) == new or (math.isnan(old) and math.isnan(new)), (d.mean(), d.std())
    # d_z = 3: the noncentral t's power crosses 80% between 3 and 4 questions, but the
    # sign-flip test's least p over 5 is 2/32 = 0.0625 > 0.05: 6 questions
    assert {stats.questions_needed(d) for d in cases[:4]} == {6.0}
    assert noncentral_t_power(4, 3.0) >= 0.8 > noncentral_t_power(3, 3.0)
    assert questions_needed_one_n_at_a_time(cases[0]) == 4.0
    assert stats.questions_needed(cases[-len(ties) - 1]) == math.inf  # dz 1e-5, 200 questions


def test_least_testable_n_is_where_the_sign_flip_p_can_go_below_alpha():
    def least_p(n):  # every sign vector of n equal differences: only the two uniform reach it
        means = [abs(sum(s)) / n for s in itertools.product((1, -1), repeat=n)]
        return sum(m >= 1 for m in means) / len(means)

    for alpha in (0.05, 0.01, 0.1, 0.5):
        n = stats.least_testable_n(alpha)
        assert least_p(n) < alpha <= least_p(n - 1)
        assert stats.randomisation_p(np.ones(n)) < alpha
    assert stats.least_testable_n(0.05) == 6


def test_questions_needed_edge_cases():
    assert stats.questions_needed([0.1, -0.1, 0.0]) == math.inf
    assert math.isnan(stats.questions_needed([0.2, 0.2, 0.2]))  # d_z = 0.2/0: undefined
    assert math.isnan(stats.questions_needed([0.0, 0.0]))
    with pytest.raises(ValueError, match="at least 2"):
        stats.questions_needed([0.3])


def test_paired_reports_mean_interval_p_and_power():
    rng = np.random.default_rng(1)
    base = rng.random(80)
    run = base + rng.normal(0.05, 0.1, 80)
    t = stats.paired(run, base, "nDCG@10", kind="semantic")
    d = run - base
    assert (t.measure, t.kind, t.n) == ("nDCG@10", "semantic", 80)
    assert t.mean_diff == pytest.approx(d.mean())
    assert t.ci_low < d.mean() < t.ci_high
    assert t.p == pytest.approx(stats.randomisation_p(d))
    assert t.n_needed == stats.questions_needed(d)
    assert math.isnan(t.p_adj)
    with pytest.raises(ValueError, match="never adjusted"):
        t.significant()


def test_paired_rejects_mismatched_or_unscored_questions():
    with pytest.raises(ValueError, match="equal 1-d shapes"):
        stats.paired([0.1, 0.2], [0.1], "RR@10")
    with pytest.raises(ValueError, match="no paired questions"):
        stats.paired([], [], "RR@10")
    with pytest.raises(ValueError, match="NaN"):
        stats.paired([0.1, float("nan")], [0.1, 0.2], "RR@10")


def test_a_run_against_itself_is_no_difference():
    x = np.array([0.5, 1.0, 0.0, 0.25])
    t = stats.paired(np.tile(x, 2), np.tile(x, 2), "RR@10")
    assert (t.mean_diff, t.ci_low, t.ci_high, t.p) == (0, 0, 0, 1.0)
    assert math.isnan(t.n_needed)  # every difference 0: no spread, d_z = 0/0 is undefined


def test_adjust_family_adjusts_over_every_test_together():
    rng = np.random.default_rng(2)
    base = rng.random(40)
    tests = [stats.paired(base + rng.normal(shift, 0.2, 40), base, "RR@10", kind)
             for shift, kind in ((0.0, "a"), (0.1, "b"), (0.3, "c"))]
    adjusted = stats.adjust_family(tests, "holm")
    assert [t.p_adj for t in adjusted] == pytest.approx(holm_by_definition([t.p for t in tests]))
    assert all(a.p_adj >= a.p for a in adjusted)
    assert "Holm" in stats.correction_note("holm", "3 tests")
    assert "Benjamini-Hochberg" in stats.correction_note("bh", "3 tests")


def test_tied_with_best_keeps_runs_that_are_not_significantly_worse():
    rng = np.random.default_rng(4)
    best = rng.uniform(0.3, 0.7, 100)
    close = best.copy()
    close[:3] -= 0.1  # worse on 3 of 100 questions: sign-flip p = 2/8, not significant
    scores = {"close": close, "best": best, "bad": best - 0.3 + rng.normal(0, 0.05, 100)}
    out = stats.tied_with_best(scores, "RR@10")
    assert out.best == "best"
    assert out.tied == ("best", "close")
    raw = [stats.paired(scores[r], best, "RR@10").p for r in ("close", "bad")]
    assert [out.tests[r].p_adj for r in ("close", "bad")] == \
        pytest.approx(holm_by_definition(raw))
    assert stats.tied_with_best({"only": [0.5, 1.0]}, "RR@10").tied == ("only",)


def test_the_best_of_equal_means_is_the_first_id_whatever_the_order():
    # three runs tied at nDCG@10 1.000: the sweep named one best, compare and the page another
    means = {"c3": 1.0, "a1": 1.0, "b2": 1.0, "d4": 0.5}
    assert stats.best_of(means) == "a1" == stats.best_of(dict(reversed(means.items())))
    scores = {r: np.full(6, m) for r, m in means.items()}
    assert stats.tied_with_best(scores, "nDCG@10").best == "a1"
    assert stats.tied_with_best(dict(reversed(scores.items())), "nDCG@10").best == "a1"
