"""Chunkers: documents in, retrievable chunks out, each chunk remembering its source offsets.

``MarkdownChunker`` reads a document's blocks as CommonMark does (``text.markdown``) and is
heading-aware: a chunk never crosses a heading, its heading path
("Title > Section > Subsection") travels with it (``include_headings`` switches whether it is
prepended to the text, so its effect can be measured), and hard-wrapped paragraphs are unwrapped
before being split into sentences. Windows are counted in words of source text (the heading
path comes on top); consecutive windows share about ``overlap_words`` words of whole units.

Every chunk holds at most ``max_words`` words (``text.layout_word_count``: whitespace tokens,
each character of a spaceless script such as Chinese or Thai counting as one): a list item longer than that splits at its
sentences, and a sentence longer than that at word boundaries. Code fences and tables stay
whole up to ``max(max_words, max_block_words)`` words (a chunk of their own when they exceed
``max_words``); a longer one splits at line boundaries (a line longer than ``max_words`` at
words). Every piece keeps exact source offsets.

``max_tokens`` sizes chunks in the embedder's own tokens instead (``TokenCounter``, given by
``with_tokenizer``): every size above counts tokens, a window holds at most ``max_tokens``
tokens *as embedded* (heading path, the model's prefix and special tokens included), windows
overlap by ``overlap_tokens``, and fences and tables get no allowance beyond the window (longer
ones split at lines), so no chunk is cut by the model. Sizes add the units' token counts,
exact for WordPiece tokenizers (MiniLM, bge); the run's ``truncation.*`` metrics count any
chunk still over the window.

``WholeDocumentChunker`` keeps pre-split passages (BEIR) whole; ``windows="maxp"`` splits
those longer than the embedder's window into overlapping windows, scored per document by the
best window (MaxP).
"""

from __future__ import annotations

import logging
import textwrap
from dataclasses import dataclass, field, replace
from typing import Iterable, Protocol, runtime_checkable

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.index.embedders import TokenCounter
from ragexp.records import Chunk, Document
from ragexp.text import markdown
from ragexp.text.analysis import LAYOUT_WORD, SENTENCE_BREAK, layout_word_count, normalize_ws

WINDOWS = ("truncate", "maxp")  # chunking=none: what becomes of a passage over the window
log = logging.getLogger(__name__)


class Chunker(Protocol):
    def chunk(self, docs: Iterable[Document]) -> list[Chunk]: ...


@runtime_checkable
class TokenSized(Protocol):
    """A chunker that can size chunks in the embedder's tokens: when ``needs_tokenizer``, the
    builder hands it the embedder's ``TokenCounter`` (``with_tokenizer``) before it chunks."""

    @property
    def needs_tokenizer(self) -> bool: ...

    def with_tokenizer(self, tokens: TokenCounter | None) -> Chunker: ...


@dataclass(frozen=True)
class Unit:
    """Smallest piece a window is made of: a sentence, a list item, a whole table or fence."""

    text: str
    start: int
    end: int
    words: int  # its size: words, or the embedder's tokens under ``max_tokens``
    kind: str = "sentence"  # or "item" (a list item), "block" (code, a table, HTML), "heading"


def _lines_with_offsets(text: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line.rstrip("\n")))
        pos += len(line)
    return out


def _sentences(raw: str, base: int) -> list[Unit]:
    """Unwrap a paragraph and split it into sentences, mapped back to raw offsets."""
    norm, offsets = normalize_ws(raw)
    units, start = [], 0
    bounds = [m.start() for m in SENTENCE_BREAK.finditer(norm)] + [len(norm)]
    for end in bounds:
        piece = norm[start:end].strip()
        if piece:
            lead = len(norm[start:end]) - len(norm[start:end].lstrip())
            s = start + lead
            units.append(Unit(piece, base + offsets[s], base + offsets[s + len(piece) - 1] + 1,
                              layout_word_count(piece)))
        start = end
    return units


