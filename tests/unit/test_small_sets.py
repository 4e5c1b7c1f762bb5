"""Question sets of any size: one question, no question, every difference tied. Every statistic
gives a number or ``n/a``; a set no run could score is refused by ``golden check`` and by the
run, with one line and no traceback. Also which questions a run scores (``split=auto``) and
where relative paths and the default store live (the launch folder, ``hydra.job.chdir`` or not).

Expected values are derived here, independently of the code: the exact sign-flip p enumerates
all ``2**n`` sign vectors; the means are averaged by hand from the fixture's labels."""

from __future__ import annotations

import itertools
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import cli_env, run_app, run_here
from conftest import jsonl, write_tree
from test_p_format import P_CELL
from workspaces import compose_config, record_run

from ragexp.cli import main as cli
from ragexp.cli import tables
from ragexp.data import golden, split
from ragexp.decide import gate
from ragexp.evaluation import metrics, significance, stats
from ragexp.evaluation.measures import parse_all
from ragexp.records import Query
from ragexp.run import app
from ragexp.tracking import store as tracking

# Two documents; "Gamma" and "Delta" are words no question shares, so BM25 and the hash
# embedder rank the evidence first for the answerable questions below.
CORPUS = {
    "a.md": "# Alpha\n\nThe alpha service restarts every night at two o'clock.\n\n"
            "## Billing\n\nInvoices are sent on the first of each month by email.\n",
    "b.md": "# Beta\n\nBeta clusters run on three nodes with shared storage.\n",
}
FACTUAL = [
    {"id": "f1", "kind": "factual", "question": "When does the alpha service restart?",
     "answer": "two o'clock", "evidence": [{"doc": "a.md", "quote": "restarts every night"}]},
    {"id": "f2", "kind": "factual", "question": "How many nodes do beta clusters run on?",
     "answer": "three", "evidence": [{"doc": "b.md", "quote": "three nodes"}]},
]
LOOKUP = {"id": "s1", "kind": "lookup", "question": "When are invoices sent by email?",
          "answer": "the first of each month", "evidence": [{"doc": "a.md", "section": "Billing"}]}
UNANSWERABLE = [{"id": f"u{i}", "kind": "unanswerable", "question": q} for i, q in
                enumerate(["What colour is the company logo?", "Who founded the firm?"])]


def exact_sign_flip_p(d) -> float:
    """Two-sided p of mean(d) != 0 over all 2**n sign vectors (Fisher's randomisation test):
    the share of sign vectors whose |mean| is at least the observed |mean|."""
    d = np.asarray(d, float)
    observed = abs(d.mean())
    flips = [abs((d * np.array(signs)).mean()) for signs in
             itertools.product((1, -1), repeat=len(d))]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def workspace(tmp: Path, questions: list) -> Path:
    """``tmp/work`` holding ``corpus/`` and ``golden/q.jsonl`` with ``questions``."""
    return write_tree(tmp / "work", {**{f"corpus/{k}": v for k, v in CORPUS.items()},
                                     "golden/q.jsonl": jsonl(questions)})


def overrides(work: Path, *more: str) -> list[str]:
    # dataset.name: without one, a markdown corpus's experiment names its folder (#19 kind 10)
    return ["dataset=markdown", "dataset.name=markdown", f"dataset.corpus_dir={work / 'corpus'}",
            f"dataset.questions={work / 'golden'}", f"cache_dir={work / 'cache'}",
            "embedder=hash", "reranker=none", "progress=false", *more]


# ---- statistics over one question, no difference, and all ties -----------------------------

@pytest.mark.parametrize("d", [[0.4], [-1.0], [0.5, 0.5], [0.2, -0.2, 0.6], [1, 0, 0, 1, 0]])
def test_sign_flip_p_is_exact_for_small_sets(d):
    assert stats.randomisation_p(np.asarray(d, float)) == pytest.approx(exact_sign_flip_p(d))


def test_one_question_gives_p_one_its_point_and_no_power_estimate():
    t = stats.paired([0.75], [0.25], "nDCG@10", "lookup")
    assert (t.n, t.mean_diff) == (1, 0.5) and math.isnan(t.ci_low) and math.isnan(t.ci_high)
    assert t.p == 1.0 == exact_sign_flip_p([0.5])  # both signs give |mean| 0.5
    assert math.isnan(t.n_needed)  # one difference has no spread: undefined, not 0 or inf
    tied = stats.paired([0.3], [0.3], "nDCG@10")
    # trial item 6: one question has no power estimate whatever its difference (0 included)
    assert tied.p == 1.0 and math.isnan(tied.n_needed)
    assert significance.format_delta(t) == "+0.500 [n/a]"
    assert significance.format_delta(tied) == "+0.000 [n/a]"


