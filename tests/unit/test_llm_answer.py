"""answer=llm against the fake OpenAI-compatible server on loopback: citations through the
shared checker, retries (429 with Retry-After, 5xx, timeouts), the concurrency limit, token and
cost counts checked against the server's own log, and a missing key failing before any work."""

from __future__ import annotations

import pytest
from fake_llm import FakeLLM

from ragexp.answer.base import REFUSAL, AnswerInput, Source, answer_metrics, check_citations
from ragexp.answer.extractive import ExtractiveAnswerer
from ragexp.answer.llm import Endpoint, LLMError
from ragexp.answer.llm_answer import LLMAnswerer, reply_sentences
from ragexp.index.bm25 import BM25Index
from ragexp.settings import settings

KEY = "RAGEXP_TEST_LLM_KEY"
ENDPOINT_KEYS = {f.name for f in settings(Endpoint)}
Q_DEAD = "How long are dead-lettered jobs kept before they are purged?"


@pytest.fixture(scope="module")
def bm25(chunks):
    """The answerer's scorer: the handbook's BM25 coverage (``answer.base.Coverage``)."""
    return BM25Index().fit([c.text for c in chunks]).coverage


@pytest.fixture(scope="module")
def dead_letter_chunks(chunks):
    """The retention chunk first, then two chunks that merely mention dead letters."""
    first = [c for c in chunks if "kept for **14 days**" in c.text]
    others = [c for c in chunks if "dead-letter" in c.text.lower() and c not in first]
    return first[:1] + others[:2]


@pytest.fixture
def fake():
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY, "sk-test-123")


def llm(fake, **kw) -> LLMAnswerer:
    """The answerer on the fake endpoint; ``kw``: the endpoint's keys and the answerer's own."""
    own = {k: kw.pop(k) for k in list(kw) if k not in ENDPOINT_KEYS}
    endpoint = Endpoint(fake.url, "fake", KEY, **{"timeout": 5.0, "max_retries": 2, **kw})
    return LLMAnswerer(endpoint, **own)


def ask(answerer, question, retrieved, bm25, signal=1.0, threshold=0.0):
    return answerer.answer([AnswerInput(question, retrieved, signal, threshold)], bm25)[0]


def test_answer_is_cited_checked_and_counted(fake, key, bm25, dead_letter_chunks):
    fake.rule = lambda role, q: "ok"
    ans = ask(llm(fake), Q_DEAD, dead_letter_chunks, bm25)
    assert not ans.refused and "14 days" in ans.text
    assert ans.cited_chunks == [dead_letter_chunks[0].chunk_id]
    [call] = fake.calls("answer", 200)
    assert call["auth"] == "Bearer sk-test-123"
    assert (ans.tokens_in, ans.tokens_out) == (call["tokens_in"], call["tokens_out"])
    assert ans.retries == 0 and ans.error == "" and ans.cost_usd is None  # no price table


@pytest.mark.parametrize("mode, why", [("invented", "cites [9] but only [1]..[3]"),
                                       ("uncited", "no citation")])
def test_invented_or_missing_citations_are_dropped_and_refused(fake, key, bm25, mode, why,
                                                                dead_letter_chunks):
    fake.rule = lambda role, q: mode
    ans = ask(llm(fake), Q_DEAD, dead_letter_chunks, bm25)
    assert ans.refused and ans.text == REFUSAL and ans.dropped == 1
    assert why in ans.dropped_why[0] and ans.cited_chunks == []
    assert ans.tokens_in > 0  # the call was made and is paid for even though it was refused


def test_model_declining_is_a_refusal(fake, key, bm25, dead_letter_chunks):
    fake.rule = lambda role, q: "decline"
    ans = ask(llm(fake), Q_DEAD, dead_letter_chunks, bm25)
    assert ans.refused and "no answer in the passages" in ans.reason and ans.dropped == 0


