"""Document rankings from chunk rankings (MaxP), retrieving as deep as ``k`` documents need.

When judgements are per document (BEIR) and documents are cut into chunks, a document scores by
its best chunk (MaxP: Dai & Callan, "Deeper Text Understanding for IR with Contextual Neural
Language Modeling", SIGIR 2019)::

    score(d) = max over chunks c of d of score(c)       (here: the rank of d's best chunk)

A ``k``-deep chunk ranking can hold far fewer than ``k`` documents (one long document may fill
it), so the chunk depth grows (doubling) until each query's ranking holds ``k`` distinct
documents, or the retriever returns fewer chunks than asked (it has nothing more), or the depth
covers every chunk.
"""

from __future__ import annotations

from typing import Callable

from ragexp.errors import InvalidValue
from ragexp.records import Ranking, ordered


def collapse_to_documents(ranking: Ranking, doc_of: dict[str, str]) -> Ranking:
    """Chunk ranking -> document ranking in rank order: a document takes the rank of its best
    chunk; scores become ``n - position`` so ties cannot reorder documents."""
    out: Ranking = {}
    for qid, scores in ranking.items():
        docs: list[str] = []
        seen: set[str] = set()
        for cid in ordered(scores):
            d = doc_of[cid]
            if d not in seen:
                seen.add(d)
                docs.append(d)
        out[qid] = {d: float(len(docs) - i) for i, d in enumerate(docs)}
    return out


def rank_documents(rank_chunks: Callable[[dict[str, str], int], Ranking],
                   queries: dict[str, str], k: int, doc_of: dict[str, str]
                   ) -> tuple[Ranking, Ranking]:
    """``(documents, chunks)``: each query's best ``k`` distinct documents by MaxP, and the chunk
    ranking they came from. ``rank_chunks(queries, depth)`` returns at most ``depth`` chunks
    per query, best first; ``doc_of`` maps every chunk id to its document. Raises
    ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise InvalidValue(f"k must be >= 1, got {k}")
    n_chunks = len(doc_of)
    chunks: Ranking = {}
    pending, depth = dict(queries), k
    while pending:
        got = rank_chunks(pending, depth)
        more = {}
        for qid, text in pending.items():
            scores = got.get(qid, {})
            chunks[qid] = scores
            n_docs = len({doc_of[c] for c in scores})
            if n_docs < k and len(scores) >= depth and depth < n_chunks:
                more[qid] = text
        pending, depth = more, min(2 * depth, n_chunks)
    docs = collapse_to_documents(chunks, doc_of)
    docs = {q: {d: s[d] for d in ordered(s)[:k]} for q, s in docs.items()}
    return docs, chunks