def test_differences_without_spread_have_no_power_estimate():
    """One rule (docs/own-docs.md): the effect size d_z = mean/sd needs spread, so constant
    differences over n >= 2, zero or not, show n/a; a zero mean with spread shows ∞."""
    zero = stats.paired([0.5, 1.0, 0.0], [0.5, 1.0, 0.0], "RR@10")
    assert (zero.mean_diff, zero.p) == (0.0, 1.0)
    assert math.isnan(zero.n_needed)
    constant = stats.paired([1.0, 1.0], [0.5, 0.5], "RR@10")
    # sign vectors of (0.5, 0.5): means 0.5, 0, 0, -0.5 -> two of four reach |0.5|
    assert constant.p == pytest.approx(0.5) and math.isnan(constant.n_needed)
    # the trial's gate example: n = 2, constant Δ of -1 (was "2": the t-test's limit, which the
    # sign-flip test cannot reach: its least p over 2 questions is 2/4)
    collapse = stats.paired([0.0, 0.0], [1.0, 1.0], "nDCG@10")
    assert collapse.p == pytest.approx(exact_sign_flip_p([-1, -1])) == pytest.approx(0.5)
    assert significance.format_n_needed(collapse.n_needed) == "n/a"
    # and no interval: a bootstrap of 2 values is their range, no 95% interval (a range that
    # excluded 0 was printed beside p 0.5)
    assert significance.format_delta(collapse) == "-1.000 [n/a]"
    spread = stats.paired([0.2, 0.0], [0.0, 0.2], "nDCG@10")
    assert spread.n_needed == math.inf  # mean 0 with spread: nothing to detect


def test_below_six_questions_no_interval_and_power_is_at_least_six():
    # a new user's gate: 2 questions, nDCG 0.571 and 0.613 to 0: "-0.592 [-0.613, -0.571] p
    # 0.500" and "2 of the 2 questions needed to detect this difference"
    two = stats.paired([0.0, 0.0], [0.571, 0.613], "nDCG@10")
    assert two.p == 0.5 and significance.format_delta(two) == "-0.592 [n/a]"
    assert two.n_needed == 6.0
    five = stats.paired([0.0] * 5, [0.2, 0.5, 0.4, 0.9, 0.3], "nDCG@10")
    assert five.p == pytest.approx(2 / 32) and math.isnan(five.ci_low)
    six = stats.paired([0.0] * 6, [0.2, 0.5, 0.4, 0.9, 0.3, 0.6], "nDCG@10")
    assert six.p == pytest.approx(2 / 64) and six.ci_low < six.ci_high < 0


def test_power_is_shown_as_n_a_infinity_or_a_count():
    assert [significance.format_n_needed(n) for n in (math.nan, math.inf, 2e6, 12.0)] == \
        ["n/a", "∞", ">10^6", "12"]


def per_question(scores: dict[str, float], kinds: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"id": list(scores), "kind": [kinds[q] for q in scores],
                         "ndcg_at_10": list(scores.values()),
                         "rr_at_10": list(scores.values())})


KINDS = {"f1": "factual", "f2": "factual", "s1": "lookup"}


def test_tables_with_a_one_question_kind_show_n_a():
    run = per_question({"f1": 1.0, "f2": 0.5, "s1": 1.0}, KINDS)
    base = per_question({"f1": 0.5, "f2": 0.5, "s1": 0.0}, KINDS)
    results = significance.family({"r": run, "b": base}, "b", ("nDCG@10", "RR@10"))
    long = significance.long_table(results)
    lookup = long[(long["kind"] == "lookup") & (long["measure"] == "nDCG@10")].iloc[0]
    assert (lookup["n"], lookup["p"], lookup["n for 80% power"]) == (1, "1.000", "n/a")
    overall = long[(long["kind"] == "all") & (long["measure"] == "nDCG@10")].iloc[0]
    # d = (0.5, 0, 1): |sum| over the sign vectors is 1.5 or 0.5, each for half of them
    assert overall["p"] == f"{exact_sign_flip_p([0.5, 0, 1]):.3f}" == "0.500"
    wide = significance.wide_columns(results, ["b", "r"], "b", ("nDCG@10", "RR@10"))
    assert wide["n for 80% power (nDCG@10)"][1].endswith(" of 3")


def test_gate_shows_n_a_never_nan_for_a_one_question_kind():
    tests = stats.adjust_family([stats.paired([1.0, 0.5], [0.5, 0.5], "nDCG@10"),
                                 stats.paired([1.0], [0.0], "nDCG@10", "lookup")])
    text = gate.decide(tests, {}, {}, gate.Rule()).render(gate.Rule())
    assert "nan" not in text.lower() and text.splitlines()[-2].endswith("not checked "
                                                                          "(the run has no "
                                                                          "abstain metrics)")
    lookup = next(line for line in text.splitlines() if " lookup " in line)
    assert lookup.split()[-1] == "n/a" and "  1.000   1.000  " in lookup  # format_p


def test_tied_with_best_over_one_question():
    tied = stats.tied_with_best({"a": [1.0], "b": [0.0]}, "nDCG@10")
    assert tied.best == "a" and tied.tied == ("a", "b")  # p = 1: one question decides nothing
    assert tied.tests["b"].p == 1.0 and math.isnan(tied.tests["b"].n_needed)


