"""Relevance from evidence spans, so gold labels survive any re-chunking.

Rule: a chunk is relevant to a question when, for some evidence span ``E`` of that question,
the characters of ``E`` that the chunk's source ranges cover number at least half of ``E``, or
at least half of the chunk's own source text::

    overlap(C, E) >= 0.5 * min(|E|, |C|)

The first half is the usual case (the chunk holds most of the quote). The second keeps a long
quote split over several small chunks from having no relevant chunk at all: a chunk that is
mostly quote counts. Relevance is binary (grade 1). Chunk ids never enter into it.
"""

from __future__ import annotations

from typing import Iterable

from ragexp.records import Chunk, Qrels, Query, Span

MIN_SHARE = 0.5


def overlap(chunk: Chunk, span: Span) -> int:
    """Characters of ``span`` inside the chunk's source ranges."""
    if chunk.doc_id != span.doc_id:
        return 0
    return sum(max(0, min(e, span.end) - max(s, span.start)) for s, e in chunk.spans)


def is_relevant(chunk: Chunk, span: Span, min_share: float = MIN_SHARE) -> bool:
    covered = overlap(chunk, span)
    chunk_len = sum(e - s for s, e in chunk.spans)
    return covered > 0 and covered >= min_share * min(len(span), chunk_len)


def span_qrels(queries: Iterable[Query], chunks: list[Chunk]) -> Qrels:
    """``{qid: {chunk_id: 1}}`` for every answerable query (empty dict when nothing matches)."""
    by_doc: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_doc.setdefault(chunk.doc_id, []).append(chunk)
    qrels: Qrels = {}
    for q in queries:
        if not q.answerable:
            continue
        qrels[q.qid] = {
            c.chunk_id: 1
            for span in q.evidence
            for c in by_doc.get(span.doc_id, [])
            if is_relevant(c, span)
        }
    return qrels
