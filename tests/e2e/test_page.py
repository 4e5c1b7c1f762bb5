"""The page ``ragexp serve`` shows at ``/``, driven in headless Chromium (Debian's ``chromium`` and
``chromium-driver`` under Selenium) against a real uvicorn on loopback.

The engine is built on the shipped handbook plus one planted document whose heading and text are
HTML (``<img onerror>``, ``<script>``), with a threshold between a question the handbook answers
and one it does not. What the page shows is checked against the API's own JSON for the same
question, and the bar's geometry against the numbers in it."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser

import httpx
import pytest
from fastapi.testclient import TestClient
from loopback import serving
from workspaces import compose_config

from ragexp.answer.base import REFUSAL, cited_numbers, claim_of
from ragexp.config import schema
from ragexp.data import shipped
from ragexp.serving.api import create_app, finite_or_null
from ragexp.serving.engine import Engine
from tools import browser

schema.register()
KEY = "page-test-key-0123456789"
THRESHOLD = 0.5
ANSWERED = "How long do jobs sit in a .dead queue before Brindle deletes them?"
REFUSED = "How many vacation days do employees get?"  # the handbook is about a job broker
EVIL_Q = ('<img src=x onerror="document.title=\'pwned-q\'"> quokka carrot allowance '
          '</textarea><script>document.title="pwned-q2"</script>')
EVIL_DOC = """# Quokka <img src=x onerror="document.title='pwned-h'"> policy

The quokka carrot allowance is <b>nine</b> carrots \
<script>document.title='pwned-s'</script> per day.

Every quokka gets its carrot allowance <img src=y onerror="document.title='pwned-t'"> at noon.
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page")
    corpus = tmp / "corpus"
    shutil.copytree(shipped.path("handbook/corpus"), corpus)
    (corpus / "quokka.md").write_text(EVIL_DOC, encoding="utf-8")
    cfg = compose_config("embedder=hash", "embedder.dim=64", "retriever=bm25", "reranker=none",
                         "dataset=markdown", f"dataset.corpus_dir={corpus}",
                         f"dataset.questions={shipped.path('handbook/golden')}",
                         "dataset.name=handbook", f"cache_dir={tmp / 'cache'}", "progress=false")
    return Engine(cfg, THRESHOLD, "page-test-run")


@pytest.fixture(scope="module")
def open_url(engine):
    with serving(create_app(engine)) as url:
        yield url


@pytest.fixture(scope="module")
def chrome():
    with browser.driver() as d:
        yield d


