"""The gate: its rule on hand-made tests, and on real runs with a planted regression (a reranker
that reverses the head of every ranking) and a neutral change."""

from __future__ import annotations

import math

import pytest
from workspaces import record_run

from ragexp.cli import main as cli
from ragexp.config import schema
from ragexp.decide import gate
from ragexp.evaluation import stats
from ragexp.evaluation.stats import Paired
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
    # a kind's drop beyond the margin, not significant: said, where a plain PASS hid it
    assert ok.outcome(rule) == ("PASS (inconclusive for 1 kind(s): nDCG@10 factual -0.200 (30 "
                                "questions) beyond the margin, not significant: too few "
                                "questions of the kind to tell)")
    # a second measure's overall drop: the outcome named only the first measure's overall drop
    # and otherwise the kinds', so RR@10's went unsaid
    two = gate.decide([t("all", -0.01, 0.001), t("all", -0.3, 0.4, "RR@10"),
                       t("factual", -0.2, 0.2)], METRICS, PARAMS,
                      gate.Rule(margin=0.02, measures=("nDCG@10", "RR@10")))
    assert two.outcome(rule) == (
        "PASS (inconclusive: RR@10 -0.300 is not significant; 30 of the 40 questions needed to "
        "detect this difference)")
    calm = gate.decide([t("all", -0.01, 0.001), t("factual", -0.01, 0.2)], METRICS, PARAMS, rule)
    assert calm.outcome(rule) == "PASS"
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
    # the rate is every scored question's, whatever source decides the tests: it is said so
    assert at_edge.refusal.startswith("refusals: answerable refused (cross-validated, of every "
                                      "question the run scored) 0.175, budget 0.125")


def test_promotion_needs_a_significant_gain_of_at_least_min_effect():
    rule = gate.Rule(min_effect=0.02)
    assert gate.decide([t("all", 0.03, 0.01)], METRICS, PARAMS, rule).passed
    small = gate.decide([t("all", 0.01, 0.001)], METRICS, PARAMS, rule)
    assert "below the minimum effect" in small.reasons[0]
    noisy = gate.decide([t("all", 0.05, 0.2)], METRICS, PARAMS, rule)
    assert "not significant" in noisy.reasons[0]
    zero = gate.decide([t("all", 0.0, 1.0)], METRICS, PARAMS, gate.Rule(min_effect=0.0))
    assert not zero.passed and "is no gain" in zero.reasons[0]  # not "0.000 below 0.000"
    tiny = gate.decide([t("all", -1e-5, 1.0)], METRICS, PARAMS, gate.Rule(min_effect=0.0))
    assert "difference -0.0000 is no gain" in tiny.reasons[0]


def ci(diff, low, high):
    return stats.adjust_family([Paired("nDCG@10", "all", 30, diff, low, high, 0.5, 40.0)])


def test_a_cheaper_run_is_promoted_when_non_inferior_within_the_margin():
    rule = gate.Rule(margin=0.02, non_inferior=True)
    # a tie (the interval of a difference with no spread is the point 0): no gain, yet promoted
    assert gate.decide(ci(0.0, 0.0, 0.0), METRICS, PARAMS, rule).passed
    assert gate.decide(ci(-0.005, -0.02, 0.01), METRICS, PARAMS, rule).passed  # at the edge
    wide = gate.decide(ci(0.0, -0.03, 0.03), METRICS, PARAMS, rule)  # could be 0.03 worse
    assert not wide.passed and "CI low -0.0300 < -0.02" in wide.reasons[0]
    assert not gate.decide(ci(0.0, math.nan, math.nan), METRICS, PARAMS, rule).passed
    with pytest.raises(ValueError, match="drop --min-effect"):
        gate.Rule(non_inferior=True, min_effect=0.0)