def _title_unit(heading: markdown.Block) -> Unit:
    """A heading's title as a unit, its offsets those of the title's own characters."""
    norm, offsets = normalize_ws(heading.text)
    at = norm.find(heading.title)
    start, end = (heading.start + offsets[at], heading.start + offsets[at + len(heading.title) - 1]
                  + 1) if at >= 0 else (heading.start, heading.end)
    return Unit(heading.title, start, end, layout_word_count(heading.title), "heading")


def given_title(doc: Document) -> str:
    """``doc``'s title where one is given (front matter, a heading, a BEIR passage's title),
    ``""`` where it is only the file name ``golden.document_title`` falls back to: a chunk of a
    document without headings started with ``notes.md``, whose words (``notes``, ``md``) no
    text holds."""
    return "" if doc.title == doc.doc_id else doc.title


def parse_sections(doc: Document) -> list[tuple[str, list[Unit]]]:
    """Split a markdown document into (heading path, units) sections, its blocks read as
    CommonMark reads them (``text.markdown.blocks``: setext and ATX headings, fenced and
    indented code, tables, HTML blocks, block quotes, list items; front matter is not text).

    A paragraph gives its sentences, a list item one ``item`` unit (its marker kept; a nested
    item is a unit of its own), code, tables and HTML blocks one ``block`` unit each (a block
    quote's ``>`` markers are not part of any unit's text). A heading with no text of its own
    makes no section. Text before the first heading is a section of its own whose path is ""
    (under no heading: no heading line is prepended to its chunks, and at
    ``dataset.unit=section`` it is a unit apart, not the first heading's); a document without
    headings is one section named by its title (or by none where its title is only its file
    name: ``given_title``). A document whose only text is headings gives
    one section per heading, the heading's text its one ``heading`` unit, so it stays findable
    by its headings."""
    sections: list[tuple[str, list[Unit]]] = []
    path: list[tuple[int, str]] = []
    units: list[Unit] = []
    headings: list[tuple[str, Unit]] = []
    blocks = list(markdown.blocks(doc.text))
    # text before the first heading is under no heading (CommonMark): its own section, path "",
    # not the document's title (the first heading's, which merged it into that section's unit);
    # a document without headings is one section named by its title, as before
    untitled = "" if any(b.kind == "heading" for b in blocks) else given_title(doc)

    def flush_section() -> None:
        if units:
            sections.append((" > ".join(t for _, t in path) or untitled, list(units)))
        units.clear()

    for block in blocks:
        if block.kind == "heading":
            flush_section()
            path = [(lv, t) for lv, t in path if lv < block.level] + [(block.level, block.title)]
            if block.title:
                headings.append((" > ".join(t for _, t in path), _title_unit(block)))
        elif block.kind == "paragraph":
            units.extend(_sentences(block.text, block.start))
        elif block.kind == "item":
            norm, _ = normalize_ws(block.text)
            units.append(Unit(norm, block.start, block.end, layout_word_count(norm), "item"))
        else:
            raw = block.text.replace("\r\n", "\n").replace("\r", "\n")
            if block.text != doc.text[block.start:block.end]:  # inside a block quote
                raw = textwrap.dedent(raw)
            units.append(Unit(raw, block.start, block.end, layout_word_count(raw), "block"))
    flush_section()
    return sections or [(path, [unit]) for path, unit in headings]


def numbered_sections(doc: Document) -> list[tuple[str, list[Unit], int]]:
    """``parse_sections(doc)`` with each section's repeat: how many sections before it in the
    document have the same heading path (0 for the first ``# Setup``, 1 for a second). It comes
    from the document's structure alone, so a section's unit id (``data.units``) is the same
    under every chunking; without it two ``# Setup`` sections were one ``section`` unit, and a
    question quoting the second was credited for retrieving the first."""
    seen: dict[str, int] = {}
    out = []
    for heading, units in parse_sections(doc):
        out.append((heading, units, seen.get(heading, 0)))
        seen[heading] = seen.get(heading, 0) + 1
    return out


