"""A real sweep ``answer=extractive,llm judge=llm`` against the fake endpoint on loopback: both
answerers log the same answer-level metrics, and the token, retry, error and cost counts agree
with what the server itself saw. The fake's default rule gives the handbook's questions every
mode: invented and missing citations, declines, malformed bodies, 429s, 500s and timeouts."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from cli_runs import run_app
from fake_llm import FakeLLM
from mlflow.tracking import MlflowClient
from sklearn.metrics import cohen_kappa_score
from workspaces import search_runs, store_uri

from ragexp.answer.agreement import load_labels
from ragexp.data import shipped

pytestmark = pytest.mark.slow
KEY = "RAGEXP_TEST_SWEEP_KEY"
PRICE_IN, PRICE_OUT = 0.15, 0.6
COMPARABLE = ("answer.rate_answerable", "answer.refused_unanswerable",
              "answer.citation_precision", "judge.groundedness", "judge.correctness",
              "judge.correct_answerable", "judge.kappa_groundedness", "judge.kappa_correctness",
              "judge.below_floor", "answer.tokens_in", "answer.cost_usd", "judge.tokens_in",
              "judge.cost_usd")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm-sweep")
    fake = FakeLLM(slow_s=2.0).start()
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY, "sk-fake")
    try:
        # split=all: the fake server's fault modes are keyed to questions of both splits
        proc = run_app(tmp, "-m", "answer=extractive,llm", "judge=llm", "embedder=hash", "split=all",
                       "retriever=bm25", "reranker=none", f"llm.base_url={fake.url}",
                       f"llm.api_key_env={KEY}", "llm.model=fake", "llm.timeout=1",
                       "llm.max_retries=2", f"llm.price_in_per_mtok={PRICE_IN}",
                       f"llm.price_out_per_mtok={PRICE_OUT}", "llm.max_error_rate=0.25",
                       f"hydra.sweep.dir={tmp / 'multirun'}")
    finally:
        mp.undo()
        fake.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = search_runs(store_uri(tmp), experiment_names=["ragexp-handbook"])
    children = df.dropna(subset=["params.answer.name"]).set_index("params.answer.name")
    client = MlflowClient(tracking_uri=store_uri(tmp))
    tables = {name: pd.read_csv(client.download_artifacts(row["run_id"], "per_question.csv"))
              for name, row in children.iterrows()}
    return children, tables, fake


def test_both_answerers_log_comparable_answer_metrics(sweep):
    children, _, _ = sweep
    assert sorted(children.index) == ["extractive", "llm"]
    assert (children["status"] == "FINISHED").all()
    for name in ("extractive", "llm"):
        for key in COMPARABLE:
            assert pd.notna(children.loc[name, f"metrics.{key}"]), (name, key)
        assert children.loc[name, "tags.ragexp.judge_agreement"]
    assert children.loc["extractive", "metrics.answer.tokens_in"] == 0
    assert children.loc["extractive", "metrics.answer.cost_usd"] == 0


def test_llm_tokens_retries_errors_and_cost_match_the_server(sweep):
    children, tables, fake = sweep
    m = children.loc["llm"]
    answered = fake.calls("answer", 200)
    tin = sum(e.get("tokens_in", 0) for e in answered)
    tout = sum(e.get("tokens_out", 0) for e in answered)
    assert tin > 0 and m["metrics.answer.tokens_in"] == tin
    assert m["metrics.answer.tokens_out"] == tout
    assert m["metrics.answer.cost_usd"] == pytest.approx(tin * PRICE_IN / 1e6
                                                         + tout * PRICE_OUT / 1e6)
    retried = [e for e in fake.calls("answer") if e["attempt"] > 1]
    assert {e["mode"] for e in retried} == {"429", "500", "timeout"}
    assert m["metrics.answer.retries"] == len(retried)
    malformed = {e["question"] for e in fake.calls("answer") if e["mode"] == "malformed"}
    assert malformed and m["metrics.answer.errors"] == len(malformed)
    table = tables["llm"]
    assert table["answer_tokens_in"].sum() == tin
    assert set(table.loc[table["answer_error"].notna(), "id"]) == set(
        table.loc[table["refusal_reason"] == "the answer endpoint failed", "id"])


def test_invented_and_missing_citations_are_refused(sweep):
    _, tables, fake = sweep
    table = tables["llm"].set_index("id")
    by_text = {e["question"]: e["mode"] for e in fake.calls("answer", 200)}
    from conftest import CORPUS, GOLDEN

    from ragexp.data.golden import load_corpus, load_golden

    golden = {q.qid: q.text for q in load_golden(GOLDEN, load_corpus(CORPUS))}
    modes = {qid: by_text.get(text) for qid, text in golden.items()}
    bad = [qid for qid, mode in modes.items() if mode in ("invented", "uncited")]
    assert bad and not table.loc[bad, "answered"].any()
    assert (table.loc[bad, "sentences_dropped"] == 1).all()
    declined = [qid for qid, mode in modes.items() if mode == "decline"]
    assert (table.loc[declined, "refusal_reason"]
            == "the model found no answer in the passages").all()
    good = [qid for qid, mode in modes.items() if mode == "ok"]
    assert table.loc[good, "answered"].mean() > 0.8  # the fake's cited sentences pass the checker


def test_judge_columns_and_rates_agree_and_kappa_matches_sklearn(sweep):
    children, tables, fake = sweep
    for name, table in tables.items():
        m = children.loc[name]
        graded = table[table["judge_grounded"].notna()]
        assert graded["judge_grounded"].astype(bool).mean() == pytest.approx(
            m["metrics.judge.groundedness"])
        answerable = graded[(graded["kind"] != "unanswerable") & graded["judge_correct"].notna()]
        assert answerable["judge_correct"].astype(bool).mean() == pytest.approx(
            m["metrics.judge.correctness"])
        assert not table.loc[~table["answered"].astype(bool), "judge_grounded"].notna().any()
    labels = {lab.item.question + lab.item.answer: lab for lab in load_labels(
        shipped.path("handbook/golden/judge/labels.jsonl"))}
    sent = {}
    for e in fake.calls("judge", 200):
        key = e["question"] + re.search(r"\nAnswer: (.*)", e["prompt"]).group(1)
        if key in labels and "verdict" in e and e["mode"] != "garbled":
            sent[key] = e["verdict"]
    for name in ("grounded", "correct"):
        want = cohen_kappa_score([getattr(labels[k], name) for k in sent],
                                 [v[name] == "yes" for v in sent.values()])
        metric = {"grounded": "groundedness", "correct": "correctness"}[name]
        assert children[f"metrics.judge.kappa_{metric}"].tolist() == pytest.approx([want] * 2)