def test_a_four_question_tie_says_its_interval_is_n_a_and_why_not_nan():
    """``promote --cheapest-tied ... --gate`` on a 4-question set printed ``95% CI low +nan <
    -0.01``: below 6 questions there is no interval, and the line says so."""
    import pandas as pd

    from ragexp.evaluation import significance

    table = pd.DataFrame({"id": ["q1", "q2", "q3", "q4"], "kind": ["factual"] * 4,
                          "ndcg_at_10": [1.0, 0.5, 0.0, 1.0]})
    rule = gate.Rule(margin=0.01, non_inferior=True)
    tests = gate.family_tests(table, table, rule)
    verdict = gate.decide(tests, METRICS, PARAMS, rule)
    assert not verdict.passed
    assert verdict.reasons == [
        "nDCG@10 is not shown to be no worse than the reference: difference +0.0000, 95% CI "
        "low n/a (4 questions; an interval needs at least 6; non-inferiority needs an interval "
        "whose low end is at least -0.01)"]
    shown = verdict.render(rule)
    assert "nan" not in shown.lower() and "+0.000 [n/a]" in shown
    # a p never computed is n/a too, also where a line compares it with alpha
    assert significance.format_p(math.nan) == "n/a"
    assert significance.format_p_against(math.nan, 0.05) == "n/a"
    assert significance.format_interval(0.1, math.nan, 0.2) == "+0.100 [n/a]"
    assert significance.format_interval(0.1, 0.0, 0.2) == "+0.100 [+0.000, +0.200]"


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


@pytest.mark.slow
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
    with pytest.raises(PromotionRefused, match="difference \+0.0000 is no gain"):
        promote(runs["neutral"], rule=gate.Rule())
    assert cli.main(["promote", "--gate", runs["neutral"]]) == 1
    assert tracking.client().get_model_version_by_alias(
        tracking.MODEL_NAME, tracking.ALIAS).run_id == runs["base"]


def test_promote_cheapest_tied_gate_promotes_a_tie_and_refuses_a_worse_run(runs, capsys):
    """A sweep of base and neutral (tied: every question scores the same) whose parent names
    neutral as the cheapest tied: --gate judges it non-inferior to the champion, base; a
    parent naming the reversed run is refused."""
    c = tracking.client()
    champion = c.get_run(runs["base"])
    promote(runs["base"])

    def sweep(chosen):
        parent = c.create_run(champion.info.experiment_id)
        c.set_tag(parent.info.run_id, "ragexp.cheapest_tied", chosen)
        c.set_terminated(parent.info.run_id)
        return parent.info.run_id

    assert cli.main(["promote", "--cheapest-tied", sweep(runs["reversed"]), "--gate"]) == 1
    assert "may be worse than the reference by more than the margin" in capsys.readouterr().err
    assert cli.main(["promote", "--cheapest-tied", sweep(runs["neutral"]), "--gate"]) == 0
    assert "is now 'champion'" in capsys.readouterr().out
    assert tracking.client().get_model_version_by_alias(
        tracking.MODEL_NAME, tracking.ALIAS).run_id == runs["neutral"]
    assert cli.main(["promote", "--cheapest-tied", sweep(runs["base"]), "--gate",
                     "--min-effect", "0.01"]) == 2
    assert "drop --min-effect" in capsys.readouterr().err


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
    with pytest.raises(significance.NotPaired, match=r"1 question\(s\) scored in only one of "
                                                     r"run and baseline: q2$"):
        significance.tests_against(a, b, ["nDCG@10"])
    # more than 5 such questions: the count, 5 of them, and how many more (not 5 alone)
    ids = [f"q{i}" for i in range(8)]
    full = pd.DataFrame({"id": ids, "kind": ["factual"] * 8, "ndcg_at_10": [0.5] * 8})
    with pytest.raises(significance.NotPaired, match=r"8 question\(s\) scored in only one of "
                                                     r"run and baseline: q0, q1, q2, q3, q4, "
                                                     r"\.\.\. and 3 more$"):
        significance.tests_against(full, full.assign(ndcg_at_10=None), ["nDCG@10"])
    same = significance.tests_against(a, a, ["nDCG@10"])
    assert [(x.kind, x.n, x.mean_diff) for x in same] == [("all", 2, 0.0), ("factual", 2, 0.0)]
    assert stats.adjust_family(same)[0].p_adj == 1.0


# ---- runs that hold no measurement, runs on the test split, measures the runs lack ---------

@pytest.fixture(scope="module")
def unusable(runs, module_mlflow_store):
    from workspaces import FAILING, record_failed_run

    base = [*BASE, f"cache_dir={module_mlflow_store.folder / 'cache'}", "progress=false"]
    deleted = record_run(*base, "answer.max_sentences=4")["run_id"]
    tracking.client().delete_run(deleted)
    return {"failed": record_failed_run(*base, *FAILING), "deleted": deleted,
            "test": record_run(*base, "split=test")["run_id"]}


