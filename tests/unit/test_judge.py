"""judge=llm: verdict parsing, rates per kind, Cohen's kappa (checked against scikit-learn),
the hand-labelled agreement file, and the judge end to end against the fake endpoint."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from fake_llm import FakeLLM
from sklearn.metrics import cohen_kappa_score

from ragexp.answer.agreement import agreement_metrics, cohen_kappa, load_labels
from ragexp.answer.base import REFUSAL, Answer, Source
from ragexp.answer.judge import RUBRIC, LLMJudge, Verdict, parse_verdict
from ragexp.answer.judge_metrics import judge_metrics
from ragexp.answer.llm import Completion, Endpoint, LLMError
from ragexp.data import shipped
from ragexp.data.golden import find_quote
from ragexp.records import Chunk, Query

KEY = "RAGEXP_TEST_JUDGE_KEY"
LABELS = shipped.path("handbook/golden/judge/labels.jsonl")
pytestmark = pytest.mark.filterwarnings("ignore:.*single label:UserWarning",
                                        "ignore::sklearn.exceptions.UndefinedMetricWarning")


@pytest.mark.parametrize("seed", range(30))
def test_kappa_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 40)), int(rng.integers(2, 4))
    a = rng.integers(0, k, n).tolist()
    b = [x if rng.random() < 0.6 else int(rng.integers(0, k)) for x in a]
    want = cohen_kappa_score(a, b)
    got = cohen_kappa(a, b)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-12)


def test_kappa_edge_cases_match_sklearn():
    for a, b in (([True] * 5, [True] * 5), ([True] * 4, [True, True, False, True]),
                 ([1, 0, 1, 0], [0, 1, 0, 1]), ([1, 0, 1, 0], [1, 0, 1, 0])):
        want, got = cohen_kappa_score(a, b), cohen_kappa(a, b)
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want), (a, b)
    assert cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == -1.0
    with pytest.raises(ValueError):
        cohen_kappa([1], [1, 0])


def test_shipped_labels_quote_the_corpus_and_match_the_golden_set(docs, golden):
    labels = load_labels(LABELS)
    by_id = {q.qid: q for q in golden}
    raw = [json.loads(line) for line in open(LABELS, encoding="utf-8")]
    assert len(labels) >= 20
    for rec, lab in zip(raw, labels):
        assert by_id[rec["golden_id"]].text == rec["question"] == lab.item.question
        assert by_id[rec["golden_id"]].answer == rec["reference"], rec["id"]
        for p in rec["passages"]:
            assert len(find_quote(docs[p["doc"]], p["text"])) == 1, (rec["id"], p["doc"])
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", rec["answer"])}
        assert cited and cited <= {p["n"] for p in rec["passages"]}, rec["id"]
    for key in ("grounded", "correct"):  # both classes, so kappa is defined and informative
        assert min(sum(getattr(lab, key) for lab in labels),
                   sum(not getattr(lab, key) for lab in labels)) >= 6, key
    assert any(lab.grounded != lab.correct for lab in labels)


def test_bad_labels_files_name_file_and_line(tmp_path):
    good = open(LABELS, encoding="utf-8").readline()
    cases = {"invalid JSON": good + "{nope\n",
             "field 'grounded' must be a bool": good.replace('"grounded": true',
                                                             '"grounded": "yes"'),
             "duplicate id": good + good}
    for message, text in cases.items():
        path = tmp_path / "labels.jsonl"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"labels.jsonl:\\d: {message}"):
            load_labels(path)
    with pytest.raises(ValueError, match="no such file"):
        load_labels(tmp_path / "missing.jsonl")


def test_worked_example_quotes_the_corpus(docs):
    """The rubric's worked example cites real passages, so it teaches on the handbook itself."""
    for doc, quote in (("operations/monitoring.md", "`brindle_dead_letter_depth` falls on its own"
                        " as old dead-lettered jobs are purged; how long they are kept is "
                        "described in Retries and dead letters."),
                       ("concepts/retries-and-dead-letters.md", "Dead-lettered jobs are kept for "
                        "**14 days** and then purged permanently.")):
        assert quote in " ".join(RUBRIC.split()) and find_quote(docs[doc], quote)


