"""One precision wherever a p value is printed (a trial: ``ragexp confirm``'s first table gave
``0.5683`` and ``1.0``, its per-kind table ``0.568`` and ``1.000``; ``gate`` printed four
decimals): three decimals, ``<0.001`` below that, everywhere (``significance.format_p``). The
markdown tables and ``confirm`` are checked on recorded runs in test_starter.py and
test_small_sets.py (``P_CELL``)."""

from __future__ import annotations

import re

from ragexp.decide import gate
from ragexp.evaluation import significance
from ragexp.evaluation.stats import Paired

P_CELL = re.compile(r"(<0\.001|[01]\.\d{3})\*?")  # a printed p or p_adj


def test_format_p_is_three_decimals_or_below_a_thousandth():
    assert significance.format_p(0.56831) == "0.568"
    assert significance.format_p(1.0) == "1.000"
    assert significance.format_p(0.0004) == "<0.001"
    assert significance.format_p(0.001) == "0.001"
    assert significance.format_p_adj(0.0312) == "0.031*"  # below alpha 0.05
    assert significance.format_p_adj(0.05) == "0.050"
    for p in (0.56831, 1.0, 0.0004, 0.049999):
        assert P_CELL.fullmatch(significance.format_p_adj(p))


def test_gate_prints_p_as_the_tables_do():
    drop = Paired("nDCG@10", "all", 40, -0.05, -0.09, -0.01, 0.00431, 30.0, p_adj=0.01723)
    rule = gate.Rule(measures=("nDCG@10",))
    verdict = gate.decide([drop], {}, {}, rule)
    row = verdict.render(rule).splitlines()[1]
    assert row.split()[6:8] == ["0.004", "0.017"]  # p, p_adj; was 0.0043 0.0172
    assert any("(p_adj 0.017 < 0.05" in r for r in verdict.reasons), verdict.reasons
    gain = Paired("nDCG@10", "all", 40, 0.02, -0.01, 0.05, 0.31826, 300.0, p_adj=0.31826)
    (why,) = gate.decide([gain], {}, {}, gate.Rule(measures=("nDCG@10",), min_effect=0.0)
                         ).reasons
    assert "(p_adj 0.318 >= 0.05)" in why
