"""The bodies the HTTP API sends, as the OpenAPI schema describes them (``api.py`` builds each
reply as a plain dict; these models only document it, and schemathesis's
``response_schema_conformance`` check holds each reply to them). Numbers a run may lack (the
abstain threshold, an answer's signal) are ``null`` in JSON, which has no infinities."""

from __future__ import annotations

from pydantic import BaseModel


class Refusal(BaseModel):
    """The body of every 4xx but 401: the run serving, and what was wrong (one line)."""

    run_id: str
    error: str


class KeyRefusal(BaseModel):
    """The body of a 401: what to send, and nothing about what is served."""

    error: str


class Health(BaseModel):
    """``GET /health``: the run served, its chunk count and its refusal threshold."""

    run_id: str
    status: str
    chunks: int
    threshold: float | None


class Hit(BaseModel):
    """One ranked chunk of ``GET /search`` (``engine.Hit``)."""

    rank: int
    chunk_id: str
    doc_id: str
    heading: str
    score: float
    text: str


class Search(BaseModel):
    """``GET /search``: the stripped query, its hits best first, the trace (null: untraced)."""

    run_id: str
    query: str
    hits: list[Hit]
    trace_id: str | None


class Term(BaseModel):
    term: str
    contribution: float


class Explanation(BaseModel):
    """``GET /explain``: a chunk's BM25 score as the sum of its terms' contributions."""

    run_id: str
    query: str
    chunk_id: str
    score: float
    terms: list[Term]


class Source(BaseModel):
    n: int
    chunk_id: str
    doc_id: str
    heading: str


class Answered(BaseModel):
    """``POST /answer``: ``answer.base.Answer``'s fields (more may follow) and the trace."""

    run_id: str
    question: str
    text: str
    refused: bool
    signal: float | None
    threshold: float | None
    sentences: list[str]
    sources: list[Source]
    reason: str
    trace_id: str | None


class Recorded(BaseModel):
    """``POST /feedback``: the verdict was recorded on the trace."""

    run_id: str
    trace_id: str
    recorded: bool