def heading_line(heading: str, include: bool) -> str:
    """The line a chunk's text starts with: its heading path and a line end, when ``include``
    (``chunking.include_headings``) and the chunk is under a heading; else ``""``."""
    return f"{heading}\n" if include and heading else ""


def _word_pieces(text: str, start: int, end: int, max_words: int, overlap: int) -> list[Unit]:
    """``text[start:end]`` cut at word boundaries into pieces of at most ``max_words`` words,
    each next piece starting ``overlap`` words back (as windows do), each with the exact
    offsets of its first and last word."""
    words = list(LAYOUT_WORD.finditer(text, start, end))
    out, i = [], 0
    while True:
        part = words[i:i + max_words]
        s, e = part[0].start(), part[-1].end()
        out.append(Unit(" ".join(text[s:e].split()), s, e, len(part)))
        if i + max_words >= len(words):
            return out
        i += max_words - overlap


@dataclass(frozen=True)
class Words:
    """Sizes in words of source text (``layout_word_count``), the default measure."""

    def sized(self, units: list[Unit]) -> list[Unit]:
        return units

    def pieces(self, text: str, start: int, end: int, size: int, overlap: int) -> list[Unit]:
        return _word_pieces(text, start, end, size, overlap)


@dataclass(frozen=True)
class Tokens:
    """Sizes in the embedder's own tokens (``TokenCounter.lengths``: no prefix, no special
    tokens); pieces cut between the tokenizer's words (``TokenCounter.pieces``)."""

    counter: TokenCounter

    def sized(self, units: list[Unit]) -> list[Unit]:
        sizes = self.counter.lengths([u.text for u in units])
        return [replace(u, words=int(n)) for u, n in zip(units, sizes)]

    def pieces(self, text: str, start: int, end: int, size: int, overlap: int) -> list[Unit]:
        return [Unit(" ".join(text[start + s:start + e].split()), start + s, start + e, n)
                for s, e, n in self.counter.pieces(text[start:end], size, overlap)]


def _line_pieces(text: str, unit: Unit, max_words: int, overlap: int,
                 measure: Words | Tokens = Words()) -> list[Unit]:
    """A block's lines as units (raw, indentation kept); a line too long splits at words."""
    lines = [Unit(line, unit.start + off, unit.start + off + len(line), n)
             for off, line in _lines_with_offsets(text[unit.start:unit.end])
             if (n := layout_word_count(line))]
    out: list[Unit] = []
    for u in measure.sized(lines):
        out.extend([u] if u.words <= max_words
                   else measure.pieces(text, u.start, u.end, max_words, overlap))
    return out


def fit(units: list[Unit], text: str, max_words: int, max_block_words: int,
        overlap: int = 0, measure: Words | Tokens = Words()) -> list[Unit]:
    """Split every unit that cannot fit a window: see the module docstring for the rule.
    ``text`` is the document the units' offsets point into; word pieces of one sentence
    overlap by ``overlap`` words (< ``max_words``). ``measure`` says what a size counts
    (``Words``, or the embedder's ``Tokens``; the units come sized by it)."""
    out: list[Unit] = []
    for u in units:
        if u.words <= max_words or (u.kind == "block" and u.words <= max_block_words):
            out.append(u)
        elif u.kind == "block":
            out.extend(_line_pieces(text, u, max_words, overlap, measure))
        elif u.kind == "sentence":
            out.extend(measure.pieces(text, u.start, u.end, max_words, overlap))
        else:
            for s in measure.sized(_sentences(text[u.start:u.end], u.start)):
                out.extend([s] if s.words <= max_words
                           else measure.pieces(text, s.start, s.end, max_words, overlap))
    return out