def test_no_scored_question_gives_no_mean_at_all():
    assert metrics.aggregate({}, [Query("u0", "q", "unanswerable")]) == {}
    one = metrics.per_query({"s1": {"x": 1.0}}, {"s1": {"x": 1}}, parse_all(["RR@10"]))
    assert metrics.aggregate(one, [Query("s1", "q", "lookup")]) == {"rr_at_10": 1.0,
                                                                     "rr_at_10.lookup": 1.0}


# ---- golden check: a set no run could score, integer ids --------------------------------

def check(tmp_path, questions) -> tuple[int, str]:
    work = workspace(tmp_path, questions)
    proc = run_here(golden.main, ["check", "--corpus", str(work / "corpus"), "--golden",
                                  str(work / "golden")])
    assert "Traceback" not in proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("questions, message", [
    ([], "holds no question"),
    (["", "// only a comment"], "holds no question"),
    (UNANSWERABLE, "all 2 question(s) are unanswerable, so no run can score any measure"),
])
def test_golden_check_refuses_a_set_no_run_could_score(tmp_path, questions, message):
    code, out = check(tmp_path, questions)
    assert code == 1 and message in out and "golden/q.jsonl: " in out


PROCEDURAL = {"id": "p1", "kind": "procedural", "question": "How are invoices sent?",
              "answer": "by email", "evidence": [{"doc": "a.md", "quote": "by email"}]}
# Trial item 1: every kind a singleton -> floor(0.5 * 1 + 0.5) = 1 question of each in test,
# none in dev, so a default run (split=auto -> dev) has nothing to score.
SINGLETONS = [([FACTUAL[0]], "1 question"), ([FACTUAL[0], PROCEDURAL, UNANSWERABLE[0]],
                                             "3 questions")]


@pytest.mark.parametrize("questions, total", SINGLETONS)
def test_golden_check_warns_when_the_dev_split_holds_nothing_to_score(tmp_path, questions,
                                                                        total):
    code, out = check(tmp_path, questions)
    assert code == 0, out
    assert (f"warning: a run with the default split=auto scores ragexp's dev split: split "
            f"'dev' (seed 0, test share 0.5) holds 0 of the {total} and no answerable "
            f"one") in out and "score every question with split=all" in out
    assert split.too_small([Query(q["id"], q["question"], q["kind"]) for q in questions],
                           "test", 0, 0.5) is None  # test holds them all
    # f2 goes to dev; the one lookup question to test, which the per-kind warning says
    more = [ln for ln in check(tmp_path / "more", [*FACTUAL, LOOKUP])[1].splitlines()
            if ln.startswith("warning")]
    assert more == ["warning: kind 'lookup' has no question on ragexp's dev split (seed 0, test "
                    "share 0.5): its 1 question is in test (each kind puts floor(0.5 x its "
                    "questions + 0.5) there), so a run with the default split=auto logs no "
                    "measure of 'lookup'; add questions of it, or score every question with "
                    "split=all"]


@pytest.mark.slow
@pytest.mark.parametrize("questions, total", SINGLETONS)
def test_a_run_on_an_empty_dev_split_says_split_all_in_one_line(tmp_path, questions, total):
    work = workspace(tmp_path, questions)
    proc = run_app(tmp_path, *overrides(work), cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    (line,) = [ln for ln in out.splitlines() if "job failed" in ln]
    assert f"EmptySplit: 'markdown': scoring 0 of {total}: split 'dev'" in line
    assert "split=all" in line
    ok = run_app(tmp_path, *overrides(work), "split=all", cwd=work)
    assert ok.returncode == 0 and f"scoring {total.split()[0]} of {total}: rule split=all" in \
        ok.stdout + ok.stderr


def test_golden_check_warns_of_each_kind_without_a_question_on_dev(tmp_path):
    """Two factual questions split one each way; one lookup and one procedural question go to
    test (floor(0.5 x 1 + 0.5) = 1), so dev has nothing of either: both named, in order, and
    the split itself (``split.assign``) agrees."""
    questions = [*FACTUAL, LOOKUP, PROCEDURAL]
    code, out = check(tmp_path, questions)
    warned = [ln.split("'")[1] for ln in out.splitlines() if ln.startswith("warning: kind")]
    assert code == 0 and warned == ["lookup", "procedural"], out
    queries = [Query(q["id"], q["question"], q["kind"]) for q in questions]
    assigned = split.assign(queries, 0, 0.5)
    assert {q.kind for q in queries if assigned[q.qid] == "dev"} == {"factual"}
    assert split.kinds_without(queries, "dev", 0, 0.5) == {"lookup": 1, "procedural": 1}
    assert split.kinds_without(queries, "test", 0, 0.5) == {}


def test_golden_check_accepts_one_answerable_question_and_integer_ids(tmp_path):
    code, out = check(tmp_path, [{**LOOKUP, "id": 7}, *UNANSWERABLE])
    assert code == 0, out
    docs = golden.load_corpus(tmp_path / "work" / "corpus")
    queries = golden.load_golden(tmp_path / "work" / "golden", docs)
    assert [q.qid for q in queries] == ["7", "u0", "u1"]  # 7 is "7", as BEIR's reader reads it


@pytest.mark.parametrize("bad", [7.5, True, None, "", [7]])
def test_golden_ids_that_are_not_strings_or_integers_are_refused(tmp_path, bad):
    code, out = check(tmp_path, [{**LOOKUP, "id": bad}])
    assert code == 1 and "'id' must be a non-empty string or an integer" in out


# ---- which questions a run scores: split=auto ---------------------------------------------

@pytest.mark.parametrize("requested, own, chosen", [
    ("auto", "test", "all"), ("auto", None, "dev"), ("dev", "test", "dev"),
    ("test", None, "test"), ("all", None, "all")])
def test_auto_scores_a_dataset_s_own_split_whole_and_other_questions_on_dev(requested, own,
                                                                            chosen):
    assert split.effective(requested, own) == chosen


def test_an_unknown_split_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="split must be one of auto, dev, test, all, got 'train'"):
        split.effective("train", None)


