"""HTTP API over a serving ``Engine`` (FastAPI). Every API response names the run serving it
(in the body as ``run_id`` and in the ``X-Ragexp-Run`` header), except a 401, which names
nothing before the key is given; bad input gets a 4xx with a one-line ``error``, checked by the
same functions as ``mlflow models serve``'s model (``inputs.py``). The OpenAPI schema
(``/openapi.json``) states every status each operation answers, every body
(``replies.py``) and every input constraint (required ``q``, lengths, the range of ``k``), so
a client generated from it sends nothing the server refuses by surprise. ``GET /`` is the page for people (``page.py``)."""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial
from typing import Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field, StrictBool, field_validator

from ragexp.data.readers import shown
from ragexp.serving import page, replies, tracing
from ragexp.serving.access import authorized
from ragexp.serving.engine import Engine, hit_dict
from ragexp.serving.inputs import (
    MAX_ID,
    MAX_K,
    MAX_QUESTION,
    NOT_BLANK,
    BadQuestion,
    check_body,
    check_k,
    check_query_string,
    check_question,
    text,
)

Reply = Callable[[int, dict], JSONResponse]
QUESTION_SCHEMA = {"minLength": 1, "maxLength": MAX_QUESTION, "pattern": NOT_BLANK}
WHY = {400: "bad input: empty or whitespace-only text, k out of range, text that is not UTF-8 "
            "or holds a lone surrogate",
       401: "no API key, or the wrong one (only when the server was started with one)",
       404: "an id that does not exist",
       413: "text longer than its limit",
       422: "a request that does not fit this schema: a missing field, a wrong JSON type"}


class AnswerRequest(BaseModel):
    """``POST /answer``'s body; ``question`` checked by ``inputs.check_question``."""

    question: str = Field(json_schema_extra=QUESTION_SCHEMA)

    @field_validator("question", mode="before")
    @classmethod
    def _question(cls, value: object) -> str:
        return check_question(value, "question")


class FeedbackRequest(BaseModel):
    """``POST /feedback``'s body: a served trace's id, the verdict (a JSON boolean, not 0 or
    ``"yes"``) and an optional comment."""

    trace_id: str = Field(json_schema_extra={"maxLength": MAX_ID})
    wrong: StrictBool = True
    comment: str = Field("", json_schema_extra={"maxLength": tracing.MAX_COMMENT})

    @field_validator("trace_id", mode="before")
    @classmethod
    def _trace_id(cls, value: object) -> str:
        return text(value, "trace_id", MAX_ID)

    @field_validator("comment", mode="before")
    @classmethod
    def _comment(cls, value: object) -> str:
        return text(value, "comment", tracing.MAX_COMMENT)


def finite_or_null(value):
    """``value`` with every infinite or NaN float replaced by None: JSON has no such numbers
    (a run without an abstain threshold serves ``threshold: -inf``, sent as null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def reply(run_id: str, status: int, body: dict) -> JSONResponse:
    """A JSON response naming ``run_id`` in its body and ``X-Ragexp-Run`` header."""
    return JSONResponse(finite_or_null({"run_id": run_id, **body}), status_code=status,
                        headers={"X-Ragexp-Run": run_id})


def create_app(engine: Engine, api_key: str | None = None) -> FastAPI:
    """The API over ``engine``; with ``api_key``, every request without ``Authorization:
    Bearer <api_key>`` gets 401 (``access.authorized``), except ``GET /``: the page
    (``page.py``) holds no data and asks for the key itself."""
    keyed = api_key is not None
    app = FastAPI(title="ragexp", description=f"serving run {engine.run_id}",
                  dependencies=[Depends(HTTPBearer(auto_error=False))] if keyed else None)
    send = partial(reply, engine.run_id)
    _refusals(app, send)
    _utf8_only(app, send)
    if keyed:
        _key_required(app, api_key)  # added last, so it runs first: nothing before the key
    _page(app, engine, keyed)
    _reading(app, engine, send, keyed)
    _writing(app, engine, send, keyed)
    return app


def _responses(keyed: bool, ok: type[BaseModel], *codes: int) -> dict:
    """The OpenAPI ``responses`` of an operation answering ``ok`` with 200, each of ``codes``
    with a ``Refusal``, and 401 when keyed."""
    documented = {code: {"model": replies.Refusal, "description": WHY[code]} for code in codes}
    documented[200] = {"model": ok, "description": "the reply"}
    if keyed:
        documented[401] = {"model": replies.KeyRefusal, "description": WHY[401]}
    return dict(sorted(documented.items()))


def _refusals(app: FastAPI, send: Reply) -> None:
    """``BadQuestion`` as its status; a request the schema does not fit as 422, one line naming
    each field, or as what ``inputs.py`` said of the field when it refused it."""
    @app.exception_handler(BadQuestion)
    async def bad_input(_: Request, exc: BadQuestion):
        return send(exc.status, {"error": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        errors = exc.errors()
        ours = [e["ctx"]["error"] for e in errors
                if isinstance(e.get("ctx", {}).get("error"), BadQuestion)]
        if ours:
            return send(ours[0].status, {"error": str(ours[0])})
        return send(422, {"error": "; ".join(_described(e) for e in errors)})


def _described(error: dict) -> str:
    """One of pydantic's errors as ``field: what is wrong``."""
    if error["type"] == "json_invalid":  # its loc is ('body', character offset)
        return (f"body is not JSON: {error.get('ctx', {}).get('error', error['msg'])} at "
                f"character {error['loc'][-1]}")
    return f"{'.'.join(str(p) for p in error['loc'][1:]) or 'body'}: {error['msg']}"


