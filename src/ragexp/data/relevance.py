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

from ragexp.errors import listed
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


def why_unjudged(query: Query, chunks: list[Chunk], what: str = "chunk", shown: int = 3) -> str:
    """Why no chunk (``what``: or section, or document, judged as ``units.unit_chunks`` makes
    them) is relevant to ``query``: per evidence span, the ones overlapping it and by how many
    characters, against the rule (``is_relevant``: at least ``MIN_SHARE`` of the span or of
    itself, whichever is shorter), or that no source range reaches it (a quote of heading text
    only: headings are prepended to chunks, not part of their source ranges)."""
    parts = []
    for span in query.evidence:
        hits = sorted(((overlap(c, span), c) for c in chunks if overlap(c, span)),
                      key=lambda x: -x[0])
        where = f"{span.doc_id} chars {span.start}-{span.end}"
        if not hits:
            parts.append(f"{where}: no {what}'s source text reaches it (heading text only, or "
                         f"text the chunker leaves out)")
            continue
        near = listed((f"{c.chunk_id} holds {n} of its {len(span)} chars"
                       f" ({sum(e - s for s, e in c.spans)} in the {what})"
                       for n, c in hits), shown)
        fix = ("quote less, or chunk larger" if what == "chunk" else
               f"quote less, or within one {what}")
        parts.append(f"{where}: {near}; a {what} is relevant when it holds a share of at least "
                     f"{MIN_SHARE:g} of the span or of itself, whichever is shorter (the span "
                     f"straddles {what}s: {fix})")
    return f"{query.qid}: " + "; ".join(parts)