def test_the_rule_line_counts_and_names_the_rule():
    assert split.rule("auto", "all", "test", 300, 300, 0, 0.5) == (
        "scoring 300 of 300 questions: rule split=auto -> all, the dataset's own split "
        "(dataset.split=test) scored whole, comparable with published results")
    assert split.rule("dev", "dev", None, 8, 19, 0, 0.5).startswith(
        "scoring 8 of 19 questions: rule split=dev, ragexp's seeded dev/test split (seed 0")


def test_handbook_default_scores_dev_with_the_config_hash_of_split_dev(mlflow_store, caplog,
                                                                        golden):
    dev_ids = {q for q, side in split.assign(golden, seed=0).items() if side == "dev"}
    with caplog.at_level(logging.INFO, logger="ragexp"):
        auto = app.resolve(compose_config("embedder=hash"))
    explicit = app.resolve(compose_config("embedder=hash", "split=dev"))
    assert auto.config_hash == explicit.config_hash  # recorded handbook runs keep their meaning
    assert auto.resolved["split"] == "dev"
    assert {q.qid for q in auto.dataset.queries()} == dev_ids
    assert (f"scoring {len(dev_ids)} of {len(golden)} questions: rule split=auto -> dev"
            in caplog.text)


def test_own_questions_are_scored_on_dev_and_the_first_line_says_so(tmp_path, mlflow_store,
                                                                     caplog):
    """The issue's 19 own questions that became 8: kinds of 4, 5, 5 and 5 send
    floor(n/2 + 0.5) = 2, 3, 3, 3 to test, so dev holds 2 + 2 + 2 + 2 = 8; now the run says so."""
    sizes = {"k1": 4, "k2": 5, "k3": 5, "k4": 5}
    questions = [{"id": f"{kind}-{i}", "kind": kind, "question": f"question {i} of {kind}?",
                  "answer": "alpha", "evidence": [{"doc": "a.md"}]}
                 for kind, n in sizes.items() for i in range(n)]
    work = workspace(tmp_path, questions)
    with caplog.at_level(logging.INFO, logger="ragexp"):
        job = app.resolve(compose_config(*overrides(work)))
    assert len(job.dataset.queries()) == 8 and job.resolved["split"] == "dev"
    assert "scoring 8 of 19 questions: rule split=auto -> dev, ragexp's seeded dev/test " \
           "split" in caplog.text
    whole = app.resolve(compose_config(*overrides(work, "split=all")))
    assert len(whole.dataset.queries()) == 19


def test_beir_default_scores_its_own_split_whole(tmp_path, mlflow_store, caplog):
    rows = [{"_id": f"d{i}", "title": "", "text": f"document {i} about topic {w}"}
            for i, w in enumerate(["zebra", "penguin", "volcano", "tide", "desert", "comet"])]
    queries = [{"_id": f"q{i}", "text": f"topic {w}", "metadata": {"kind": k}}
               for i, (w, k) in enumerate([("zebra", "a"), ("penguin", "a"), ("volcano", "a"),
                                           ("tide", "b"), ("desert", "b"), ("comet", "b")])]
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(6))
    folder = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(rows),
                                            "queries.jsonl": jsonl(queries),
                                            "qrels/test.tsv": qrels})
    base = ["dataset=beir", f"dataset.path={folder}", "chunking=none", "embedder=hash",
            "reranker=none", "retriever=bm25", f"cache_dir={tmp_path / 'cache'}",
            "progress=false"]
    with caplog.at_level(logging.INFO, logger="ragexp"):
        whole = record_run(*base)
    assert "scoring 6 of 6 questions: rule split=auto -> all" in caplog.text
    run = tracking.client().get_run(whole["run_id"])
    assert run.data.params["split"] == "all"
    table = pd.read_csv(tracking.client().download_artifacts(whole["run_id"],
                                                             "per_question.csv"))
    assert sorted(table["id"]) == [f"q{i}" for i in range(6)]
    dev = record_run(*base, "split=dev")  # ragexp's split on top, when asked for
    dev_table = pd.read_csv(tracking.client().download_artifacts(dev["run_id"],
                                                                 "per_question.csv"))
    # per kind of 3: floor(0.5 * 3 + 0.5) = 2 go to test, 1 stays in dev
    assert len(dev_table) == 2