def test_a_failed_or_deleted_run_is_refused_by_name_not_blamed_on_other_data(runs, unusable,
                                                                             capsys):
    # gate and confirm said "evaluated on different data (corpus_hash, golden_hash differ)",
    # exit 1, of a FAILED run (it has no data hashes); promote of a deleted run ended in
    # MLflow's traceback and left a logged model behind.
    failed, deleted = unusable["failed"], unusable["deleted"]
    for argv in (["gate", failed, "--against", runs["base"]],
                 ["gate", runs["base"], "--against", failed],
                 ["confirm", failed, "--baseline", runs["base"]],
                 ["confirm", runs["base"], "--baseline", failed]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"run {failed} is FAILED" in err and "different data" not in err, argv
    for argv in (["gate", deleted, "--against", runs["base"]], ["promote", deleted],
                 ["search", "--run", deleted, "refund policy"]):
        assert cli.main(argv) == 2, argv
        assert f"run {deleted} is deleted: restore it" in capsys.readouterr().err, argv
    assert not tracking.client().search_logged_models(
        experiment_ids=[tracking.client().get_run(deleted).info.experiment_id],
        filter_string=f"source_run_id = '{deleted}'")


def test_confirm_refuses_a_run_of_the_test_split_as_chosen_on_dev(runs, unusable, capsys):
    # its test score stood in the table's "run dev" column (0.510 for a run whose dev is 0.482)
    for argv in (["confirm", unusable["test"], "--baseline", runs["base"]],
                 ["confirm", runs["base"], "--baseline", unusable["test"]]):
        assert cli.main(argv) == 2, argv
        assert "was evaluated on the test split (split=test)" in capsys.readouterr().err


def test_a_measure_the_runs_lack_is_a_refused_input_not_a_regression(runs, capsys):
    assert cli.main(["gate", runs["neutral"], "--against", runs["base"],
                     "--measure", "nDCG@5"]) == 2  # it exited 1, a regression's code
    assert "was not scored on nDCG@5" in capsys.readouterr().err


def test_compare_refuses_a_baseline_on_other_data_with_exit_2(runs, capsys):
    c = tracking.client()
    c.set_tag(runs["neutral"], "golden_hash", "something-else")
    try:  # compare paired them silently while the gate refused; its refusal exited 1
        assert cli.main(["compare", "--runs", runs["neutral"], runs["base"],
                         "--baseline", runs["base"]]) == 2
        err = capsys.readouterr().err
        assert f"{runs['neutral'][:8]}: golden_hash differ" in err and "other data" in err
    finally:
        c.set_tag(runs["neutral"], "golden_hash", c.get_run(runs["base"]).data.tags["golden_hash"])


def test_runs_scored_at_another_unit_are_not_paired(runs, module_mlflow_store, capsys):
    # a section-unit run against a chunk-unit run: compare read +0.288 [+0.135, +0.429] p 0.016
    # and the gate passed it, a gain of the unit read as one of retrieval
    base = [*BASE, f"cache_dir={module_mlflow_store.folder / 'cache'}", "progress=false"]
    section = record_run(*base, "dataset.unit=section")["run_id"]
    v = gate.evaluate(section, runs["base"], gate.Rule())
    assert not v.passed and v.reasons == ["run and reference were evaluated on different data "
                                          "(dataset.unit differ): the gate cannot compare them"]
    assert cli.main(["compare", "--runs", section, runs["base"], "--baseline", runs["base"]]) == 2
    assert f"{section[:8]}: dataset.unit differ" in capsys.readouterr().err
    assert cli.main(["confirm", section, "--baseline", runs["base"]]) == 2
    assert "different data (dataset.unit differ)" in capsys.readouterr().err


@pytest.mark.parametrize("p, alpha, shown", [(0.17298, 0.173, "0.17298"), (0.1731, 0.173,
                                             "0.1731"), (0.5, 0.05, "0.500"),
                                             (0.0004, 0.05, "<0.001"), (0.05, 0.05, "0.050")])
def test_a_p_compared_with_alpha_shows_the_digits_that_make_the_line_true(p, alpha, shown):
    from ragexp.evaluation.significance import format_p_against

    assert format_p_against(p, alpha) == shown
