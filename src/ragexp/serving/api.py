"""HTTP API over a serving ``Engine`` (FastAPI). Every API response names the run serving it
(in the body as ``run_id`` and in the ``X-Ragexp-Run`` header); bad input gets a 4xx with a
message. ``GET /`` is the page for people (``page.py``)."""

from __future__ import annotations

import math
from dataclasses import asdict

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from ragexp.data.readers import has_surrogate, shown
from ragexp.serving import page, tracing
from ragexp.serving.access import authorized
from ragexp.serving.engine import BadQuestion, Engine, check_k, check_question, hit_dict


class AnswerRequest(BaseModel):
    question: str


class FeedbackRequest(BaseModel):
    trace_id: str
    wrong: bool = True
    comment: str = ""


def unicode_text(text: str, field: str) -> str:
    """``text`` unchanged, or ``BadQuestion`` (400) when it holds a lone UTF-16 surrogate: JSON's
    ``"\\ud800"`` escape parses to one, but it is not Unicode text and cannot be answered or
    echoed back as UTF-8."""
    pos = has_surrogate(text)
    if pos >= 0:
        raise BadQuestion(f"{field} holds a lone UTF-16 surrogate at character {pos}, which is "
                          f"not Unicode text; send UTF-8 text")
    return text


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


def create_app(engine: Engine, api_key: str | None = None) -> FastAPI:
    """The API over ``engine``; with ``api_key``, every request without ``Authorization:
    Bearer <api_key>`` gets 401 (``access.authorized``), except ``GET /``: the page
    (``page.py``) holds no data and asks for the key itself."""
    app = FastAPI(title="ragexp", description=f"serving run {engine.run_id}")

    def reply(status: int, body: dict) -> JSONResponse:
        return JSONResponse(finite_or_null({"run_id": engine.run_id, **body}), status_code=status,
                            headers={"X-Ragexp-Run": engine.run_id})

    @app.exception_handler(BadQuestion)
    async def bad_input(_: Request, exc: BadQuestion):
        return reply(exc.status, {"error": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        msgs = [f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                for e in exc.errors()]
        return reply(422, {"error": "; ".join(msgs)})

    if api_key is not None:
        @app.middleware("http")
        async def require_key(request: Request, call_next):
            is_page = request.method == "GET" and request.url.path == "/"
            if not is_page and not authorized(api_key, request.headers.get("authorization")):
                return JSONResponse(
                    {"run_id": engine.run_id, "error": "missing or wrong API key: send "
                     "'Authorization: Bearer <key>'"}, status_code=401,
                    headers={"X-Ragexp-Run": engine.run_id, "WWW-Authenticate": "Bearer"})
            return await call_next(request)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index():
        named = {} if api_key else {"X-Ragexp-Run": engine.run_id}  # keyed: nothing without it
        return HTMLResponse(page.html(), headers={**page.headers(), **named})

    @app.get("/health")
    def health():
        return reply(200, {"status": "ok", "chunks": len(engine.resources.chunks),
                           "threshold": engine.threshold})

    @app.get("/search")
    def search(q: str = Query(""), k: int = Query(5)):
        question = check_question(unicode_text(q, "q"), "q")
        hits = engine.search(question, check_k(k))
        return reply(200, {"query": question, "hits": [hit_dict(h) for h in hits],
                           "trace_id": engine.tracer.last_trace_id()})

    @app.post("/answer")
    def answer(body: AnswerRequest):
        ans = engine.answer(check_question(unicode_text(body.question, "question"), "question"))
        return reply(200, {**asdict(ans), "trace_id": engine.tracer.last_trace_id()})

    @app.post("/feedback")
    def feedback(body: FeedbackRequest):
        """A user's "this answer was wrong" on a served trace (``tracing.record_feedback``)."""
        trace_id = unicode_text(body.trace_id, "trace_id")
        comment = unicode_text(body.comment, "comment")
        if len(comment) > tracing.MAX_COMMENT:
            raise BadQuestion(f"comment is {len(comment)} characters; the limit is "
                              f"{tracing.MAX_COMMENT}", 413)
        engine.tracer.flush()  # a trace answered a moment ago may still be queued
        try:
            tracing.record_feedback(trace_id, body.wrong, comment)
        except tracing.UnknownTrace:
            raise BadQuestion(f"unknown trace_id {shown(trace_id)}; ids come from /answer and "
                              f"/search while tracing is on", 404) from None
        return reply(200, {"trace_id": trace_id, "recorded": True})

    @app.get("/explain")
    def explain(q: str = Query(""), chunk_id: str = Query("")):
        question = check_question(unicode_text(q, "q"), "q")
        if not engine.has_chunk(unicode_text(chunk_id, "chunk_id")):
            raise BadQuestion(f"unknown chunk_id {shown(chunk_id)}; ids come from /search", 404)
        return reply(200, {"query": question, **engine.explain(question, chunk_id)})

    return app