@pytest.mark.parametrize("text, graded_correct, want", [
    ('{"grounded": "yes", "correct": "no", "reason": "misses 14 days"}', True,
     (True, False, "misses 14 days")),
    ('```json\n{"grounded": true, "correct": "YES", "reason": " ok "}\n```', True,
     (True, True, "ok")),
    ('{"grounded": "no", "correct": "n/a", "reason": "x"}', False, (False, None, "x")),
])
def test_verdicts_are_read(text, graded_correct, want):
    v = parse_verdict(Completion(text), graded_correct)
    assert (v.grounded, v.correct, v.reason) == want and v.error == ""


@pytest.mark.parametrize("text", ["grounded: yes", '{"grounded": "yes"', "[1, 2]",
                                  '{"grounded": "maybe", "correct": "no"}',
                                  '{"grounded": "yes", "correct": "n/a"}'])
def test_unreadable_verdicts_are_errors_not_guesses(text):
    v = parse_verdict(Completion(text), True)
    assert v.grounded is None and v.correct is None and v.error


def _answer(refused: bool) -> Answer:
    return Answer("q", REFUSAL if refused else "x [1].", refused, 1.0, 0.0)


def test_judge_rates_per_kind_by_hand():
    qs = [Query("1", "a", "factual", "r"), Query("2", "b", "factual", "r"),
          Query("3", "c", "semantic", "r"), Query("4", "d", "semantic", "r"),
          Query("5", "e", "unanswerable")]
    answers = [_answer(False), _answer(False), _answer(True), _answer(False), _answer(False)]
    verdicts = [Verdict(True, True, ""), Verdict(False, True, ""), None,
                Verdict(None, None, "", "unreadable"), Verdict(False, None, "")]
    m = judge_metrics(qs, answers, verdicts)
    assert m["judge.groundedness"] == pytest.approx(1 / 3)  # q1 yes; q2, q5 no; q4 unreadable
    assert m["judge.correctness"] == 1.0  # q1, q2 correct; q4 unreadable; q3 refused
    assert m["judge.correct_answerable"] == pytest.approx(2 / 3)  # q1, q2 of q1, q2, q3
    assert m["judge.groundedness.factual"] == 0.5 and m["judge.correctness.factual"] == 1.0
    assert m["judge.correct_answerable.semantic"] == 0.0  # q3 refused; q4 has no verdict
    assert "judge.groundedness.semantic" not in m
    assert m["judge.groundedness.unanswerable"] == 0.0
    assert "judge.correctness.unanswerable" not in m
    assert (m["judge.graded"], m["judge.unreadable"]) == (3, 1)


def test_agreement_floor_marks_the_run():
    labels = load_labels(LABELS)
    same = [Verdict(lab.grounded, lab.correct, "") for lab in labels]
    m, tags = agreement_metrics(labels, same, 0.6)
    assert m["judge.kappa_groundedness"] == m["judge.kappa_correctness"] == 1.0
    assert m["judge.below_floor"] == 0.0 and tags["ragexp.judge_agreement"].startswith("ok")
    lenient = [Verdict(True, lab.correct, "") for lab in labels]  # calls everything grounded
    m, tags = agreement_metrics(labels, lenient, 0.6)
    assert "judge.kappa_groundedness" not in m or m["judge.kappa_groundedness"] == 0.0
    assert m["judge.below_floor"] == 1.0 and "BELOW FLOOR" in tags["ragexp.judge_agreement"]
    flipped = [Verdict(not lab.grounded, lab.correct, "") for lab in labels]
    m, _ = agreement_metrics(labels, flipped, -1.0)
    want = cohen_kappa_score([lab.grounded for lab in labels], [v.grounded for v in flipped])
    assert m["judge.kappa_groundedness"] == pytest.approx(want) and want < 0
    assert m["judge.below_floor"] == 0.0  # a floor of -1 accepts any defined kappa


@pytest.fixture
def fake():
    server = FakeLLM(rule=lambda role, q: "garbled" if "BD-2110" in q else "ok").start()
    yield server
    server.stop()


