"""``ragexp questions plan``: the pairs of a pilot sweep's top runs and the questions a paired
test needs for each (``decide.plan``), with the differences and the 80 % power n checked against
statsmodels' own solver."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.power import TTestPower

from ragexp.decide import plan
from ragexp.errors import InvalidValue


def pilot() -> dict[str, pd.Series]:
    rng = np.random.default_rng(1)
    ids = [f"q{i}" for i in range(60)]
    base = rng.uniform(0, 1, 60)
    runs = {"a": base + 0.20, "b": base + 0.05 + rng.normal(0, 0.2, 60),
            "c": base + rng.normal(0, 0.3, 60), "d": base - 0.5, "e": base + 0.20}
    return {r: pd.Series(v, index=ids) for r, v in runs.items()}


def test_pairs_of_the_top_runs_with_the_power_n():
    scores = pilot()
    needs = plan.pair_needs(scores, top=4)
    pairs = {(p.a, p.b) for p in needs}
    assert len(needs) == 6 and not any("d" in pair for pair in pairs)  # d is fifth by mean
    same = next(p for p in needs if {p.a, p.b} == {"a", "e"})
    assert same.delta == 0 and math.isinf(same.needed) and needs[0] is same  # closest first
    ab = next(p for p in needs if (p.a, p.b) == ("a", "b"))
    d = scores["a"].to_numpy() - scores["b"].to_numpy()
    assert ab.delta == pytest.approx(d.mean())
    effect = d.mean() / d.std(ddof=1)
    solved = TTestPower().solve_power(effect_size=effect, power=0.8, alpha=0.05,
                                      alternative="two-sided")
    assert ab.needed == math.ceil(solved)


def test_summary_says_how_many_to_generate():
    needs = [plan.PairNeed("a", "b", 0.1, 30.0), plan.PairNeed("a", "c", 0.02, 400.0),
             plan.PairNeed("a", "e", 0.0, math.inf)]
    line = plan.summary(needs, have=100)
    assert line.startswith("1 of 3 pairs can be told apart with the pilot's 100 questions")
    assert "400 questions tell every pair apart" in line and "(1 pair(s) do not differ)" in line
    assert line.endswith("generate about 300 more")


def test_a_plan_needs_two_runs():
    with pytest.raises(InvalidValue, match="at least 2 runs"):
        plan.pair_needs({"a": pd.Series([1.0, 0.0])})


def test_a_constant_nonzero_difference_has_no_power_n_and_is_not_counted():
    scores = {"a": pd.Series([1.0, 1.0, 1.0]), "b": pd.Series([0.5, 0.5, 0.5]),
              "c": pd.Series([1.0, 1.0, 1.0])}
    needs = {(p.a, p.b): p for p in plan.pair_needs(scores, top=3)}
    constant = next(p for (a, b), p in needs.items() if {a, b} == {"a", "b"} or {a, b} == {"c", "b"})
    assert constant.delta == pytest.approx(0.5) and math.isnan(constant.needed)
    same = next(p for (a, b), p in needs.items() if {a, b} == {"a", "c"})
    assert math.isinf(same.needed)
    line = plan.summary(list(needs.values()), have=3)
    assert line.startswith("0 of 3 pairs") and "(1 pair(s) do not differ)" in line
