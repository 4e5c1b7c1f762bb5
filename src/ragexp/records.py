"""Plain records passed between stages.

A ranking between stages is the format every IR tool shares: ``{query_id: {item_id: score}}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Ranking = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

# Question kinds come from the data (any name); this one marks a question with no answer in the
# corpus, which feeds the abstain curve instead of the ranking metrics.
UNANSWERABLE = "unanswerable"
# the group of every question in per-kind tables, tests and metric names: no kind may be named so
# (a kind "all" gave two rows "all", and the sweep's page no file)
OVERALL = "all"
HAND = "hand"  # the source of a question written by hand: one whose line names no ``source``


@dataclass(frozen=True, slots=True)
class Document:
    """A source document. ``meta`` holds its front matter's keys (``title``, ``tags``, ...):
    metadata, not text, so no chunk holds it."""

    doc_id: str
    title: str
    text: str
    meta: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Span:
    """Character range ``[start, end)`` of a document."""

    doc_id: str
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable unit. ``spans`` are the source ranges its text came from, which is what lets
    relevance be decided from evidence offsets rather than chunk ids. ``repeat`` tells apart
    sections of one document under the same ``heading`` path (two ``# Setup``): 0 in the first
    such section, 1 in the second, ... (``chunking.numbered_sections``), so each is a
    ``section`` unit of its own (``data.units``)."""

    chunk_id: str
    doc_id: str
    text: str
    heading: str = ""
    spans: tuple[tuple[int, int], ...] = ()
    repeat: int = 0


@dataclass(frozen=True, slots=True)
class Query:
    qid: str
    text: str
    kind: str = "general"
    answer: str = ""
    evidence: tuple[Span, ...] = field(default=())
    source: str = HAND  # who wrote it: ``hand``, ``generated`` (``ragexp questions generate``)
    model: str | None = None  # the model that wrote it (``generator=llm``), None for none

    @property
    def answerable(self) -> bool:
        return self.kind != UNANSWERABLE


def ordered(scores: dict[str, float]) -> list[str]:
    """Items best first. Tie rule (trec_eval's, so our metrics and trec_eval agree): equal
    scores are ordered by item id, descending."""
    by_id = sorted(scores, reverse=True)
    return sorted(by_id, key=lambda i: -scores[i])  # stable: keeps id-descending among ties
