"""Extractive answers with checked citations, and a plain refusal when confidence is low.

``answer()`` takes the retrieved chunks (best first) and the run's abstain signal and threshold:

1. refuse when the signal is below the threshold read off the run's abstain curve;
2. otherwise score each sentence of the top ``n_chunks`` chunks by the idf-weighted share of
   the question's terms it holds, ``sum_{t in Q∩S} idf(t) / sum_{t in Q} idf(t)``, and keep the
   best ``max_sentences`` scoring at least ``min_overlap``, each tagged ``[n]`` for its chunk;
3. ``verify_citations`` re-checks every ``[n]``: n must name a retrieved chunk that really
   contains the sentence; sentences that fail are dropped; if none survive, refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragexp.bm25 import BM25Index
from ragexp.records import Chunk
from ragexp.text import split_sentences, tokenize, word_count

REFUSAL = "I can't answer that from these documents: nothing retrieved supports an answer."
_CITATION = re.compile(r"\s*\[(\d+)\]$")


@dataclass(frozen=True)
class Source:
    n: int
    chunk_id: str
    doc_id: str
    heading: str


@dataclass
class Answer:
    question: str
    text: str
    refused: bool
    signal: float
    threshold: float
    sentences: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    dropped: int = 0  # sentences whose citation did not check out
    reason: str = ""  # why it refused

    @property
    def cited_chunks(self) -> list[str]:
        cited = {int(m.group(1)) for s in self.sentences if (m := _CITATION.search(s))}
        return [src.chunk_id for src in self.sources if src.n in cited]


def _body(chunk: Chunk) -> str:
    """Chunk text without the heading path line that the chunker may prepend."""
    if chunk.heading and chunk.text.startswith(chunk.heading + "\n"):
        return chunk.text[len(chunk.heading) + 1:]
    return chunk.text


def verify_citations(sentences: list[str], sources: list[Source],
                     chunks: dict[str, Chunk]) -> tuple[list[str], int]:
    """Keep sentences whose ``[n]`` names a listed source whose chunk contains the sentence."""
    by_n = {s.n: s for s in sources}
    kept = []
    for sentence in sentences:
        m = _CITATION.search(sentence)
        src = by_n.get(int(m.group(1))) if m else None
        claim = " ".join(sentence[: m.start()].split()) if m else ""
        if src and claim and claim in " ".join(_body(chunks[src.chunk_id]).split()):
            kept.append(sentence)
    return kept, len(sentences) - len(kept)


def answer(question: str, retrieved: list[Chunk], signal: float, threshold: float,
           bm25: BM25Index, n_chunks: int = 3, max_sentences: int = 2,
           min_overlap: float = 0.3) -> Answer:
    top = retrieved[:n_chunks]
    sources = [Source(i, c.chunk_id, c.doc_id, c.heading) for i, c in enumerate(top, start=1)]
    if signal < threshold or not top:
        return Answer(question, REFUSAL, True, signal, threshold, sources=sources,
                      reason="confidence below the run's refusal threshold" if top
                      else "nothing retrieved")
    q_terms = set(tokenize(question))
    candidates = []
    for src, chunk in zip(sources, top):
        for rank, line in enumerate(_body(chunk).split("\n")):
            for sentence in split_sentences(line):
                score = bm25.coverage(q_terms, set(tokenize(sentence)))
                if score >= min_overlap and word_count(sentence) >= 3:
                    candidates.append((score, -src.n, -rank, f"{sentence} [{src.n}]"))
    picked = [c[3] for c in sorted(candidates, reverse=True)[:max_sentences]]
    kept, dropped = verify_citations(picked, sources, {c.chunk_id: c for c in top})
    if not kept:
        return Answer(question, REFUSAL, True, signal, threshold, sources=sources,
                      dropped=dropped, reason="no retrieved sentence covers enough of the "
                      "question, or none kept a valid citation")
    return Answer(question, " ".join(kept), False, signal, threshold, kept, sources, dropped)


@dataclass(frozen=True)
class Answerer:
    """The answer step's settings, as config (``answer.*``): they trade answer rate against
    refusals and citation precision, so they are swept like any other stage."""

    n_chunks: int = 3
    max_sentences: int = 2
    min_overlap: float = 0.3

    def __post_init__(self) -> None:
        if self.n_chunks < 1 or self.max_sentences < 1:
            raise ValueError("answer.n_chunks and answer.max_sentences must be >= 1")
        if not 0 <= self.min_overlap <= 1:
            raise ValueError(f"answer.min_overlap must be in [0, 1], got {self.min_overlap}")

    def __call__(self, question: str, retrieved: list[Chunk], signal: float, threshold: float,
                 bm25: BM25Index) -> Answer:
        return answer(question, retrieved, signal, threshold, bm25, self.n_chunks,
                      self.max_sentences, self.min_overlap)


def answer_metrics(answers: dict[str, Answer], answerable: dict[str, bool],
                   relevant: dict[str, set[str]]) -> dict[str, float]:
    """answer rate on answerable questions, refusals of unanswerable ones, and the share of
    citations (on answered answerable questions) that point at a relevant chunk/document."""
    ans = [q for q, a in answerable.items() if a]
    una = [q for q, a in answerable.items() if not a]
    cited = [(q, c) for q in ans if not answers[q].refused for c in answers[q].cited_chunks]
    out = {}
    if ans:
        out["answer.rate_answerable"] = sum(not answers[q].refused for q in ans) / len(ans)
    if una:
        out["answer.refused_unanswerable"] = sum(answers[q].refused for q in una) / len(una)
    if cited:
        out["answer.citation_precision"] = sum(c in relevant.get(q, set())
                                               for q, c in cited) / len(cited)
    return out
