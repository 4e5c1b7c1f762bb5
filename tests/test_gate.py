"""The gate: its rule on hand-made tests, and on real runs with a planted regression (a reranker
that reverses the head of every ranking) and a neutral change."""

from __future__ import annotations

import math

import pytest
from workspaces import record_run

from ragexp.cli import main as cli
from ragexp.decide import gate
from ragexp.evaluation import stats
from ragexp.evaluation.stats import Paired
from ragexp.run import schema
from ragexp.serving.promote import PromotionRefused, promote
from ragexp.tracking import store as tracking

schema.register()
BASE = ["retriever=bm25", "reranker=none", "embedder=hash"]


def t(kind, diff, p_adj, measure="nDCG@10"):
    return Paired(measure, kind, 30, diff, diff - 0.05, diff + 0.05, p_adj, 40.0, p_adj)


METRICS = {"abstain.cv.refused_answerable": 0.10}
PARAMS = {"abstain.budget": "0.125"}


def test_rule_fails_only_significant_drops_beyond_the_margin():
    rule = gate.Rule(margin=0.02)
    ok = gate.decide([t("all", -0.01, 0.001), t("factual", -0.2, 0.2)], METRICS, PARAMS, rule)
    assert ok.passed, ok.reasons  # significant but within margin; big but not significant
    bad = gate.decide([t("all", 0.0, 1.0), t("semantic", -0.03, 0.01)], METRICS, PARAMS, rule)
    assert not bad.passed and "semantic" in bad.reasons[0]
    assert "REGRESSION" in bad.render(rule) and bad.render(rule).endswith(bad.reasons[0])


def test_rule_checks_refusals_against_budget_plus_slack():
    rule = gate.Rule(refusal_slack=0.05)
    at_edge = gate.decide([t("all", 0, 1)], {"abstain.cv.refused_answerable": 0.175}, PARAMS,
                          rule)
    assert at_edge.passed
    over = gate.decide([t("all", 0, 1)], {"abstain.cv.refused_answerable": 0.18}, PARAMS, rule)
    assert not over.passed and "over budget 0.125" in over.reasons[0]
    unchecked = gate.decide([t("all", 0, 1)], {}, {}, rule)
    assert unchecked.passed and "not checked" in unchecked.refusal


def test_promotion_needs_a_significant_gain_of_at_least_min_effect():
    rule = gate.Rule(min_effect=0.02)
    assert gate.decide([t("all", 0.03, 0.01)], METRICS, PARAMS, rule).passed
    small = gate.decide([t("all", 0.01, 0.001)], METRICS, PARAMS, rule)
    assert "below the minimum effect" in small.reasons[0]
    noisy = gate.decide([t("all", 0.05, 0.2)], METRICS, PARAMS, rule)
    assert "not significant" in noisy.reasons[0]
    zero = gate.decide([t("all", 0.0, 1.0)], METRICS, PARAMS, gate.Rule(min_effect=0.0))
    assert not zero.passed


def test_rule_rejects_bad_thresholds():
    for bad in ({"margin": -0.1}, {"min_effect": 2}, {"alpha": 0}, {"correction": "bonf"},
                {"measures": ()}):
        with pytest.raises(ValueError):
            gate.Rule(**bad)


def test_unadjusted_tests_cannot_be_judged():
    raw = Paired("nDCG@10", "all", 30, -0.2, -0.3, -0.1, 0.001, 10.0)
    assert math.isnan(raw.p_adj)
    with pytest.raises(ValueError, match="never adjusted"):
        gate.decide([raw], METRICS, PARAMS, gate.Rule())


@pytest.fixture(scope="module")
def runs(module_mlflow_store):
    base = [*BASE, f"cache_dir={module_mlflow_store.folder / 'cache'}", "progress=false"]

    def logged(*overrides):
        return record_run(*base, *overrides)["run_id"]

    return {"base": logged(),
            "reversed": logged("reranker._target_=planted.ReverseReranker", "reranker.top_n=10"),
            "neutral": logged("answer.max_sentences=3")}


