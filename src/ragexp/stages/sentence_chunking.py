"""``chunking=sentences``: ``sentences`` whole sentences per chunk, consecutive chunks sharing
``overlap_sentences`` of them.

Sections come from ``chunking.numbered_sections`` (a chunk never crosses a heading; a BEIR
passage, without headings, is one section). Its prose is re-split by a real sentence splitter
(``text.sentences``: abbreviations, decimals, versions, URLs and inline code stay inside their
sentence); a list item's sentences are split the same way, a code fence or a table counts as
one sentence. A sentence longer than ``max_words`` words splits at word boundaries (fences and
tables at lines, ``chunking.fit``), so no chunk holds more than ``sentences * max_words`` words.
Every sentence keeps its exact source offsets, so quote, section and document labels all judge
these chunks by the same span rule (``data.relevance``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from ragexp import settings
from ragexp.records import Chunk, Document
from ragexp.stages.chunking import Unit, fit, heading_line, numbered_sections, spans_of
from ragexp.text.analysis import layout_word_count, normalize_ws
from ragexp.text.sentences import sentence_spans

_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")


def sentence_units(text: str, units: list[Unit]) -> list[Unit]:
    """The section's ``units`` (offsets into ``text``, its document) as sentences: consecutive
    sentence units of one paragraph (no blank line between them) rejoined and split again by
    ``sentence_spans``, each list item split the same way, blocks (fences, tables) kept whole.
    Each sentence's text is its source with whitespace runs collapsed."""
    out: list[Unit] = []
    paragraph: list[Unit] = []

    def split(start: int, end: int) -> None:
        for s, e in sentence_spans(text[start:end]):
            norm, _ = normalize_ws(text[start + s:start + e])
            out.append(Unit(norm, start + s, start + e, layout_word_count(norm)))

    def flush() -> None:
        if paragraph:
            split(paragraph[0].start, paragraph[-1].end)
            paragraph.clear()

    for u in units:
        if u.kind == "sentence":
            if paragraph and _BLANK_LINE.search(text, paragraph[-1].end, u.start):
                flush()
            paragraph.append(u)
            continue
        flush()
        if u.kind == "item":
            split(u.start, u.end)
        else:
            out.append(u)
    flush()
    return out


def make_chunk(doc: Document, n: int, heading: str, units: list[Unit],
               include_headings: bool, repeat: int = 0) -> Chunk:
    """Chunk ``n`` of ``doc`` (id ``doc_id#n``, as ``MarkdownChunker`` numbers them): the units'
    texts one per line, after the heading path when ``include_headings``; ``repeat`` is its
    section's (``chunking.numbered_sections``)."""
    body = "\n".join(u.text for u in units)
    return Chunk(chunk_id=f"{doc.doc_id}#{n}", doc_id=doc.doc_id,
                 text=heading_line(heading, include_headings) + body, heading=heading,
                 spans=spans_of(units), repeat=repeat)


def sentence_windows(count: int, size: int, overlap: int) -> list[range]:
    """Index ranges of ``count`` items in windows of ``size``, each next window starting
    ``size - overlap`` after the last; the last window ends at ``count`` and no window lies
    inside the one before it. ``count=7, size=3, overlap=1``: 0-2, 2-4, 4-6."""
    out, i = [], 0
    while i < count:
        out.append(range(i, min(i + size, count)))
        if i + size >= count:
            break
        i += size - overlap
    return out


def sentence_overlap(ch, at: str) -> list[str]:
    """Consecutive chunks of a sentence chunker (or its config ``ch`` at key ``at``) share
    fewer sentences than a chunk holds."""
    return settings.ordered(f"{at}.overlap_sentences", ch.overlap_sentences, f"{at}.sentences",
                            ch.sentences)


overlap_below_chunk = settings.rule_for("chunking", ("overlap_sentences", "sentences"),
                                        sentence_overlap)


@dataclass(frozen=True)
class SentenceChunker:
    """``sentences`` sentences per chunk, ``overlap_sentences`` shared with the next chunk;
    ``max_words`` caps one sentence (a longer one splits at word boundaries);
    ``include_headings`` prepends the heading path as ``MarkdownChunker`` does.

    Raises ``InvalidValue`` for ``sentences < 1``, an overlap outside ``[0, sentences)`` or
    ``max_words < 10``."""

    sentences: int = field(default=6, metadata={"ge": 1})  # sentences per chunk
    overlap_sentences: int = field(default=1, metadata={"ge": 0})  # shared with the next chunk
    max_words: int = field(default=120, metadata={"ge": 10})  # a longer sentence splits at words
    include_headings: bool = True
    name: str = "sentences"

    def __post_init__(self) -> None:
        settings.check(self, "chunking", sentence_overlap(self, "chunking"))

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        chunks: list[Chunk] = []
        for doc in docs:
            n = 0
            for heading, units, repeat in numbered_sections(doc):
                units = fit(sentence_units(doc.text, units), doc.text, self.max_words,
                            self.max_words)
                for window in sentence_windows(len(units), self.sentences,
                                               self.overlap_sentences):
                    chunks.append(make_chunk(doc, n, heading, units[window.start:window.stop],
                                             self.include_headings, repeat))
                    n += 1
        return chunks
