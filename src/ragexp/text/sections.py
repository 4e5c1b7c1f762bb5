"""A markdown document's outline: every heading with its path and the character range it owns.

Section labels (``{"doc": "guide/install.md", "section": "Install > Docker"}``) resolve through
this to a character span, so a section label is judged by the same span rule as a quote
(``relevance.py``) and survives any re-chunking. A section owns the text from the end of its
heading line to the next heading of the same or a higher level, subsections included: a heading
with nothing but subsections under it is labellable as a whole.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from ragexp.records import Document, Span
from ragexp.text import markdown

SEPARATOR = " > "


@dataclass(frozen=True)
class Section:
    """One heading: its path (``("Install", "Docker")``), level (1-6) and the span it owns."""

    path: tuple[str, ...]
    level: int
    span: Span
    line: int  # 1-based line of the heading

    @property
    def title(self) -> str:
        return SEPARATOR.join(self.path)


def outline(doc: Document) -> list[Section]:
    """Every heading, ATX (``## Docker``) or setext (``Docker\\n------``), in document order,
    as CommonMark reads them (``markdown.blocks``): a ``#`` line inside fenced or indented code
    is code, not a heading, and front matter is no heading. A section's text starts after its
    heading (a setext heading's underline included); in a document whose only text is headings,
    a section owns its heading itself, its text as the chunker reads it
    (``stages.chunking.parse_sections``), and its subsections' (a section label on ``# Gamma``
    over ``## Delta`` left out Gamma's own chunk, ranked first: RR@10 0.5 for 1.0)."""
    found = markdown.blocks(doc.text)
    heads = [b for b in found if b.kind == "heading"]
    headings_only = len(heads) == len(found)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    for i, head in enumerate(heads):
        stack = [(lv, t) for lv, t in stack if lv < head.level] + [(head.level, head.title)]
        end = next((h.start for h in heads[i + 1:] if h.level <= head.level), len(doc.text))
        span = Span(doc.doc_id, head.body, end)
        if headings_only:  # its heading is its text: the heading's own chunk is in it too
            span = Span(doc.doc_id, head.start, end if doc.text[head.body:end].strip()
                        else head.end)
        sections.append(Section(tuple(t for _, t in stack), head.level, span, head.line))
    return sections


def _fold(part: str) -> str:
    """One heading part as labels match it: whitespace runs collapsed, NFC (an editor that writes
    ``é`` as ``e`` + U+0301 writes the same heading), case folded."""
    return unicodedata.normalize("NFC", " ".join(part.split())).casefold()


def _parts(label: str) -> tuple[str, ...]:
    return tuple(_fold(p) for p in label.split(">") if p.strip())


def find_section(doc: Document, label: str) -> list[Section]:
    """Sections a label names: the full heading path (``"Install > Docker"``), or failing that,
    the sections whose path ends with the label's parts (``"Docker"``). Case, whitespace and
    Unicode normalisation (NFC against NFD) insensitive. More than one result means the label
    is ambiguous; none, that it is unknown."""
    want = _parts(label)
    if not want:
        return []
    secs = outline(doc)
    full = [s for s in secs if tuple(map(_fold, s.path)) == want]
    if full:
        return full
    return [s for s in secs if tuple(map(_fold, s.path[-len(want):])) == want]
