"""Passages to write questions from, and the order they are sampled in.

A passage is a paragraph, a table or a whole list of a section, as CommonMark reads the document
(``text.markdown``; code and headings are not passages), of at least ``MIN_WORDS`` words, with
its character range in the raw document. The sample order is stratified: documents take turns
(one passage each per round), and within a document its sections take turns, so a long document
or a long section does not dominate the set. Each passage can be drawn several times (``draw`` 0, 1, ...: a later pass over
the same order), so a small corpus still yields many questions.

Passages a site repeats on its pages (navigation, footers, boilerplate: ``repeated``) are not
sampled: a question on one is answered by every page holding it, and a page is no answer to it.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ragexp.records import Document
from ragexp.text import markdown
from ragexp.text.analysis import word_count, words
from ragexp.text.sections import outline

MIN_WORDS = 8
# a line on more than this share of the documents, and on MIN_PAGES of them at least, is the
# site's own (navigation, a footer), not a document's; a passage whose words lie on such lines
# for at least BOILERPLATE_WORDS of them is boilerplate
MOST_PAGES, MIN_PAGES, BOILERPLATE_WORDS = 0.5, 3, 0.8
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Passage:
    """A paragraph of document ``doc_id`` at raw-text characters ``[start, end)``, under the
    section ``section`` (its heading path, ``""`` before the first heading)."""

    doc_id: str
    section: str
    start: int
    end: int
    text: str

    @property
    def pid(self) -> str:
        return f"{self.doc_id}#{self.start}-{self.end}"


@dataclass(frozen=True)
class Job:
    """One question to ask: passage, pass over the order (``draw``), kind asked, and the index
    of the job in the sample order (stable across reruns: the kind is assigned from it)."""

    passage: Passage
    draw: int
    kind: str
    index: int

    @property
    def key(self) -> str:
        return f"{self.passage.pid}@{self.draw}"


def _blocks(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each passage-sized block as CommonMark reads the document
    (``text.markdown.blocks``): a paragraph, a table, or a whole list (its consecutive items);
    headings and code are no passages."""
    run: list[int] | None = None
    for b in markdown.blocks(text):
        if b.kind == "item" and run is not None and not text[run[1]:b.start].strip():
            run[1] = b.end  # the next item of the same list
            continue
        if run is not None:
            yield run[0], run[1]
            run = None
        if b.kind in (*markdown.TEXT_KINDS, "table"):
            run = [b.start, b.end]
    if run is not None:
        yield run[0], run[1]


def passages_of(docs: Sequence[Document]) -> list[Passage]:
    """Every passage of ``docs``, in document order, each under the deepest section holding it
    (``text.sections.outline``)."""
    out: list[Passage] = []
    for doc in docs:
        sections = outline(doc)
        for start, end in _blocks(doc.text):
            body = doc.text[start:end].rstrip()
            if word_count(body) < MIN_WORDS:
                continue
            holding = [s for s in sections if s.span.start <= start < s.span.end]
            title = holding[-1].title if holding else ""
            out.append(Passage(doc.doc_id, title, start, start + len(body), body))
    return out


def _line_key(line: str) -> str:
    """What makes two lines one line on different pages: their words (``text.analysis.words``,
    case folded), with a link's target dropped (a page's relative links differ by its depth)
    and every run of digits read as ``0`` (a date, a page number)."""
    return _DIGITS.sub("0", " ".join(words(_LINK_TARGET.sub("]", line))))


def repeated(passages: Sequence[Passage], docs: Sequence[Document]) -> set[str]:
    """The ids (``Passage.pid``) of the passages the documents repeat, not sampled:

    - the same text, whitespace runs collapsed, is a passage of two or more documents; or
    - a near-identical line block on most pages: at least ``BOILERPLATE_WORDS`` of its words lie
      on lines (``_line_key``: the same words, digits and link targets aside) found in more than
      ``MOST_PAGES`` of the documents and in ``MIN_PAGES`` at least.
    """
    by_text: dict[str, set[str]] = {}
    for p in passages:
        by_text.setdefault(" ".join(p.text.split()), set()).add(p.doc_id)
    pages = Counter(key for doc in docs
                    for key in {_line_key(line) for line in doc.text.splitlines()} if key)
    out = set()
    for p in passages:
        if len(by_text[" ".join(p.text.split())]) > 1:
            out.add(p.pid)
            continue
        keys = [k for k in map(_line_key, p.text.splitlines()) if k]
        common = sum(len(k.split()) for k in keys
                     if pages[k] >= MIN_PAGES and pages[k] > MOST_PAGES * len(docs))
        if common >= BOILERPLATE_WORDS * sum(len(k.split()) for k in keys):
            out.add(p.pid)
    return out


def sample_order(passages: Sequence[Passage], seed: int) -> list[Passage]:
    """All ``passages`` once, in the stratified order: documents in a seeded random order take
    one passage each per round; a document's passages come from its sections in turn (sections
    and the passages in each shuffled by the same generator). Same seed, same order."""
    rng = np.random.default_rng(seed)
    by_doc: dict[str, dict[str, list[Passage]]] = {}
    for p in passages:
        by_doc.setdefault(p.doc_id, {}).setdefault(p.section, []).append(p)
    sequences: list[list[Passage]] = []
    for doc_id in sorted(by_doc):
        sections = [by_doc[doc_id][s] for s in sorted(by_doc[doc_id])]
        queues = [deque(sec[i] for i in rng.permutation(len(sec)))
                  for sec in (sections[j] for j in rng.permutation(len(sections)))]
        seq: list[Passage] = []
        while any(queues):
            seq.extend(q.popleft() for q in queues if q)
        sequences.append(seq)
    sequences = [sequences[i] for i in rng.permutation(len(sequences))]
    longest = max((len(s) for s in sequences), default=0)
    return [s[r] for r in range(longest) for s in sequences if r < len(s)]


def jobs(passages: Sequence[Passage], seed: int, kinds: Sequence[str],
         draws: int) -> Iterator[Job]:
    """The jobs in order: ``draws`` passes over ``sample_order``, the ``i``-th job asking for
    ``kinds[i % len(kinds)]``."""
    order = sample_order(passages, seed)
    index = 0
    for draw in range(draws):
        for p in order:
            yield Job(p, draw, kinds[index % len(kinds)], index)
            index += 1