def api_answer(url: str, question: str, key: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(url + "/answer", json={"question": question}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def js(d, script: str):
    return d.execute_script(script)


# ------------------------------------------------------------------ the page as served (no browser)

class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.refs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v for k, v in attrs if k in ("src", "href", "action", "srcset") and v]


def test_page_is_self_contained_and_locked_down(engine):
    r = TestClient(create_app(engine)).get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    parser = _Refs()
    parser.feed(r.text)
    assert parser.refs == [] and "link" not in parser.tags and "iframe" not in parser.tags
    assert not re.search(r"https?://|url\(|@import", r.text)  # nothing fetched from elsewhere
    assert "innerHTML" not in r.text and "insertAdjacentHTML" not in r.text
    csp = dict(p.split(" ", 1) for p in r.headers["content-security-policy"].split("; "))
    assert csp["default-src"] == "'none'" and csp["connect-src"] == "'self'"
    assert csp["script-src"].startswith("'sha256-") and "unsafe" not in csp["script-src"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-ragexp-run"] == "page-test-run"


def test_with_a_key_the_page_loads_without_it_and_nothing_else_does(engine):
    http = TestClient(create_app(engine, api_key=KEY))
    r = http.get("/")
    assert r.status_code == 200 and "page-test-run" not in r.text
    assert "x-ragexp-run" not in r.headers  # the run id needs the key too
    assert http.get("/health").status_code == 401
    assert http.post("/", json={}).status_code == 401
    assert http.get("/?q=x", headers={"Authorization": "Bearer nope"}).status_code == 200
    assert http.get("/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_non_finite_numbers_are_sent_as_null():
    nan, inf = float("nan"), float("inf")
    assert finite_or_null({"a": [1.5, nan, {"b": -inf}], "c": (inf, 2), "d": True, "e": 0,
                           "f": "inf"}) == {"a": [1.5, None, {"b": None}], "c": [None, 2],
                                            "d": True, "e": 0, "f": "inf"}


def test_a_run_without_a_threshold_is_served_with_threshold_null(engine, monkeypatch):
    monkeypatch.setattr(engine, "threshold", float("-inf"))  # as Engine.from_run sets it
    http = TestClient(create_app(engine), raise_server_exceptions=False)
    assert http.get("/health").json()["threshold"] is None
    r = http.post("/answer", json={"question": REFUSED})
    assert r.status_code == 200 and r.json()["threshold"] is None
    assert r.json()["signal"] < THRESHOLD and "threshold" not in r.json()["reason"]  # never


# ------------------------------------------------------------------ in headless Chromium

@pytest.mark.slow
def test_answer_with_numbered_citations_linked_to_sources(open_url, chrome):
    from selenium.webdriver.common.by import By

    want = api_answer(open_url, ANSWERED)
    assert not want["refused"] and want["signal"] >= THRESHOLD and want["sentences"]
    chrome.get(open_url + "/")
    browser.ask(chrome, ANSWERED)
    assert chrome.find_element(By.ID, "verdict").text == "Answered"
    assert "page-test-run" in chrome.find_element(By.ID, "served").text
    shown = chrome.find_elements(By.CSS_SELECTOR, "#answer p")
    assert len(shown) == len(want["sentences"])
    by_n = {s["n"]: s for s in want["sources"]}
    for p, sentence in zip(shown, want["sentences"]):
        links = p.find_elements(By.CSS_SELECTOR, "a.cite")
        assert [a.text for a in links] == [f"[{n}]" for n in cited_numbers(sentence)]
        assert p.text.startswith(claim_of(sentence).rstrip(".!?"))
        for a in links:
            n = int(a.text.strip("[]"))
            assert a.get_attribute("href").endswith(f"#source-{n}")
            item = chrome.find_element(By.ID, f"source-{n}")
            assert by_n[n]["doc_id"] in item.text and by_n[n]["heading"] in item.text
    items = chrome.find_elements(By.CSS_SELECTOR, "#sources li")
    assert [li.get_attribute("id") for li in items] == [f"source-{s['n']}" for s in want["sources"]]
    cited = {n for s in want["sentences"] for n in cited_numbers(s)}
    assert {li.get_attribute("id") for li in items
            if "uncited" in li.get_attribute("class")} == {f"source-{n}" for n in by_n
                                                           if n not in cited}
    first = shown[0].find_element(By.CSS_SELECTOR, "a.cite")
    first.click()
    assert js(chrome, "return location.hash") == f"#source-{cited_numbers(want['sentences'][0])[0]}"


@pytest.mark.slow
def test_confidence_bar_places_signal_and_threshold(open_url, chrome):
    from selenium.webdriver.common.by import By

    for question in (ANSWERED, REFUSED):
        want = api_answer(open_url, question)
        chrome.get(open_url + "/")
        browser.ask(chrome, question)
        bar, fill, tick = js(chrome, "return ['bar', 'fill', 'tick'].map(i => "
                                     "document.getElementById(i).getBoundingClientRect())")
        s, t = want["signal"], want["threshold"]
        assert 0 <= s <= 1 and t == THRESHOLD  # the bar's scale is then 0..1
        assert [chrome.find_element(By.ID, i).text for i in ("lo", "hi")] == ["0", "1"]
        assert fill["width"] / bar["width"] == pytest.approx(s, abs=2 / bar["width"])
        tick_x = tick["x"] + tick["width"] / 2 - bar["x"]
        assert tick_x / bar["width"] == pytest.approx(t, abs=3 / bar["width"])
        text = chrome.find_element(By.ID, "confidence-text").text
        assert f"{s:.3f}" in text and f"{t:.3f}" in text
        below = s < t
        assert ("below the refusal threshold" in text) is below
        assert ("below" in chrome.find_element(By.ID, "fill").get_attribute("class")) is below


@pytest.mark.slow
def test_no_threshold_hides_the_mark_and_says_so(open_url, chrome, engine, monkeypatch):
    from selenium.webdriver.common.by import By

    monkeypatch.setattr(engine, "threshold", float("-inf"))
    chrome.get(open_url + "/")
    browser.ask(chrome, ANSWERED)
    assert not chrome.find_element(By.ID, "tick").is_displayed()
    assert "no refusal threshold" in chrome.find_element(By.ID, "confidence-text").text
    assert "refusal threshold none" in chrome.find_element(By.ID, "served").text


@pytest.mark.slow
def test_refusal_is_shown_as_a_refusal_with_its_reason(open_url, chrome):
    from selenium.webdriver.common.by import By

    want = api_answer(open_url, REFUSED)
    assert want["refused"] and want["signal"] < THRESHOLD and want["reason"]
    chrome.get(open_url + "/")
    result = browser.ask(chrome, REFUSED)
    assert chrome.find_element(By.ID, "verdict").text == "Refused"
    assert "refused" in chrome.find_element(By.ID, "verdict").get_attribute("class")
    answer = chrome.find_element(By.ID, "answer").text
    assert REFUSAL in answer and want["reason"] in answer
    assert result.find_elements(By.CSS_SELECTOR, "a.cite") == []
    assert chrome.find_element(By.ID, "sources-title").text == "Retrieved (not used)"
    # an empty question is refused by the page itself, and the shown answer stays
    chrome.find_element(By.ID, "question").clear()
    chrome.find_element(By.ID, "ask").click()
    assert chrome.find_element(By.ID, "status").get_attribute("class") == "error"
    assert chrome.find_element(By.ID, "verdict").text == "Refused"


@pytest.mark.slow
def test_questions_and_chunk_text_are_shown_as_text_never_run(open_url, chrome):
    from selenium.webdriver.common.by import By

    want = api_answer(open_url, EVIL_Q)
    assert not want["refused"], want  # the planted chunk is what answers
    # inline HTML in a paragraph is markup, not text: answers read it as text (issue #19 k12)
    assert not any("<script>" in s or "<b>" in s for s in want["sentences"])
    assert any("nine carrots" in s for s in want["sentences"])
    assert any("<img" in s["heading"] for s in want["sources"])  # headings keep the source's
    chrome.get(open_url + "/")
    title = chrome.title
    browser.ask(chrome, EVIL_Q)
    assert chrome.title == title  # no handler or script ran
    assert js(chrome, "return document.querySelectorAll("
                      "'#result img, #result script, #result b, #result textarea').length") == 0
    assert chrome.find_element(By.ID, "asked").text == "Q: " + EVIL_Q.strip()
    answer = chrome.find_element(By.ID, "answer").text
    for sentence in want["sentences"]:  # the markup, character for character, as text
        assert claim_of(sentence) in answer
    assert "<script>" not in answer and "nine carrots" in answer
    # the markup that does reach the page (question, heading) is shown as text, never run
    assert "<img src=x onerror=" in chrome.find_element(By.ID, "sources").text


@pytest.mark.slow
def test_feedback_button_is_disabled_without_a_trace(open_url, chrome):
    from selenium.webdriver.common.by import By

    want = api_answer(open_url, ANSWERED)
    chrome.get(open_url + "/")
    browser.ask(chrome, ANSWERED)
    assert want["trace_id"] is None  # an Engine traces nothing unless given a tracer
    button = chrome.find_element(By.ID, "wrong")
    assert not button.is_enabled() and not chrome.find_element(By.ID, "comment").is_enabled()
    assert "tracing is off" in button.get_attribute("title")


@pytest.mark.slow
def test_api_key_is_asked_for_kept_in_the_tab_and_sent(engine, chrome):
    from selenium.webdriver.common.by import By

    with serving(create_app(engine, api_key=KEY)) as url:
        chrome.get(url + "/")
        js(chrome, "sessionStorage.clear()")
        chrome.get(url + "/")
        box = chrome.find_element(By.ID, "key-box")
        assert box.is_displayed() and "needs an API key" in box.text
        with pytest.raises(RuntimeError, match="missing or wrong API key"):
            browser.ask(chrome, ANSWERED)
        chrome.find_element(By.ID, "key").send_keys("wrong-key")
        chrome.find_element(By.CSS_SELECTOR, "#key-form button").click()
        with pytest.raises(RuntimeError, match="missing or wrong API key"):
            browser.ask(chrome, ANSWERED)
        assert "refused this key" in chrome.find_element(By.ID, "key-msg").text
        chrome.find_element(By.ID, "key").send_keys(KEY)
        chrome.find_element(By.CSS_SELECTOR, "#key-form button").click()
        browser.ask(chrome, ANSWERED)
        assert chrome.find_element(By.ID, "verdict").text == "Answered"
        assert not chrome.find_element(By.ID, "key-box").is_displayed()
        assert js(chrome, "return localStorage.length") == 0
        assert js(chrome, "return sessionStorage.getItem('ragexp.apiKey')") == KEY
        assert KEY not in chrome.current_url and KEY not in chrome.page_source


@pytest.fixture
def traced_url(engine, mlflow_store, monkeypatch):
    """The engine served with tracing on, into a store of its own (as ``ragexp serve`` does)."""
    from ragexp.serving import tracing

    monkeypatch.setattr(engine, "tracer", tracing.for_engine(engine, True, "ragexp-page-test"))
    with serving(create_app(engine)) as url:
        yield url
    engine.tracer.flush()


@pytest.mark.slow
def test_wrong_button_records_feedback_on_the_shown_answers_trace(traced_url, chrome):
    import mlflow
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from ragexp.serving.tracing import FEEDBACK_NAME, WRONG_TAG

    other = api_answer(traced_url, ANSWERED)["trace_id"]  # a trace the page does not show
    chrome.get(traced_url + "/")
    browser.ask(chrome, ANSWERED)
    button, msg = chrome.find_element(By.ID, "wrong"), chrome.find_element(By.ID, "feedback-msg")
    assert button.is_enabled()
    shown_id = re.search(r"tr-[0-9a-f]{32}", button.get_attribute("title")).group()
    assert shown_id != other
    comment = 'cites the wrong table <b>"row"</b>'
    chrome.find_element(By.ID, "comment").send_keys(comment)
    button.click()
    WebDriverWait(chrome, 60).until(lambda _: msg.text)
    assert msg.text == f"Recorded: trace {shown_id} marked wrong." and not button.is_enabled()
    # read back from the store with MLflow's own client
    client = mlflow.MlflowClient()
    trace = client.get_trace(shown_id)
    assert trace.info.tags[WRONG_TAG] == "true"
    assert trace.data.spans[0].inputs == {"question": ANSWERED}
    (fb,) = [a for a in trace.info.assessments if a.name == FEEDBACK_NAME]
    assert fb.feedback.value is True and fb.rationale == comment
    assert WRONG_TAG not in client.get_trace(other).info.tags

    # a trace the store does not have: the page says so and the button stays usable
    browser.ask(chrome, ANSWERED)
    js(chrome, "current.trace_id = 'tr-' + '0'.repeat(32)")
    chrome.find_element(By.ID, "wrong").click()
    WebDriverWait(chrome, 60).until(lambda _: msg.text.startswith("Not recorded"))
    assert "unknown trace_id" in msg.text and chrome.find_element(By.ID, "wrong").is_enabled()