def _utf8_only(app: FastAPI, send: Reply) -> None:
    """400 for a query string or body that is not UTF-8 (``inputs.check_query_string``,
    ``inputs.check_body``), before the framework replaces bad bytes with U+FFFD."""
    @app.middleware("http")
    async def utf8_only(request: Request, call_next):
        try:
            check_query_string(request.scope.get("query_string", b""))
            if request.method == "POST":
                check_body(await request.body())
        except BadQuestion as exc:
            return send(exc.status, {"error": str(exc)})
        return await call_next(request)


def _key_required(app: FastAPI, api_key: str) -> None:
    """401 without ``Authorization: Bearer <api_key>``, except for the page; the 401 names no
    run, in its body or headers."""
    @app.middleware("http")
    async def require_key(request: Request, call_next):
        is_page = request.method == "GET" and request.url.path == "/"
        if not is_page and not authorized(api_key, request.headers.get("authorization")):
            return JSONResponse({"error": "missing or wrong API key: send 'Authorization: "
                                 "Bearer <key>'"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)


def _page(app: FastAPI, engine: Engine, keyed: bool) -> None:
    """``GET /``, outside the schema: the page names the run only when no key is needed."""
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index():
        named = {} if keyed else {"X-Ragexp-Run": engine.run_id}  # keyed: nothing without it
        return HTMLResponse(page.html(), headers={**page.headers(), **named})


QUESTION = Query(description=f"the question: text, at most {MAX_QUESTION} characters",
                 json_schema_extra=QUESTION_SCHEMA)


def _reading(app: FastAPI, engine: Engine, send: Reply, keyed: bool) -> None:
    """``GET /health``, ``/search`` and ``/explain``."""
    @app.get("/health", responses=_responses(keyed, replies.Health, 400))
    def health():
        return send(200, {"status": "ok", "chunks": len(engine.resources.chunks),
                          "threshold": engine.threshold})

    @app.get("/search", responses=_responses(keyed, replies.Search, 400, 413, 422))
    def search(q: str = QUESTION,
               k: int = Query(5, description="how many hits",
                              json_schema_extra={"minimum": 1, "maximum": MAX_K})):
        question = check_question(q, "q")
        hits = engine.search(question, check_k(k))
        return send(200, {"query": question, "hits": [hit_dict(h) for h in hits],
                          "trace_id": engine.tracer.last_trace_id()})

    @app.get("/explain", responses=_responses(keyed, replies.Explanation, 400, 404, 413, 422))
    def explain(q: str = QUESTION,
                chunk_id: str = Query(description="a chunk id from /search",
                                      json_schema_extra={"minLength": 1, "maxLength": MAX_ID,
                                                         "pattern": NOT_BLANK})):
        question = check_question(q, "q")
        if not text(chunk_id, "chunk_id", MAX_ID).strip():
            raise BadQuestion("chunk_id must not be empty; ids come from /search")
        if not engine.has_chunk(chunk_id):
            raise BadQuestion(f"unknown chunk_id {shown(chunk_id)}; ids come from /search", 404)
        return send(200, {"query": question, **engine.explain(question, chunk_id)})


def _writing(app: FastAPI, engine: Engine, send: Reply, keyed: bool) -> None:
    """``POST /answer`` and ``/feedback``."""
    @app.post("/answer", responses=_responses(keyed, replies.Answered, 400, 413, 422))
    def answer(body: AnswerRequest):
        ans = engine.answer(body.question)
        return send(200, {**asdict(ans), "trace_id": engine.tracer.last_trace_id()})

    @app.post("/feedback", responses=_responses(keyed, replies.Recorded, 400, 404, 413, 422))
    def feedback(body: FeedbackRequest):
        """A user's "this answer was wrong" on a served trace (``tracing.record_feedback``)."""
        engine.tracer.flush()  # a trace answered a moment ago may still be queued
        try:
            tracing.record_feedback(body.trace_id, body.wrong, body.comment)
        except tracing.UnknownTrace:
            raise BadQuestion(f"unknown trace_id {shown(body.trace_id)}; ids come from /answer "
                              f"and /search while tracing is on", 404) from None
        return send(200, {"trace_id": body.trace_id, "recorded": True})
