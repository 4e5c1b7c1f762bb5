"""What ``ragexp serve`` refuses, and how: every endpoint and input kind (empty, whitespace-only,
over-long, non-string JSON types, lists with bad members, lone surrogates, bytes that are not
UTF-8 in query strings and bodies) gets the status the issue and docs/serving.md promise, a
one-line message from ``serving/inputs.py`` and no traceback; the OpenAPI schema says so; and
schemathesis, with every check, finds nothing the schema and the server disagree on.

The expected statuses are the contract written in docs/serving.md, not read back from the code:
422 a wrong JSON type or a missing field, 413 over a length limit, 404 an unknown id, 400 any
other bad value. The same inputs sent to ``mlflow models serve``'s model are in
``test_servingmodel.py``."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from fastapi.testclient import TestClient
from loopback import serving
from workspaces import compose_config

from ragexp.serving import inputs
from ragexp.serving.api import create_app
from ragexp.serving.engine import Engine
from ragexp.serving.inputs import BadQuestion

KEY = "k3y-for-the-tests-0123456789"
LONG = "x" * 2001


@pytest.fixture(scope="module")
def engine(module_mlflow_store):
    """An engine on the shipped handbook (hash embedder, BM25), tracing off."""
    cfg = compose_config("embedder=hash", "embedder.dim=64", "retriever=bm25", "reranker=none",
                         f"cache_dir={module_mlflow_store.folder / 'cache'}", "progress=false")
    return Engine(cfg, 0.1, "inputs-run")


@pytest.fixture(scope="module")
def http(engine):
    return TestClient(create_app(engine))


# ---------------------------------------------------------------- the shared checks

@pytest.mark.parametrize("value,kind", [(None, "null"), (float("nan"), "null"), (True, "a boolean"),
                                        (0, "a number"), (2.5, "a number"), ([], "a list"),
                                        (("a",), "a list"), ({}, "an object"), ("", "a string")])
def test_json_type_names(value, kind):
    assert inputs.json_type(value) == kind


@pytest.mark.parametrize("value,status,message", [
    (None, 422, "question is null, not a string"), (5, 422, "question is a number, not a string"),
    (False, 422, "question is a boolean"), (["a"], 422, "question is a list"),
    ({"q": "a"}, 422, "question is an object"), ("", 400, "question must not be empty"),
    ("  \t\n\u3000", 400, "question must not be empty"),
    ("why \ud800?", 400, "question holds a lone UTF-16 surrogate at character 4"),
    (LONG, 413, "question is 2001 characters; the limit is 2000")])
def test_check_question_refuses_with_its_status(value, status, message):
    with pytest.raises(BadQuestion) as err:
        inputs.check_question(value)
    assert err.value.status == status and str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_the_schemas_not_blank_pattern_is_what_strip_keeps():
    """Against Python's own whitespace (``str.isspace``, what ``strip`` removes), over every
    code point: a question matches the schema's pattern exactly when it is not blank."""
    import re
    import sys

    pattern = re.compile(inputs.NOT_BLANK)
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert (pattern.search(char) is None) == char.isspace(), hex(code)


def test_check_question_keeps_text_up_to_the_limit_stripped():
    assert inputs.check_question("  lease?\n") == "lease?"
    assert inputs.check_question("x" * 2000) == "x" * 2000
    assert inputs.check_question("lease \U0001f600") == "lease \U0001f600"  # a pair: one char


@pytest.mark.parametrize("raw", [b"q=%FF%FE", b"q=%ED%A0%80", b"k=5&q=caf%E9", b"%FF=1",
                                 b"q=ok&chunk_id=%C3"])
def test_query_strings_that_are_not_utf8_are_refused(raw):
    with pytest.raises(BadQuestion, match="is not UTF-8 text") as err:
        inputs.check_query_string(raw)
    assert err.value.status == 400


@pytest.mark.parametrize("raw", [b"", b"q=caf%C3%A9+au+lait&k=3", b"q=%F0%9F%98%80", b"flag"])
def test_utf8_query_strings_pass(raw):
    inputs.check_query_string(raw)


def test_bodies_must_be_utf8():
    inputs.check_body('{"question": "café"}'.encode())
    for body in (b"\xff\xfe{}", '{"question": "x"}'.encode("utf-16"), b'{"question": "\xe9"}'):
        with pytest.raises(BadQuestion, match="request body is not UTF-8") as err:
            inputs.check_body(body)
        assert err.value.status == 400


# ---------------------------------------------------------------- the examples

def test_search_with_bytes_that_are_not_utf8_is_400_not_replacement_characters(http):
    for url in ("/search?q=%FF%FE", "/search?q=lease&k=%FF", "/explain?q=%ED%A0%80&chunk_id=x",
                "/health?%FF"):
        r = http.get(url)
        assert r.status_code == 400, (url, r.text)
        assert "is not UTF-8 text" in r.json()["error"] and r.json()["run_id"] == "inputs-run"