def test_low_confidence_refuses_without_calling_the_endpoint(fake, key, bm25,
                                                            dead_letter_chunks):
    ans = ask(llm(fake), Q_DEAD, dead_letter_chunks, bm25, signal=0.1, threshold=0.5)
    assert ans.refused and "threshold" in ans.reason and fake.log == []
    assert ans.tokens_in == 0


def test_429_honours_retry_after(fake, key, bm25, dead_letter_chunks):
    fake.rule = lambda role, q: "429"
    ans = ask(llm(fake), Q_DEAD, dead_letter_chunks, bm25)
    first, second = sorted(fake.calls("answer"), key=lambda e: e["t"])
    assert (first["status"], second["status"]) == (429, 200)
    assert second["t"] - first["t"] >= 1.0  # Retry-After: 1 (the SDK's own backoff is <= 0.5 s)
    assert second["retry_header"] == "1" and ans.retries == 1 and not ans.refused
    assert ans.tokens_in == second["tokens_in"]  # the 429 carried no usage


def test_500_and_timeout_are_retried_with_backoff(fake, key, bm25, dead_letter_chunks):
    fake.slow_s = 1.5
    for mode in ("500", "timeout"):
        fake.rule = lambda role, q: mode
        fake.log.clear()
        ans = ask(llm(fake, timeout=0.5), Q_DEAD + mode, dead_letter_chunks, bm25)
        first, second = sorted(fake.calls("answer"), key=lambda e: e["t"])
        assert second["status"] == 200 and ans.retries == 1 and not ans.refused, mode
        # backoff: 0.5 s minus at most 25 % jitter, after the failed attempt (+ the 0.5 s timeout)
        assert second["t"] - first["t"] >= (0.375 if mode == "500" else 0.875), mode


def test_persistent_failure_exhausts_retries_and_is_counted(fake, key, bm25, dead_letter_chunks):
    fake.rule, fake.retry_after = (lambda role, q: "429"), "always"
    ans = ask(llm(fake, max_retries=2, max_error_rate=1.0), Q_DEAD, dead_letter_chunks, bm25)
    assert len(fake.calls("answer", 429)) == 3  # the first try and 2 retries
    assert ans.refused and ans.error.startswith("HTTP 429") and ans.retries == 2
    m = answer_metrics({"q": ans}, {"q": True}, {"q": set()})
    assert m["answer.errors"] == 1 and m["answer.rate_answerable"] == 0


def test_malformed_reply_is_an_error_and_too_many_fail_the_run(fake, key, bm25,
                                                                dead_letter_chunks):
    fake.rule = lambda role, q: "malformed" if "broken" in q else "ok"
    inputs = [AnswerInput(f"{Q_DEAD} {i}{' broken' if i < 2 else ''}", dead_letter_chunks,
                          1.0, 0.0) for i in range(5)]
    out = llm(fake, max_error_rate=0.5).answer(inputs, bm25)
    assert [bool(a.error) for a in out] == [True, True, False, False, False]
    assert "malformed reply" in out[0].error and out[0].refused
    with pytest.raises(LLMError, match="2 of 5 calls .* failed .*answer.llm.max_error_rate=0.2"):
        llm(fake, max_error_rate=0.2).answer(inputs, bm25)


def test_wrong_key_fails_at_once(fake, key, bm25, dead_letter_chunks):
    fake.rule = lambda role, q: "401"
    with pytest.raises(LLMError, match="refused the call \\(401\\).*RAGEXP_TEST_LLM_KEY"):
        llm(fake).answer([AnswerInput(f"{Q_DEAD} {i}", dead_letter_chunks, 1.0, 0.0)
                          for i in range(20)], bm25)
    assert len(fake.log) < 20  # queued calls were cancelled


