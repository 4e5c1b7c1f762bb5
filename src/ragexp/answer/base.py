"""The answer step: one interface, one citation checker and one refusal rule for every answerer.

An answerer (``answer=extractive`` in ``extractive.py``, ``answer=llm`` in ``llm_answer.py``)
turns a question and its retrieved chunks (best first) into an :class:`Answer`. Whatever wrote
the sentences, the same two rules decide what is shown:

1. **refusal before answering** (:func:`refuse_early`): refuse when the run's abstain signal
   is below the threshold read off its abstain curve, or when nothing was retrieved; nothing is
   generated (an LLM is not called);
2. **the citation checker** (:func:`check_citations`): every sentence must end with citations
   ``[n]`` (``[1]``, ``[1][3]`` or ``[1, 3]``) that all name one of the numbered sources, and
   the claim (the sentence without its citations) must be supported by the cited chunks: the
   idf-weighted share of the claim's terms found in them,
   ``sum_{t in C, t in cited} idf(t) / sum_{t in C} idf(t)``, is at least ``min_support``.
   Sentences that fail are dropped; if none survive, the answer is a refusal.

A verbatim sentence always has support 1.0, so for the extractive answerer the checker only
rejects a wrong source number. For generated text it is a lexical check: it catches invented
source numbers, uncited claims and claims whose words are not in the cited chunk, not a
negation or a wrong number built from the chunk's own words; that is what ``judge=llm`` is for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from collections.abc import Callable, Collection
from typing import Protocol, Sequence

from ragexp.records import Chunk
from ragexp.text.analysis import tokenize

REFUSAL = "I can't answer that from these documents: nothing retrieved supports an answer."
_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_TRAILING = re.compile(r"(?:\s*\[\d+(?:\s*,\s*\d+)*\])+\s*[.!?]?\s*$")

# The scorer an answerer checks support with: ``coverage(query_terms, found_terms)``, in 0..1,
# the idf-weighted share of the query's analysed terms that ``found_terms`` holds (the run's
# BM25 index's ``BM25Index.coverage``: sum over found terms of idf / sum over all of idf).
Coverage = Callable[[set[str], Collection[str]], float]


@dataclass(frozen=True)
class Source:
    n: int
    chunk_id: str
    doc_id: str
    heading: str


@dataclass(frozen=True)
class AnswerInput:
    """One question for an answerer: ``retrieved`` best first; ``signal`` and ``threshold`` are
    the run's abstain signal for this question and its refusal threshold."""

    question: str
    retrieved: list[Chunk]
    signal: float
    threshold: float


@dataclass
class Answer:
    question: str
    text: str
    refused: bool
    signal: float
    threshold: float
    sentences: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    dropped: int = 0  # sentences the citation checker rejected
    reason: str = ""  # why it refused
    dropped_why: list[str] = field(default_factory=list)  # one line per dropped sentence
    tokens_in: int = 0  # prompt tokens the endpoint reported (0 for the extractive answerer)
    tokens_out: int = 0  # completion tokens the endpoint reported
    cost_usd: float | None = 0.0  # tokens priced by the config's table; None: no price set
    retries: int = 0  # HTTP attempts beyond the first
    error: str = ""  # endpoint failure that left no answer (the answer is then a refusal)

    @property
    def cited_chunks(self) -> list[str]:
        cited = {n for s in self.sentences for n in cited_numbers(s)}
        return [src.chunk_id for src in self.sources if src.n in cited]


class Answerer(Protocol):
    """The answer stage: answers many questions at once (an LLM answerer runs them
    concurrently); each answer has passed :func:`refuse_early` and :func:`check_citations`."""

    name: str

    def answer(self, inputs: Sequence[AnswerInput], coverage: Coverage,
               progress: bool = False) -> list[Answer]:
        """One ``Answer`` per input, in order. ``coverage(query_terms, found_terms)`` is the
        run's scorer in [0, 1] (``Coverage``), the only part of the index an answerer reads."""
        ...


def cited_numbers(sentence: str) -> list[int]:
    """Source numbers cited at the end of ``sentence``, in order (``... [1][3].`` -> [1, 3])."""
    tail = _TRAILING.search(sentence)
    if not tail:
        return []
    return [int(n) for m in _MARKER.finditer(tail.group()) for n in m.group(1).split(",")]


def claim_of(sentence: str) -> str:
    """The sentence without its trailing citations."""
    return _TRAILING.sub("", sentence).strip()


def body(chunk: Chunk) -> str:
    """Chunk text without the heading path line that the chunker may prepend."""
    if chunk.heading and chunk.text.startswith(chunk.heading + "\n"):
        return chunk.text[len(chunk.heading) + 1:]
    return chunk.text