def test_llm_judge_end_to_end(fake, monkeypatch):
    monkeypatch.setenv(KEY, "k")
    chunk = Chunk("c#1", "concepts/retries-and-dead-letters.md",
                  "Dead-lettered jobs are kept for **14 days** and then purged permanently.",
                  "Retries")
    src = [Source(1, "c#1", chunk.doc_id, "Retries")]
    qs = [Query("q1", "How long are dead letters kept?", "factual", "14 days"),
          Query("q2", "What does BD-2110 mean?", "identifier", "segment checksum mismatch"),
          Query("q3", "Is there a Helm chart?", "unanswerable"),
          Query("q4", "How long are dead letters kept, roughly?", "factual", "14 days")]
    answers = [Answer(q.text, t, False, 1.0, 0.0, [t], src) for q, t in (
        (qs[0], "Dead-lettered jobs are kept for 14 days [1]."),
        (qs[1], "It is kept for 14 days [1]."),
        (qs[2], "Dead-lettered jobs are purged permanently [1]."))]
    answers.append(_answer(True))
    judge = LLMJudge(Endpoint(fake.url, "fake", KEY, timeout=5, max_retries=1, max_error_rate=0.5,
                              price_in_per_mtok=1.0, price_out_per_mtok=4.0), labels=LABELS)
    res = judge.assess(qs, answers, {"c#1": chunk})
    assert res.columns["judge_grounded"] == [True, None, True, None]
    assert res.columns["judge_correct"] == [True, None, None, None]  # q3: no reference
    assert "unreadable judge reply" in res.columns["judge_reason"][1]
    assert res.columns["judge_reason"][0].startswith("fake judge")
    m = res.metrics
    assert (m["judge.graded"], m["judge.unreadable"]) == (2, 1)
    ok = fake.calls("judge", 200)
    tin, tout = sum(e["tokens_in"] for e in ok), sum(e["tokens_out"] for e in ok)
    assert (m["judge.tokens_in"], m["judge.tokens_out"]) == (tin, tout)
    assert m["judge.cost_usd"] == pytest.approx(tin * 1e-6 + tout * 4e-6)
    # agreement, recomputed from the verdicts the server sent for the hand labels
    labels = {lab.item.question + lab.item.answer: lab for lab in load_labels(LABELS)}
    sent = [(labels[e["question"] + re.search(r"\nAnswer: (.*)", e["prompt"]).group(1)],
             e["verdict"]) for e in ok if "verdict" in e and e["question"] not in
            {q.text for q in qs}]
    assert len(sent) == len(labels) == m["judge.agreement_n"]
    for key, name in (("grounded", "groundedness"), ("correct", "correctness")):
        want = cohen_kappa_score([getattr(lab, key) for lab, _ in sent],
                                 [v[key] == "yes" for _, v in sent])
        assert m[f"judge.kappa_{name}"] == pytest.approx(want)
    assert m["judge.below_floor"] == float(min(m["judge.kappa_groundedness"],
                                               m["judge.kappa_correctness"]) < 0.6)


def test_too_many_unreadable_verdicts_fail(fake, monkeypatch):
    monkeypatch.setenv(KEY, "k")
    fake.rule = lambda role, q: "garbled"
    judge = LLMJudge(Endpoint(fake.url, "fake", KEY, timeout=5, max_retries=0), labels=LABELS)
    qs = [Query("q", "What does BD-2110 mean?", "identifier", "r")]
    chunk = Chunk("c#1", "d", "text [1]", "")
    ans = [Answer("q", "text [1].", False, 1.0, 0.0, ["text [1]."], [Source(1, "c#1", "d", "")])]
    with pytest.raises(LLMError, match="1 of 1 gradings failed or were unreadable"):
        judge.assess(qs, ans, {"c#1": chunk})


def test_judge_without_key_fails_when_built(monkeypatch):
    monkeypatch.delenv(KEY, raising=False)
    with pytest.raises(LLMError, match=f"judge.llm.api_key_env .*{KEY}"):
        LLMJudge(Endpoint("http://127.0.0.1:9/v1", "m", KEY), labels=LABELS)