def _windows(units: list[Unit], max_words: int, overlap_words: int) -> list[list[Unit]]:
    """Greedy word windows over units; each next window restarts ``overlap_words`` back."""
    windows, i = [], 0
    while i < len(units):
        j, words = i, 0
        while j < len(units) and (j == i or words + units[j].words <= max_words):
            words += units[j].words
            j += 1
        windows.append(units[i:j])
        if j >= len(units):
            break
        # Step back over whole units for the overlap, but never so far that the next unit
        # no longer fits beside them (that window would be carried text only).
        k, carried = j, 0
        while (k - 1 > i and carried + units[k - 1].words <= overlap_words
               and carried + units[k - 1].words + units[j].words <= max_words):
            k -= 1
            carried += units[k].words
        i = k
    return windows


def spans_of(units: list[Unit]) -> tuple[tuple[int, int], ...]:
    """The source ranges of ``units`` (in document order), neighbours at most two characters
    apart (a sentence's space, a line break) merged into one range."""
    spans: list[list[int]] = []
    for u in units:
        if spans and u.start <= spans[-1][1] + 2:
            spans[-1][1] = max(spans[-1][1], u.end)
        else:
            spans.append([u.start, u.end])
    return tuple((s, e) for s, e in spans)


def window_overlaps(ch, at: str) -> list[str]:
    """Consecutive windows of a markdown chunker (or its config ``ch`` at key ``at``) share
    fewer words than a window holds, and, sized in tokens, fewer tokens."""
    return (settings.ordered(f"{at}.overlap_words", ch.overlap_words, f"{at}.max_words",
                             ch.max_words)
            + settings.ordered(f"{at}.overlap_tokens", ch.overlap_tokens, f"{at}.max_tokens",
                               ch.max_tokens))


# what asks a chunker to size in the embedder's tokens, and what sizes it without them
IN_TOKENS = {"chunking.max_tokens": "chunking.max_words",
             "chunking.windows=maxp": "chunking.windows=truncate"}


def without_tokenizer(key: str) -> str:
    """The refusal of ``key`` (one of ``IN_TOKENS``) beside an embedder without a tokenizer:
    ``with_tokenizer``'s, and composition's for ``embedder=hash``."""
    return (f"{key} sizes in the embedder's tokens, but the embedder has no tokenizer "
            f"(embedder=hash reads every term): use {IN_TOKENS[key]}, or an embedder with a "
            f"tokenizer (embedder=minilm)")


WINDOW_KEYS = ("overlap_words", "max_words", "overlap_tokens", "max_tokens")
overlap_below_window = settings.rule_for("chunking", WINDOW_KEYS, window_overlaps)