def test_openapi_lists_every_status_sent_and_requires_q(http):
    spec = http.get("/openapi.json").json()
    codes = {(m.upper(), p): set(op["responses"]) for p, ops in spec["paths"].items()
             for m, op in ops.items()}
    assert codes == {("GET", "/health"): {"200", "400"},
                     ("GET", "/search"): {"200", "400", "413", "422"},
                     ("GET", "/explain"): {"200", "400", "404", "413", "422"},
                     ("POST", "/answer"): {"200", "400", "413", "422"},
                     ("POST", "/feedback"): {"200", "400", "404", "413", "422"}}
    params = {p["name"]: p for p in spec["paths"]["/search"]["get"]["parameters"]}
    assert params["q"]["required"] is True and params["k"]["required"] is False
    assert params["q"]["schema"] | {"minLength": 1, "maxLength": 2000} == params["q"]["schema"]
    assert (params["k"]["schema"]["minimum"], params["k"]["schema"]["maximum"]) == (1, 50)
    error = spec["paths"]["/answer"]["post"]["responses"]["413"]["content"]["application/json"]
    assert error["schema"]["$ref"].endswith("/Refusal")
    ok = spec["paths"]["/answer"]["post"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"]["$ref"].endswith("/Answered")
    assert "securitySchemes" not in spec.get("components", {})


def test_keyed_schema_lists_401_and_the_bearer_scheme(engine):
    spec = TestClient(create_app(engine, api_key=KEY)).get(
        "/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert spec["components"]["securitySchemes"] == {"HTTPBearer": {"type": "http",
                                                                    "scheme": "bearer"}}
    for path, ops in spec["paths"].items():
        for op in ops.values():
            assert "401" in op["responses"] and op["security"] == [{"HTTPBearer": []}], path


def test_a_401_names_no_run(engine):
    http = TestClient(create_app(engine, api_key=KEY))
    for r in (http.get("/health"), http.get("/search", params={"q": "x"}),
              http.post("/answer", json={"question": "x"}), http.get("/nowhere"),
              http.get("/search?q=%FF"), _post(http, "/answer", b"\xff"),  # the key first:
              _post(http, "/answer", {"question": None})):  # a 400 or 422 would name the run
        assert r.status_code == 401
        assert r.json() == {"error": "missing or wrong API key: send 'Authorization: Bearer "
                                     "<key>'"}
        assert "inputs-run" not in r.text and "x-ragexp-run" not in r.headers
    assert "x-ragexp-run" not in http.get("/").headers  # the page names nothing either


# ---------------------------------------------------------------- every endpoint, every kind

def _post(http, path: str, body) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http.post(path, content=raw, headers={"content-type": "application/json"})