# ---- corpora too small to rank ---------------------------------------------------------------

def test_a_one_document_corpus_warns_that_it_measures_nothing(tmp_path, mlflow_store, caplog):
    """It scored 1.000 on every measure with only an INFO line ("rank fewer than k"): a run that
    measures nothing looked perfect. Its one chunk is every ranking, so no configuration can
    score otherwise: a warning in the output and a tag on the run now say so."""
    work = write_tree(tmp_path / "work", {
        "corpus/one.md": "# One\n\nHi there.\n",
        "golden/q.jsonl": jsonl([{"id": "a", "kind": "f", "question": "hi?", "answer": "hi",
                                  "evidence": [{"doc": "one.md", "quote": "Hi there."}]}])})
    with caplog.at_level(logging.INFO, logger="ragexp"):
        done = record_run(*overrides(work, "split=all"))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
              and "cannot tell them apart" in r.getMessage()]
    assert warned == ["the corpus has one chunk under this chunking and dataset.unit=chunk "
                      "(one.md#0), and every question's ranking holds it: every ranking measure "
                      "scores the same whatever the retriever or reranker, so this run cannot "
                      "tell them apart; add documents that do not answer the questions, so "
                      "retrieval has something to rank past"]
    assert done["ndcg_at_10"] == done["r_at_1"] == 1.0
    tags = tracking.client().get_run(done["run_id"]).data.tags
    assert tags["ragexp.warning.complete_rankings"] == warned[0]


@pytest.mark.slow
def test_a_two_document_corpus_names_the_measures_that_cannot_differ(
        tmp_path, mlflow_store, caplog):
    # two documents, each question's one relevant among them: R@5 finds it in any order
    # (fixed), nDCG@5 ranks it first or second (can differ). With the default measures
    # (deepest R@100) it said nothing, though R@3 to R@10 and Success@3 to @10 are fixed too.
    work = workspace(tmp_path, FACTUAL)
    with caplog.at_level(logging.WARNING, logger="ragexp"):
        done = record_run(*overrides(work, "split=all", "dataset.unit=document",
                                     "measures=[R@5,nDCG@5]", "objective=nDCG@5"))
    tags = tracking.client().get_run(done["run_id"]).data.tags
    assert tags["ragexp.warning.complete_rankings"] == (
        "every question's ranking holds all 2 documents of the corpus under this chunking and "
        "dataset.unit=document: R@5 cannot differ between retrievers or rerankers; only nDCG@5 "
        "can tell them apart; add documents that do not answer the questions, so retrieval "
        "has something to rank past")
    assert tags["ragexp.warning.complete_rankings"] in caplog.text
    plain = record_run(*overrides(work, "split=all", "dataset.unit=document"))
    said = tracking.client().get_run(plain["run_id"]).data.tags[
        "ragexp.warning.complete_rankings"]
    fixed, varying = said.split(": ", 1)[1].split("; add ")[0].split(" cannot differ between "
                                                                     "retrievers or rerankers; "
                                                                     "only ")
    assert set(fixed.split(", ")) == {"Success@3", "Success@5", "Success@10", "R@3", "R@5",
                                      "R@10", "R@100"}
    assert set(varying.removesuffix(" can tell them apart").split(", ")) == {
        "Success@1", "R@1", "RR@10", "nDCG@10"}


# ---- runs on tiny sets, through the entry points ---------------------------------------------

def test_a_run_with_no_answerable_question_in_its_split_fails_in_one_line(tmp_path,
                                                                          mlflow_store):
    # one answerable question: its kind of one goes to test, so dev holds only unanswerable ones
    work = workspace(tmp_path, [LOOKUP, *UNANSWERABLE])
    with pytest.raises(ValueError, match="none of the 1 question.s. scored is answerable"):
        record_run(*overrides(work, "split=dev"))


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory, module_mlflow_store):
    """Three runs on 3 answerable questions (kinds of 2 and 1) and 2 unanswerable ones. bm25 and
    dense (hash embedder) rank each question's one relevant chunk first: every score 1.0, every
    difference 0 (all ties). ``reversed`` reverses dense's 3-chunk ranking: the relevant chunk
    at rank 3, so nDCG@10 = 1/log2(4) = 0.5 and RR@10 = 1/3 for every question."""
    work = workspace(tmp_path_factory.mktemp("tiny"), [*FACTUAL, LOOKUP, *UNANSWERABLE])
    base = overrides(work, "split=all")
    return {"bm25": record_run(*base, "retriever=bm25"),
            "dense": record_run(*base, "retriever=dense"),
            "reversed": record_run(*base, "retriever=dense",
                                   "reranker._target_=planted.ReverseReranker",
                                   "reranker.top_n=10")}