def support(claim: str, cited: Sequence[Chunk], coverage: Coverage) -> float:
    """idf-weighted share of the claim's terms found in the cited chunks' text (0..1)."""
    found: set[str] = set()
    for chunk in cited:
        found.update(tokenize(body(chunk)))
    return coverage(set(tokenize(claim)), found)


def check_citations(sentences: Sequence[str], sources: Sequence[Source],
                    chunks: dict[str, Chunk], coverage: Coverage,
                    min_support: float = 0.6) -> tuple[list[str], list[str]]:
    """Split sentences into those kept and one line of reason per sentence dropped.

    Kept: ends with citations, every cited n is a listed source, and the claim's
    :func:`support` in the cited chunks is at least ``min_support``.
    """
    by_n = {s.n: s for s in sources}
    kept, why = [], []
    for sentence in sentences:
        numbers, claim = cited_numbers(sentence), claim_of(sentence)
        unknown = [n for n in numbers if n not in by_n]
        if not numbers:
            why.append(f"no citation: {sentence[:80]!r}")
        elif unknown:
            why.append(f"cites {unknown} but only [1]..[{len(sources)}] were given: "
                       f"{sentence[:80]!r}")
        elif not tokenize(claim):
            why.append(f"no claim before the citation: {sentence[:80]!r}")
        else:
            share = support(claim, [chunks[by_n[n].chunk_id] for n in numbers], coverage)
            if share >= min_support:
                kept.append(sentence)
            else:
                why.append(f"support {share:.2f} < {min_support} in {numbers}: {sentence[:80]!r}")
    return kept, why


def sources_for(inp: AnswerInput, n_chunks: int) -> list[Source]:
    """The top ``n_chunks`` retrieved chunks, numbered from 1 as they are shown and cited."""
    return [Source(i, c.chunk_id, c.doc_id, c.heading)
            for i, c in enumerate(inp.retrieved[:n_chunks], start=1)]


def refuse_early(inp: AnswerInput, sources: list[Source]) -> Answer | None:
    """The refusal rule's first half: a refusal when the signal is below the threshold or
    nothing was retrieved, else None (go on and answer)."""
    if not sources:
        return Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold,
                      reason="nothing retrieved")
    if inp.signal < inp.threshold:
        return Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold, sources=sources,
                      reason="confidence below the run's refusal threshold")
    return None


def finish(inp: AnswerInput, sentences: Sequence[str], sources: list[Source],
           coverage: Coverage, min_support: float, why_empty: str, **usage) -> Answer:
    """The refusal rule's second half: keep the sentences that pass :func:`check_citations`;
    refuse (with ``why_empty``) when none does. ``usage`` fills the token/retry fields."""
    chunks = {c.chunk_id: c for c in inp.retrieved[:len(sources)]}
    kept, why = check_citations(sentences, sources, chunks, coverage, min_support)
    if not kept:
        return Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold, sources=sources,
                      dropped=len(why), reason=why_empty, dropped_why=why, **usage)
    return Answer(inp.question, " ".join(kept), False, inp.signal, inp.threshold, kept, sources,
                  len(why), dropped_why=why, **usage)


def answer_metrics(answers: dict[str, Answer], answerable: dict[str, bool],
                   relevant: dict[str, set[str]]) -> dict[str, float]:
    """Answer rate on answerable questions, refusals of unanswerable ones, the share of
    citations (on answered answerable questions) that point at a relevant chunk/document,
    sentences the checker dropped, and the endpoint's token counts and failures (summed)."""
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
    every = list(answers.values())
    out["answer.sentences_dropped"] = float(sum(a.dropped for a in every))
    out["answer.tokens_in"] = float(sum(a.tokens_in for a in every))
    out["answer.tokens_out"] = float(sum(a.tokens_out for a in every))
    costs = [a.cost_usd for a in every]
    if None not in costs:  # no price table, no cost: a missing number beats a wrong one
        out["answer.cost_usd"] = float(sum(costs))
    out["answer.retries"] = float(sum(a.retries for a in every))
    out["answer.errors"] = float(sum(bool(a.error) for a in every))
    return out


def answer_columns(answers: Sequence[Answer]) -> dict[str, list]:
    """Per-question columns for ``per_question.csv`` (same order as ``answers``)."""
    return {"answered": [not a.refused for a in answers],
            "answer": [a.text for a in answers],
            "cited": [" ".join(a.cited_chunks) for a in answers],
            "refusal_reason": [a.reason for a in answers],
            "sentences_dropped": [a.dropped for a in answers],
            "answer_tokens_in": [a.tokens_in for a in answers],
            "answer_tokens_out": [a.tokens_out for a in answers],
            "answer_error": [a.error for a in answers]}
