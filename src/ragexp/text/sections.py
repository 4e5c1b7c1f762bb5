"""A markdown document's outline: every heading with its path and the character range it owns.

Section labels (``{"doc": "guide/install.md", "section": "Install > Docker"}``) resolve through
this to a character span, so a section label is judged by the same span rule as a quote
(``relevance.py``) and survives any re-chunking. A section owns the text from the end of its
heading line to the next heading of the same or a higher level, subsections included: a heading
with nothing but subsections under it is labellable as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragexp.records import Document, Span

HEADING = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")  # a closing #-run needs a space
FENCE = re.compile(r"^\s*(```|~~~)")
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
    """Every ATX heading outside code fences, in document order (``#`` lines inside fences are
    code, not headings: the chunker skips them the same way)."""
    heads: list[tuple[int, str, int, int, int]] = []  # level, title, line, line start, body start
    pos, in_fence = 0, False
    for lineno, line in enumerate(doc.text.splitlines(keepends=True), start=1):
        stripped = line.rstrip("\r\n")
        if FENCE.match(stripped):
            in_fence = not in_fence
        elif not in_fence:
            m = HEADING.match(stripped)
            if m:
                heads.append((len(m.group(1)), " ".join(m.group(2).split()), lineno, pos,
                              pos + len(line)))
        pos += len(line)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    for i, (level, title, lineno, _, body) in enumerate(heads):
        stack = [(lv, t) for lv, t in stack if lv < level] + [(level, title)]
        end = next((h[3] for h in heads[i + 1:] if h[0] <= level), len(doc.text))
        sections.append(Section(tuple(t for _, t in stack), level, Span(doc.doc_id, body, end),
                                lineno))
    return sections


def _parts(label: str) -> tuple[str, ...]:
    return tuple(" ".join(p.split()).casefold() for p in label.split(">") if p.strip())


def find_section(doc: Document, label: str) -> list[Section]:
    """Sections a label names: the full heading path (``"Install > Docker"``), or failing that,
    the sections whose path ends with the label's parts (``"Docker"``). Case and whitespace
    insensitive. More than one result means the label is ambiguous; none, that it is unknown."""
    want = _parts(label)
    if not want:
        return []
    secs = outline(doc)
    full = [s for s in secs if tuple(p.casefold() for p in s.path) == want]
    if full:
        return full
    return [s for s in secs if tuple(p.casefold() for p in s.path[-len(want):]) == want]