def test_concurrency_limit_holds(fake, key, bm25, dead_letter_chunks):
    fake.rule, fake.slow_s = (lambda role, q: "slow"), 0.3
    inputs = [AnswerInput(f"{Q_DEAD} {i}", dead_letter_chunks, 1.0, 0.0) for i in range(9)]
    out = llm(fake, concurrency=3).answer(inputs, bm25)
    assert fake.max_in_flight == 3 and len(out) == 9
    assert [a.question for a in out] == [i.question for i in inputs]  # input order kept


def test_tokens_and_cost_match_the_server_log(fake, key, bm25, dead_letter_chunks):
    fake.rule = lambda role, q: ["ok", "429", "invented", "malformed"][int(q[-1]) % 4]
    inputs = [AnswerInput(f"{Q_DEAD} {i}", dead_letter_chunks, 1.0, 0.0) for i in range(8)]
    out = llm(fake, price_in_per_mtok=2.5, price_out_per_mtok=10.0,
              max_error_rate=0.5).answer(inputs, bm25)
    m = answer_metrics({str(i): a for i, a in enumerate(out)}, {str(i): True for i in range(8)},
                       {})
    ok = fake.calls("answer", 200)
    tin, tout = sum(e.get("tokens_in", 0) for e in ok), sum(e.get("tokens_out", 0) for e in ok)
    assert tin > 0 and (m["answer.tokens_in"], m["answer.tokens_out"]) == (tin, tout)
    assert m["answer.cost_usd"] == pytest.approx(tin * 2.5e-6 + tout * 10e-6)
    assert m["answer.retries"] == 2 and m["answer.errors"] == 2  # two 429s; two malformed


def test_missing_or_empty_key_fails_before_any_call(fake, monkeypatch):
    monkeypatch.delenv(KEY, raising=False)
    with pytest.raises(LLMError, match=f"answer.llm.api_key_env .*'{KEY}'.*not set or empty"):
        llm(fake)
    monkeypatch.setenv(KEY, "  ")
    with pytest.raises(LLMError, match="not set or empty"):
        llm(fake)
    assert fake.log == []


def test_endpoint_values_out_of_range_name_the_key(fake, key):
    for kw, name in (({"concurrency": 0}, "llm.concurrency=0"),
                     ({"timeout": -1.0}, "llm.timeout=-1.0"),
                     ({"price_in_per_mtok": -2.0}, "llm.price_in_per_mtok=-2.0"),
                     ({"max_tokens": 0}, "answer.max_tokens=0")):
        with pytest.raises(LLMError, match=name):
            llm(fake, **kw)


def test_reply_sentences_keep_citations_with_their_sentence():
    reply = "- Jobs are kept for 14 days. [2] The sweep runs hourly [1][3].\n2. Also X [1, 2]."
    assert reply_sentences(reply) == ["Jobs are kept for 14 days [2].",
                                      "The sweep runs hourly [1][3].", "Also X [1, 2]."]


def test_checker_supports_paraphrase_but_not_words_the_chunk_lacks(bm25, dead_letter_chunks):
    c = dead_letter_chunks[0]
    sources = [Source(1, c.chunk_id, c.doc_id, c.heading)]
    lookup = {c.chunk_id: c}
    kept, why = check_citations(
        ["Brindle keeps dead-lettered jobs 14 days, then purges them [1].",
         "Dead-lettered jobs are replicated to Kafka and kept for 90 days [1].",
         "[1]"], sources, lookup, bm25)
    assert kept == ["Brindle keeps dead-lettered jobs 14 days, then purges them [1]."]
    assert "support" in why[0] and "no claim" in why[1]


def test_extractive_answers_always_have_full_support(golden, chunks, bm25):
    """The extractive answerer copies sentences, so the shared checker keeps all of them."""
    answerer = ExtractiveAnswerer()
    for q in golden[:40]:
        ranked = sorted(chunks, key=lambda c: -len(set(q.text.lower().split())
                                                    & set(c.text.lower().split())))[:3]
        ans = answerer.answer([AnswerInput(q.text, ranked, 1.0, 0.0)], bm25)[0]
        assert ans.dropped == 0