def test_a_run_logs_and_reports_the_folds_it_cross_validated_over(tmp_path, mlflow_store,
                                                                  caplog):
    """``abstain.folds=50`` on 11 questions, 2 of them unanswerable: the run recorded only the
    50 asked, ran 2 folds without a word, and the report printed "CV = 50-fold"."""
    more = [{"id": f"g{i}", "kind": "factual", "question": f"When does alpha restart {i}?",
             "answer": "two", "evidence": [{"doc": "a.md", "quote": "restarts every night"}]}
            for i in range(6)]
    work = workspace(tmp_path, [*FACTUAL, LOOKUP, *more, *UNANSWERABLE])
    with caplog.at_level(logging.WARNING, logger="ragexp"):
        run = record_run(*overrides(work, "split=all", "retriever=bm25", "abstain.folds=50"))
    recorded = tracking.client().get_run(run["run_id"]).data
    assert recorded.params["abstain.folds"] == "50" and run["abstain.cv.folds"] == 2.0
    assert ("abstain.folds=50, but the 11 scored questions hold 2 unanswerable ones, and each "
            "fold needs one: the threshold is cross-validated over 2 folds") in caplog.text
    df = pd.DataFrame({"params.abstain.folds": ["50"], "metrics.abstain.cv.folds": [2.0]})
    assert tables.cv_note(df) == ("CV = 2-fold cross-validated threshold, fewer than "
                                  "abstain.folds=50: each fold holds out an unanswerable "
                                  "question, and there are only 2", 2)


def test_the_report_states_the_folds_the_runs_used():
    same = pd.DataFrame({"params.abstain.folds": ["5", "5"],
                         "metrics.abstain.cv.folds": [5.0, 5.0]})
    assert tables.cv_note(same) == ("CV = 5-fold cross-validated threshold", 5)
    # runs of other questions (or one recorded before the metric): each run's in a column
    mixed = pd.DataFrame({"params.abstain.folds": ["5", "5"],
                          "metrics.abstain.cv.folds": [5.0, float("nan")]})
    note, k = tables.cv_note(mixed)
    assert k is None and note.startswith("CV = cross-validated threshold, over the folds in "
                                         "column CV folds (abstain.folds=5;")


def test_tiny_runs_score_what_their_rankings_give(tiny_runs):
    for name in ("bm25", "dense"):
        assert tiny_runs[name]["ndcg_at_10"] == 1.0 == tiny_runs[name]["rr_at_10.lookup"]
    assert tiny_runs["reversed"]["ndcg_at_10"] == pytest.approx(1 / math.log2(4))
    assert tiny_runs["reversed"]["rr_at_10.lookup"] == pytest.approx(1 / 3)
    assert "abstain.auc" in tiny_runs["bm25"]  # 3 answerable and 2 unanswerable: a curve


def test_compare_shows_n_a_for_a_one_question_kind_and_infinity_for_ties(tiny_runs, capsys):
    ids = {name: out["run_id"] for name, out in tiny_runs.items()}
    assert cli.main(["compare", "--experiment", "ragexp-markdown", "--runs", ids["reversed"],
                     ids["dense"], "--baseline", ids["bm25"]]) == 0
    out = capsys.readouterr().out
    rows = {tuple(c.strip() for c in line.split("|")[1:5]): line.split("|")[5:-1]
            for line in out.splitlines() if line.count("|") == 10}
    # run, name, measure, kind -> n, Δ [CI], p, p_adj, n for 80% power; runs of overrides
    # (ablation "custom") are named by the settings that tell them apart
    rev, dense = ids["reversed"][:8], ids["dense"][:8]
    # the reranker is the same option for all three (its top_n differs), the retriever not
    rev_name, dense_name = ("reranker.top_n=10 retriever.name=dense",
                            "reranker.top_n=0 retriever.name=dense")
    lookup = [c.strip() for c in rows[(rev, rev_name, "nDCG@10", "lookup")]]
    assert lookup == ["1", "-0.500 [n/a]", "1.000", "1.000", "n/a"]
    overall = [c.strip() for c in rows[(rev, rev_name, "nDCG@10", "all")]]
    # d = (-0.5, -0.5, -0.5): 2 of 8 sign vectors reach |mean| 0.5; constant d: no spread, n/a
    assert overall[2] == f"{exact_sign_flip_p([-0.5] * 3):.3f}" == "0.250" and overall[4] == "n/a"
    ties = [c.strip() for c in rows[(dense, dense_name, "RR@10", "lookup")]]
    assert ties == ["1", "+0.000 [n/a]", "1.000", "1.000", "n/a"]  # n = 1: n/a, Δ 0 or not


def test_gate_shows_n_a_for_a_one_question_kind(tiny_runs, capsys):
    assert cli.main(["gate", tiny_runs["reversed"]["run_id"], "--against",
                     tiny_runs["bm25"]["run_id"], "--refusal-slack", "1"]) == 0
    verdict = capsys.readouterr().out
    lines = [ln.split() for ln in verdict.splitlines() if ln.startswith("nDCG@10")]
    # group, n, p, p_adj (Holm over 0.25, 0.5, 1.0: 0.75, 1, 1), n for 80% power
    assert [(ln[1], ln[2], ln[-3], ln[-2], ln[-1]) for ln in lines] == [
        ("all", "3", "0.250", "0.750", "n/a"), ("factual", "2", "0.500", "1.000", "n/a"),
        ("lookup", "1", "1.000", "1.000", "n/a")]  # constant Δ -0.5: no spread, n/a
    assert "nan" not in verdict and verdict.rstrip().splitlines()[-1] == (
        "PASS (inconclusive: nDCG@10 -0.500 is not significant; no power estimate from 3 "
        "questions (too few, or differences without spread))")