SURROGATE = b'{"question": "\\ud800"}'
ANSWER_CASES = [  # (body, status, start of the message)
    ({"question": None}, 422, "question is null, not a string"),
    ({"question": 5}, 422, "question is a number, not a string"),
    ({"question": 1.5}, 422, "question is a number"),
    ({"question": True}, 422, "question is a boolean"),
    ({"question": ["What does BD-2110 mean?"]}, 422, "question is a list"),
    ({"question": [None, 5]}, 422, "question is a list"),
    ({"question": {"text": "x"}}, 422, "question is an object"),
    ({"question": ""}, 400, "question must not be empty"),
    ({"question": " \t\n "}, 400, "question must not be empty"),
    ({"question": LONG}, 413, "question is 2001 characters; the limit is 2000"),
    (SURROGATE, 400, "question holds a lone UTF-16 surrogate at character 0"),
    ({}, 422, "question: Field required"),
    ({"q": "wrong field"}, 422, "question: Field required"),
    (None, 422, "body: Input should be a valid dictionary"),
    ([{"question": "x"}], 422, "body: Input should be a valid dictionary"),
    (b"{not json", 422, "body is not JSON: Expecting property name enclosed in double quotes "
                        "at character 1"),
    (b"\xff\xfe{}", 400, "the request body is not UTF-8 text (byte 0)"),
    ('{"question": "lease?"}'.encode("utf-16"), 400, "the request body is not UTF-8 text"),
    ('{"question": "lease\xe9"}'.encode("latin-1"), 400, "the request body is not UTF-8 text"),
]
FEEDBACK_CASES = [
    ({"trace_id": None}, 422, "trace_id is null, not a string"),
    ({"trace_id": 7}, 422, "trace_id is a number, not a string"),
    ({"trace_id": ["tr-1"]}, 422, "trace_id is a list"),
    ({"trace_id": "tr-" + "0" * 32, "comment": 5}, 422, "comment is a number"),
    ({"trace_id": "tr-" + "0" * 32, "wrong": "yes"}, 422, "wrong: Input should be a valid boolean"),
    ({"trace_id": "tr-" + "0" * 32, "wrong": 0}, 422, "wrong: Input should be a valid boolean"),
    ({"trace_id": "tr-" + "0" * 32, "comment": "c" * 2001}, 413,
     "comment is 2001 characters; the limit is 2000"),
    ({"trace_id": "t" * 1001}, 413, "trace_id is 1001 characters; the limit is 1000"),
    (b'{"trace_id": "\\udfff"}', 400, "trace_id holds a lone UTF-16 surrogate"),
    ({"trace_id": ""}, 404, "unknown trace_id ''"),
    ({"trace_id": "   "}, 404, "unknown trace_id '   '"),
    ({"trace_id": "tr-" + "0" * 32}, 404, "unknown trace_id 'tr-000"),
    ({}, 422, "trace_id: Field required"),
]
GET_CASES = [  # (path, query string, status, start of the message)
    ("/search", "", 422, "q: Field required"),
    ("/search", "q=", 400, "q must not be empty"),
    ("/search", "q=%20%20%09", 400, "q must not be empty"),
    ("/search", "q=" + LONG, 413, "q is 2001 characters; the limit is 2000"),
    ("/search", "q=%FF%FE", 400, "query parameter q is not UTF-8 text"),
    ("/search", "q=%ED%A0%80", 400, "query parameter q is not UTF-8 text"),
    ("/search", "q=lease&k=0", 400, "k must be between 1 and 50, got 0"),
    ("/search", "q=lease&k=51", 400, "k must be between 1 and 50, got 51"),
    ("/search", "q=lease&k=-3", 400, "k must be between 1 and 50, got -3"),
    ("/search", "q=lease&k=many", 422, "k: Input should be a valid integer"),
    ("/search", "q=lease&k=1.5", 422, "k: Input should be a valid integer"),
    ("/search", "q=lease&k=", 422, "k: Input should be a valid integer"),
    ("/explain", "chunk_id=faq.md%230", 422, "q: Field required"),
    ("/explain", "q=lease", 422, "chunk_id: Field required"),
    ("/explain", "q=%20&chunk_id=faq.md%230", 400, "q must not be empty"),
    ("/explain", "q=" + LONG + "&chunk_id=faq.md%230", 413, "q is 2001 characters"),
    ("/explain", "q=lease&chunk_id=nope%230", 404, "unknown chunk_id 'nope#0'"),
    ("/explain", "q=lease&chunk_id=", 400, "chunk_id must not be empty"),  # the blank rule
    ("/explain", "q=lease&chunk_id=%20%20", 400, "chunk_id must not be empty"),
    ("/explain", "q=lease&chunk_id=" + "c" * 1001, 413, "chunk_id is 1001 characters"),
    ("/explain", "q=lease&chunk_id=%FF", 400, "query parameter chunk_id is not UTF-8 text"),
    ("/health", "x=%C3%28", 400, "query parameter x is not UTF-8 text"),
]


def _refused(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"run_id", "error"} and body["run_id"] == "inputs-run"
    assert r.headers["x-ragexp-run"] == "inputs-run"
    assert body["error"].startswith(message), body["error"]
    assert "\n" not in body["error"] and "Traceback" not in r.text


@pytest.mark.parametrize("body,status,message", ANSWER_CASES)
def test_answer_refuses_bad_bodies(http, body, status, message):
    _refused(_post(http, "/answer", body), status, message)


@pytest.mark.parametrize("body,status,message", FEEDBACK_CASES)
def test_feedback_refuses_bad_bodies(http, body, status, message):
    _refused(_post(http, "/feedback", body), status, message)


@pytest.mark.parametrize("path,query,status,message", GET_CASES)
def test_get_endpoints_refuse_bad_parameters(http, path, query, status, message):
    _refused(http.get(f"{path}?{query}"), status, message)


def test_good_input_still_answers(http):
    r = http.get("/search", params={"q": "  ledger disk full  ", "k": 3})
    assert r.status_code == 200 and r.json()["query"] == "ledger disk full"
    assert len(r.json()["hits"]) == 3
    chunk = r.json()["hits"][0]["chunk_id"]
    assert http.get("/explain", params={"q": "ledger", "chunk_id": chunk}).status_code == 200
    r = _post(http, "/answer", {"question": "  What does BD-2110 mean?  "})
    assert r.status_code == 200 and r.json()["question"] == "What does BD-2110 mean?"
    assert _post(http, "/answer", {"question": "x" * 2000}).status_code == 200


@pytest.mark.slow
def test_no_traceback_on_the_console_of_a_real_server(engine, capfd, caplog):
    """Every refusal above, through a real uvicorn: no line of a Python traceback is printed
    or logged."""
    caplog.set_level(logging.DEBUG)
    with serving(create_app(engine)) as base, httpx.Client(base_url=base, timeout=60) as http:
        statuses = [_post(http, "/answer", body).status_code for body, _, _ in ANSWER_CASES]
        statuses += [_post(http, "/feedback", body).status_code for body, _, _ in FEEDBACK_CASES]
        statuses += [http.get(f"{path}?{query}").status_code for path, query, _, _ in GET_CASES]
    assert statuses == [s for *_, s, _ in ANSWER_CASES + FEEDBACK_CASES + GET_CASES]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err + caplog.text