@dataclass(frozen=True)
class MarkdownChunker:
    """Heading-aware windows (module docstring): ``max_words``/``overlap_words`` in words, or,
    with ``max_tokens`` set, ``max_tokens``/``overlap_tokens`` in the embedder's tokens
    (``tokenizer``, given by ``with_tokenizer``). Raises ``InvalidValue`` on sizes out of
    range, and from ``chunk`` when ``max_tokens`` is set without a tokenizer."""

    max_words: int = field(default=120, metadata={"ge": 10})
    overlap_words: int = field(default=20, metadata={"ge": 0})
    include_headings: bool = True
    # fences/tables up to this stay whole; longer split at lines
    max_block_words: int = field(default=400, metadata={"ge": 1})
    name: str = "markdown"
    # sizes in the embedder's tokens instead of words: at most this many tokens per chunk as
    # embedded (heading path and special tokens included); null: sizes in words
    max_tokens: int | None = field(default=None, metadata={"ge": 16})
    overlap_tokens: int = field(default=32, metadata={"ge": 0})  # with max_tokens only
    tokenizer: TokenCounter | None = field(default=None, metadata=settings.BUILT)

    def __post_init__(self) -> None:
        settings.check(self, "chunking", window_overlaps(self, "chunking"))

    @property
    def needs_tokenizer(self) -> bool:
        return self.max_tokens is not None

    def with_tokenizer(self, tokens: TokenCounter | None) -> MarkdownChunker:
        """This chunker sizing in ``tokens``; raises ``InvalidValue`` for None (an embedder
        without a token window, such as embedder=hash)."""
        if tokens is None:
            raise InvalidValue(without_tokenizer("chunking.max_tokens"))
        if self.max_tokens > tokens.window:
            log.warning("chunking.max_tokens=%d is above the embedder's window of %d tokens: "
                        "the model reads only the first %d of a longer chunk",
                        self.max_tokens, tokens.window, tokens.window)
        return replace(self, tokenizer=tokens)

    def _measure(self) -> Words | Tokens:
        """What sizes count: words, or the embedder's tokens under ``max_tokens``."""
        if self.max_tokens is None:
            return Words()
        if self.tokenizer is None:
            raise InvalidValue("chunking.max_tokens needs the embedder's tokenizer "
                               "(MarkdownChunker.with_tokenizer; config.build gives it)")
        return Tokens(self.tokenizer)

    def _limits(self, heading: str, cache: dict) -> tuple[int, int, int]:
        """``(window, fence/table allowance, overlap)`` for a section under ``heading``; under
        ``max_tokens`` the window is what the heading path, prefix and special tokens leave,
        the overlap at most half of it (kept per heading in ``cache``)."""
        if self.max_tokens is None:
            return (self.max_words, max(self.max_words, self.max_block_words),
                    self.overlap_words)
        if heading not in cache:
            head = heading_line(heading, self.include_headings)
            room = self.max_tokens - int(self.tokenizer.counts([head])[0])
            if room < 8:
                raise InvalidValue(f"chunking.max_tokens={self.max_tokens} leaves {room} tokens "
                                   f"beside the heading path {heading!r}: raise max_tokens or "
                                   f"set chunking.include_headings=false")
            cache[heading] = (room, room, min(self.overlap_tokens, room // 2))
        return cache[heading]

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        chunks: list[Chunk] = []
        measure, limits = self._measure(), {}
        for doc in docs:
            n = 0
            for heading, units, repeat in numbered_sections(doc):
                size, block, overlap = self._limits(heading, limits)
                units = fit(measure.sized(units), doc.text, size, block, overlap, measure)
                for window in _windows(units, size, overlap):
                    body = "\n".join(u.text for u in window)
                    text = heading_line(heading, self.include_headings) + body
                    chunks.append(Chunk(chunk_id=f"{doc.doc_id}#{n}", doc_id=doc.doc_id,
                                        text=text, heading=heading, spans=spans_of(window),
                                        repeat=repeat))
                    n += 1
        return chunks


def windows_choice(ch, at: str) -> list[str]:
    """The ``windows`` of a whole-document chunker (or its config ``ch`` at key ``at``) names a
    way to treat passages over the embedder's window (``WINDOWS``)."""
    return [] if ch.windows in WINDOWS else [f"{at}.windows={ch.windows} is not a choice: must "
                                             f"be one of {', '.join(WINDOWS)}"]


windows_is_a_choice = settings.rule_for("chunking", ("windows",), windows_choice)


@dataclass(frozen=True)
class WholeDocumentChunker:
    """One chunk per document, title prepended: for corpora that are already passages.

    ``windows="truncate"`` (default) keeps every passage whole, as BEIR does: the model reads
    the first ``window`` tokens of a longer one (the run counts them, ``truncation.*``).
    ``windows="maxp"`` splits each passage longer than the embedder's window (``tokenizer``,
    given by ``with_tokenizer``) into windows that fill it, title prepended to each, each
    next one starting half a window on (the stride of Dai & Callan, SIGIR 2019); chunk ids
    ``<doc_id>#<i>``, and the document scores as its best window (MaxP, ``docrank``).
    Passages that fit stay one chunk with the document's id; a markdown document
    (``markdown``) with no text after its front matter gets none. Raises ``InvalidValue`` for an
    unknown ``windows``, and from ``chunk`` for maxp without a tokenizer or a title that
    leaves no room in the window."""

    include_title: bool = True
    name: str = "none"
    # a passage over the embedder's window: truncate (the model reads its first tokens, as
    # BEIR does) or maxp (overlapping windows, the document scored by its best window)
    windows: str = "truncate"
    tokenizer: TokenCounter | None = field(default=None, metadata=settings.BUILT)
    # the documents are markdown (not BEIR passages): a leading YAML front matter block is
    # metadata, held by no chunk, as under the markdown chunkers (``text.markdown.text_start``);
    # ``stages.ranking.reading`` sets it for a dataset that is not plain text
    markdown: bool = field(default=False, metadata=settings.BUILT)

    def __post_init__(self) -> None:
        settings.check(self, "chunking", windows_choice(self, "chunking"))

    @property
    def needs_tokenizer(self) -> bool:
        return self.windows == "maxp"

    def with_tokenizer(self, tokens: TokenCounter | None) -> WholeDocumentChunker:
        """This chunker splitting at ``tokens.window``; raises ``InvalidValue`` for None (an
        embedder without a window, such as embedder=hash: nothing is cut)."""
        if tokens is None:
            raise InvalidValue(without_tokenizer("chunking.windows=maxp"))
        return replace(self, tokenizer=tokens)

    def _head(self, d: Document) -> str:
        return f"{given_title(d)}\n" if self.include_title and given_title(d) else ""

    def _start(self, d: Document) -> int:
        """Where ``d``'s text starts: after its front matter in a markdown document."""
        return markdown.text_start(d.text) if self.markdown else 0

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        # a markdown document with no text (empty, or front matter only) gets no chunk, as under
        # the markdown chunkers: a chunk of its title alone held only its file name's words
        docs = list(docs)
        starts = {d.doc_id: self._start(d) for d in docs}
        docs = [d for d in docs if not self.markdown or d.text[starts[d.doc_id]:].strip()]
        whole = [Chunk(chunk_id=d.doc_id, doc_id=d.doc_id, text=self._head(d) + d.text[at:],
                       heading=d.title, spans=((at, len(d.text)),))
                 for d in docs for at in (starts[d.doc_id],)]
        if self.windows == "truncate":
            return whole
        if self.tokenizer is None:
            raise InvalidValue("chunking.windows=maxp needs the embedder's tokenizer "
                               "(WholeDocumentChunker.with_tokenizer; config.build gives it)")
        window = self.tokenizer.window
        over = self.tokenizer.counts([c.text for c in whole]) > window
        out: list[Chunk] = []
        for d, c, long in zip(docs, whole, over):
            out.extend(self._windows(d) if long else [c])
        log.info("chunking.windows=maxp: %d of %d passages exceed the window of %d tokens, "
                 "split into %d windows", int(over.sum()), len(docs), window,
                 len(out) - len(docs) + int(over.sum()))
        return out

    def _windows(self, d: Document) -> list[Chunk]:
        head = self._head(d)
        room = self.tokenizer.window - int(self.tokenizer.counts([head])[0])
        if room < 8:
            raise InvalidValue(f"document {d.doc_id!r}: its title takes all but {room} of the "
                               f"embedder's {self.tokenizer.window} tokens; set "
                               f"chunking.include_title=false")
        at = self._start(d)
        return [Chunk(chunk_id=f"{d.doc_id}#{i}", doc_id=d.doc_id,
                      text=head + d.text[at + s:at + e], heading=d.title,
                      spans=((at + s, at + e),))
                for i, (s, e, _) in enumerate(self.tokenizer.pieces(d.text[at:], room,
                                                                    room // 2))]