def _overall(n: int, delta: float, p_adj: float, n_needed: float) -> stats.Paired:
    return stats.Paired("nDCG@10", "all", n, delta, delta - 0.1, delta + 0.1, p_adj, n_needed,
                        p_adj)


def test_a_pass_on_a_drop_the_set_cannot_detect_says_inconclusive():
    """Trial item 7: nDCG@10 1.000 -> 0.083 on 6 questions (Δ -0.917, p_adj 0.125, 11
    questions for 80% power) passes, as the rule says, but says the pass is inconclusive."""
    rule = gate.Rule()
    verdict = gate.decide([_overall(6, -0.917, 0.125, 11.0)], {}, {}, rule)
    assert verdict.passed
    assert verdict.render(rule).splitlines()[-1] == (
        "PASS (inconclusive: nDCG@10 -0.917 is not significant; 6 of the 11 questions needed "
        "to detect this difference)")
    # another of the kind: a drop just beyond the margin on 20 questions needing 400
    small = gate.decide([_overall(20, -0.02, 0.4, 400.0)], {}, {}, rule)
    assert small.render(rule).endswith("20 of the 400 questions needed to detect this "
                                       "difference)")
    # a drop within the margin, or a gain, is a plain PASS; a significant drop still fails
    for t in (_overall(6, -0.005, 0.9, 50.0), _overall(6, 0.3, 0.5, 9.0)):
        assert gate.decide([t], {}, {}, rule).render(rule).splitlines()[-1] == "PASS"
    failed = gate.decide([_overall(30, -0.2, 0.001, 12.0)], {}, {}, rule)
    assert not failed.passed and failed.render(rule).splitlines()[-1].startswith("FAIL: ")