def test_gate_fails_a_planted_regression_and_passes_a_neutral_change(runs, capsys):
    reversed_ = gate.evaluate(runs["reversed"], runs["base"], gate.Rule())
    assert not reversed_.passed
    overall = next(x for x in reversed_.tests if x.kind == "all")
    assert overall.mean_diff < -0.1 and overall.p_adj < 0.05
    assert any("nDCG@10 all" in r for r in reversed_.reasons)
    neutral = gate.evaluate(runs["neutral"], runs["base"], gate.Rule())
    assert neutral.passed, neutral.reasons
    assert all(x.mean_diff == 0 and x.p == 1.0 for x in neutral.tests)
    # the CLI: exit codes, one screen naming the correction, raw and adjusted p
    assert cli.main(["gate", runs["reversed"], "--against", runs["base"]]) == 1
    out = capsys.readouterr().out
    assert "Holm" in out and "p_adj" in out and "REGRESSION" in out and "FAIL" in out
    assert len(out.splitlines()) <= 25
    assert cli.main(["gate", runs["neutral"], "--against", runs["base"],
                     "--measure", "RR@10", "--measure", "nDCG@10"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("PASS") and "RR@10" in out


def test_gate_against_the_champion_and_promote_gate_share_the_rule(runs, capsys):
    assert cli.main(["gate", runs["neutral"]]) == 2  # no champion yet: an error, not a verdict
    hint = capsys.readouterr().err
    assert "no 'champion'" in hint
    assert "--against RUN_ID" in hint and "--run" not in hint  # gate's own option
    assert cli.main(["gate", "f" * 32, "--against", runs["base"]]) == 2
    assert f"no run id starts with '{'f' * 32}'" in capsys.readouterr().err
    promote(runs["base"])
    assert cli.main(["gate", runs["reversed"]]) == 1
    assert "against champion" in capsys.readouterr().out
    with pytest.raises(PromotionRefused, match="nDCG@10 all"):
        promote(runs["reversed"], rule=gate.Rule())
    # neutral passes the gate but is no gain: promotion refuses it
    with pytest.raises(PromotionRefused, match="below the minimum effect"):
        promote(runs["neutral"], rule=gate.Rule())
    assert cli.main(["promote", "--gate", runs["neutral"]]) == 1
    assert tracking.client().get_model_version_by_alias(
        tracking.MODEL_NAME, tracking.ALIAS).run_id == runs["base"]


def test_gate_refuses_runs_on_different_questions(runs, tmp_path):
    c = tracking.client()
    c.set_tag(runs["neutral"], "golden_hash", "something-else")
    try:
        v = gate.evaluate(runs["neutral"], runs["base"], gate.Rule())
        assert not v.passed and "different data" in v.reasons[0]
    finally:
        c.set_tag(runs["neutral"], "golden_hash", c.get_run(runs["base"]).data.tags["golden_hash"])


def test_tests_need_the_same_questions_scored_in_both_runs():
    import pandas as pd

    from ragexp.evaluation import significance

    a = pd.DataFrame({"id": ["q1", "q2", "q3"], "kind": ["factual"] * 3,
                      "ndcg_at_10": [0.5, 1.0, None]})
    with pytest.raises(significance.NotPaired, match="different questions") as err:
        significance.tests_against(a, a.iloc[:2], ["nDCG@10"])
    # trial item 10: a zero count is not printed ("0 only in baseline, e.g. []")
    assert "(1 only in run, e.g. q3): " in str(err.value) and "0 only" not in str(err.value)
    with pytest.raises(significance.NotPaired) as err:
        significance.tests_against(a.iloc[1:], a.iloc[:2], ["nDCG@10"])
    assert "(1 only in run, e.g. q3; 1 only in baseline, e.g. q1): " in str(err.value)
    b = a.assign(ndcg_at_10=[0.5, None, None])
    with pytest.raises(significance.NotPaired, match=r"only one of .*\['q2'\]"):
        significance.tests_against(a, b, ["nDCG@10"])
    same = significance.tests_against(a, a, ["nDCG@10"])
    assert [(x.kind, x.n, x.mean_diff) for x in same] == [("all", 2, 0.0), ("factual", 2, 0.0)]
    assert stats.adjust_family(same)[0].p_adj == 1.0