@pytest.mark.slow
def test_a_sweep_on_a_tiny_set_decides_without_traceback(tmp_path):
    """``python -m ragexp -m``: vs_baseline metrics, the runs tied with the best and the sweep's
    page on two all-tied jobs."""
    work = workspace(tmp_path, [*FACTUAL, LOOKUP, *UNANSWERABLE])
    proc = run_app(tmp_path, "-m", *overrides(work), "retriever=bm25,dense", "split=all",
                   "baseline=custom", "experiment=small",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "sweep done: 2 finished" in out and "scoring 5 of 5 questions: rule split=all" in out
    assert "vs_baseline metrics logged against" in out and "tied with it" in out
    assert "wrote report.html" in out


@pytest.mark.slow
def test_only_unanswerable_questions_fail_in_one_line_without_traceback(tmp_path):
    work = workspace(tmp_path, UNANSWERABLE)
    proc = run_app(tmp_path, *overrides(work), "split=all", cwd=work, migrated=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert "all 2 question(s) are unanswerable" in proc.stderr + proc.stdout


# ---- relative paths and the default store: the launch folder --------------------------------

@pytest.mark.slow
def test_chdir_runs_use_the_launch_folder_store_and_a_rerun_is_skipped(tmp_path):
    work = workspace(tmp_path, [*FACTUAL, LOOKUP, *UNANSWERABLE])
    env = cli_env(tmp_path)
    del env["MLFLOW_TRACKING_URI"]  # ragexp's own default store
    args = [sys.executable, "-m", "ragexp", "dataset=markdown", "dataset.name=markdown",
            "dataset.corpus_dir=corpus",
            "dataset.questions=golden", "cache_dir=cache", "embedder=hash", "reranker=none",
            "progress=false", "split=all", "hydra.job.chdir=true"]
    first, again = (subprocess.run(args, cwd=work, env=env, capture_output=True, text=True,
                                   timeout=600) for _ in range(2))
    assert first.returncode == 0, first.stdout + first.stderr
    assert again.returncode == 0 and "skipping: identical config" in again.stdout + again.stderr
    assert [p.relative_to(work).as_posix() for p in work.rglob("mlflow.db")] == \
        ["mlruns/mlflow.db"]
    assert (work / "cache" / "embeddings").is_dir()
    run_id = next(ln.split()[1] for ln in first.stdout.splitlines() if ln.startswith("run "))
    listed = subprocess.run([sys.executable, "-c", "import sys; from ragexp.cli.main import main;"
                             " sys.exit(main(sys.argv[1:]))", "compare", "--experiment",
                             "ragexp-markdown"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0 and run_id[:8] in listed.stdout, listed.stderr


def test_relative_paths_are_anchored_only_when_the_job_runs_elsewhere(tmp_path, monkeypatch):
    from ragexp.config import build

    cfg = compose_config("dataset=markdown", "dataset.corpus_dir=corpus",
                         "dataset.questions=/abs/golden", "cache_dir=cache",
                         "retriever=trec_run", "retriever.path=runs/bm25.trec")
    launch = tmp_path / "launch"
    launch.mkdir()
    monkeypatch.chdir(launch)
    build.anchor_paths(cfg, launch)  # launched here: left as written
    assert (cfg.dataset.corpus_dir, cfg.cache_dir) == ("corpus", "cache")
    elsewhere = tmp_path / "outputs" / "job"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    build.anchor_paths(cfg, launch)
    assert cfg.dataset.corpus_dir == str(launch.resolve() / "corpus")
    assert cfg.retriever.path == str(launch.resolve() / "runs" / "bm25.trec")
    assert cfg.cache_dir == cfg.embedder.cache_dir == str(launch.resolve() / "cache")
    assert cfg.dataset.questions == "/abs/golden"


def test_the_default_store_is_the_launch_folder_s(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlruns' / 'mlflow.db'}"


def test_walkthrough_records_this_folder_relative(tmp_path):
    from tools.walkthrough import relative

    text = f"env MLFLOW_TRACKING_URI=sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db mlflow"
    assert relative(text, tmp_path) == "env MLFLOW_TRACKING_URI=sqlite:///mlruns/mlflow.db mlflow"
    assert relative("/elsewhere/x", tmp_path) == "/elsewhere/x"


# ---- confirm: what it refuses, and the name it shows (trial item 4) --------------------------

def test_confirm_refuses_a_run_selected_on_all_questions(tiny_runs, capsys, monkeypatch):
    """split=all holds nothing out: no test half to confirm on, with --baseline or without."""
    from types import SimpleNamespace

    from ragexp.tracking import store as tracking_store

    run, base = tiny_runs["reversed"]["run_id"], tiny_runs["bm25"]["run_id"]
    assert cli.main(["confirm", run, "--baseline", base]) == 2
    monkeypatch.setattr(tracking_store, "champion", lambda *a: SimpleNamespace(run_id=base))
    assert cli.main(["confirm", run]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: run {run[:8]} was selected on all questions (split=all), so nothing "
                   f"is held out to confirm it on: run the sweep with split=dev, then confirm "
                   f"its choice"] * 2


@pytest.fixture(scope="module")
def dev_runs(tmp_path_factory, module_mlflow_store):
    """Dev runs on two sets: ``a`` and ``a_dense`` on the same questions, ``other`` on a set
    with one more factual question (another golden_hash), its questions file relative."""
    tmp = tmp_path_factory.mktemp("dev")
    a = workspace(tmp / "a", [*FACTUAL, LOOKUP, *UNANSWERABLE])
    b = workspace(tmp / "b", [*FACTUAL, {**FACTUAL[0], "id": "f3"}, LOOKUP, *UNANSWERABLE])
    return {"a": record_run(*overrides(a, "split=dev", "retriever=bm25"))["run_id"],
            "a_dense": record_run(*overrides(a, "split=dev", "retriever=dense"))["run_id"],
            "other": record_run(*overrides(b, "split=dev", "retriever=dense"))["run_id"]}


def test_confirm_refuses_a_baseline_on_other_data_in_one_line(dev_runs, capsys, monkeypatch):
    """The trial's example: the champion, the fallback baseline, is a run on another set."""
    from types import SimpleNamespace

    from ragexp.tracking import store as tracking_store

    run, other = dev_runs["a"], dev_runs["other"]
    monkeypatch.setattr(tracking_store, "champion", lambda *a: SimpleNamespace(run_id=other))
    assert cli.main(["confirm", run]) == 2
    assert cli.main(["confirm", run, "--baseline", other]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    assert out.err.strip().splitlines() == [
        f"error: run {run[:8]} and baseline {other[:8]} were evaluated on different data "
        f"(golden_hash differ): confirm cannot compare them; pass --baseline RUN_ID of a run "
        f"on the same data"] * 2


def test_confirm_with_a_baseline_names_the_run_in_the_per_kind_table(dev_runs, capsys):
    run, base = dev_runs["a_dense"], dev_runs["a"]
    assert cli.main(["confirm", run, "--baseline", base]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")[1:-1]]
            for line in out.split("Per kind on test:")[1].splitlines()
            if line.startswith(f"| {run[:8]}")]
    # p and p_adj printed alike in both tables (the first gave 0.5683 and 1.0)
    first = [[c.strip() for c in line.split("|")[1:-1]]
             for line in out.split("Per kind on test:")[0].splitlines() if line.startswith("| ")]
    p_at = first[0].index("p"), first[0].index("p_adj")
    assert len(first) > 2 and all(P_CELL.fullmatch(r[i]) for r in first[2:] for i in p_at)
    assert all(P_CELL.fullmatch(r[6]) and P_CELL.fullmatch(r[7]) for r in rows)
    # a run of overrides (ablation "custom") is named by what tells it from its baseline
    assert rows and {r[1] for r in rows} == {"retriever.name=dense"}
