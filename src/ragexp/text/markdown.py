"""A markdown document's blocks as CommonMark reads them, each with its exact source offsets.

markdown-it-py (the CommonMark reference algorithm, with GitHub's tables and YAML front matter
from ``mdit-py-plugins``) decides the block structure, so that what is a heading, code or text
follows the spec (https://spec.commonmark.org/0.31.2/): setext headings (``Install\\n===``),
ATX headings with closing hashes, ``#`` lines inside fenced or indented code (code, not
headings), ``~~~`` fences, HTML blocks, block quotes, lists with lazy continuation lines, and
front matter (``---\\ntitle: ...\\n---`` at the top: document metadata, not text). Offsets are
characters of the text as given: CRLF and CR line ends and a leading byte-order mark are read
as markdown-it reads them, and every offset still points into the original string.

:func:`plain` renders inline markup to the text a person reads (``**14 days**`` -> ``14 days``);
:func:`body_lines` reads a chunk's body, line by line, as prose, table row, code or heading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.front_matter import front_matter_plugin

_LINE_END = re.compile(r"\r\n|\r|\n")  # markdown-it's own line ends (not U+2028 and the like)
_BOM = "\ufeff"
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DELIMITER_ROW = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
# Block kinds; "item" is the first paragraph of a list item, from its marker on.
TEXT_KINDS = ("paragraph", "item")
CODE_KINDS = ("fence", "code")


@lru_cache(maxsize=2)
def _parser(inline: bool = True) -> MarkdownIt:
    """CommonMark with tables and front matter; ``inline=False`` leaves inline content
    unparsed (block structure only: twice as fast)."""
    md = MarkdownIt("commonmark").enable("table").use(front_matter_plugin)
    return md if inline else md.disable("inline")


@dataclass(frozen=True)
class Block:
    """One leaf block: ``kind`` is ``heading``, ``paragraph``, ``item`` (a list item's first
    paragraph, marker included), ``fence``, ``code`` (indented code), ``table`` or ``html``.

    ``[start, end)`` are character offsets of the document, from the start of the block's first
    line to the end of its last non-blank line (line end excluded). ``text`` is
    ``doc[start:end]`` with the markers of enclosing block quotes (``>``) blanked to spaces, so it
    is as long as the range and maps back to it character for character. A heading has its
    ``level`` (1-6) and ``title`` (its inline text, whitespace collapsed, markup as written) and
    ``line``, the 1-based line it starts on; ``body`` is where the text after it starts (after a
    setext heading's underline)."""

    kind: str
    start: int
    end: int
    text: str
    line: int
    level: int = 0
    title: str = ""
    body: int = 0


@dataclass(frozen=True)
class FrontMatter:
    """YAML front matter: its source (between the ``---`` lines) and 1-based first and last
    lines, the fences included."""

    content: str
    first_line: int
    last_line: int


class _Lines:
    """Line starts and ends (line end excluded) of a text, as markdown-it numbers lines."""

    def __init__(self, text: str, base: int):
        self.starts, self.ends = [base], []
        for m in _LINE_END.finditer(text):
            self.ends.append(base + m.start())
            self.starts.append(base + m.end())
        self.ends.append(base + len(text))

    def last_filled(self, first: int, stop: int, doc: str) -> int:
        """The last line in ``[first, stop)`` that is not blank (``first`` if all are)."""
        for i in range(min(stop, len(self.ends)) - 1, first, -1):
            if doc[self.starts[i]:self.ends[i]].strip():
                return i
        return first


def _tokens(text: str) -> tuple[list[Token], _Lines, str]:
    base = 1 if text.startswith(_BOM) else 0
    source = text[base:]
    return _parser(inline=False).parse(source), _Lines(source, base), source


def front_matter(text: str) -> FrontMatter | None:
    """The document's YAML front matter, or None when it has none. Front matter is a ``---``
    line as the very first line, closed by the next ``---`` line (Jekyll's and Hugo's rule, as
    ``mdit_py_plugins.front_matter`` reads it)."""
    if not text.removeprefix(_BOM).startswith("---"):
        return None
    tokens, _, _ = _tokens(text)
    for tok in tokens[:1]:
        if tok.type == "front_matter" and tok.map:
            return FrontMatter(tok.content, tok.map[0] + 1, tok.map[1])
    return None


def text_start(text: str) -> int:
    """Character offset where a document's text starts: after its front matter's closing
    ``---`` line (and its line end), 0 without front matter. Front matter is metadata: no chunk
    holds it and no label may point into it."""
    found = front_matter(text)
    if found is None:
        return 0
    pos = 0
    for _ in range(found.last_line):
        nl = text.find("\n", pos)
        pos = len(text) if nl < 0 else nl + 1
    return pos


def _mask(doc: str, lines: _Lines, first: int, last: int, quotes: int) -> str:
    """``doc`` from line ``first`` to the end of line ``last``, with up to ``quotes`` block-quote
    markers at the start of each line blanked (a lazy continuation line has none)."""
    start, end = lines.starts[first], lines.ends[last]
    if not quotes:
        return doc[start:end]
    marker = re.compile(r"(?:[ \t]*>[ \t]?){1,%d}" % quotes)
    out = []
    for i in range(first, last + 1):
        line = doc[lines.starts[i]:lines.ends[i]]
        m = marker.match(line)
        cut = m.end() if m else 0
        out.append(" " * cut + line[cut:])
        if i < last:
            out.append(doc[lines.ends[i]:lines.starts[i + 1]])
    return "".join(out)


def blocks(text: str) -> list[Block]:
    """Every leaf block of a markdown document, in document order: see :class:`Block`.

    Containers are read through: a block quote's paragraphs and a list's items come out as
    blocks of their own (a nested item after its parent's first paragraph). Front matter,
    thematic breaks and link reference definitions are not blocks: they are not text.

    Parsed once per text for the last ``_BLOCKS_KEPT`` texts (the blocks are frozen; the list
    is the caller's): the loader reads each document's title, then every quote of a golden set
    (``golden._heading_holding``) and every section label read its document's blocks again,
    then the chunkers (126 ms of parsing for the handbook's 108 questions, 4 ms without)."""
    return list(_blocks(text))


_BLOCKS_KEPT = 256


@lru_cache(maxsize=_BLOCKS_KEPT)
def _blocks(text: str) -> tuple[Block, ...]:
    tokens, lines, _ = _tokens(text)
    out: list[Block] = []
    quotes, i = 0, 0

    def add(kind: str, first: int, stop: int, **heading) -> None:
        last = lines.last_filled(first, stop, text)
        out.append(Block(kind, lines.starts[first], lines.ends[last],
                         _mask(text, lines, first, last, quotes), first + 1, **heading))

    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "blockquote_open":
            quotes += 1
        elif tok.type == "blockquote_close":
            quotes -= 1
        elif tok.type == "heading_open" and tok.map:
            first, stop = tok.map
            title = " ".join(tokens[i + 1].content.split())
            add("heading", first, stop, level=int(tok.tag[1]), title=title,
                body=lines.starts[stop] if stop < len(lines.starts) else len(text))
        elif tok.type == "paragraph_open" and tok.map:
            item = tokens[i - 1] if i and tokens[i - 1].type == "list_item_open" else None
            first = item.map[0] if item is not None and item.map else tok.map[0]
            add("item" if item is not None else "paragraph", first, tok.map[1])
        elif tok.type in ("fence", "code_block", "html_block", "table_open") and tok.map:
            kind = {"fence": "fence", "code_block": "code", "html_block": "html"}.get(tok.type,
                                                                                     "table")
            add(kind, *tok.map)
            if tok.type == "table_open":
                while tokens[i].type != "table_close":
                    i += 1
        i += 1
    return tuple(out)


def plain(inline: str, code: bool = False) -> str:
    """The text a person reads in a line of inline markdown: emphasis, code spans, links and
    images rendered to their text (``**14 days**`` -> ``14 days``, ```` `brindle` ```` ->
    ``brindle``, ``[docs](http://x)`` -> ``docs``, an image to its alt text), inline HTML tags
    dropped, backslash escapes and entities resolved, whitespace collapsed. ``code=True`` keeps
    a code span's backticks (```` `brindle` ````), as a question written from it quotes it."""
    parts: list[str] = []
    for tok in _parser().parseInline(inline)[0].children or []:
        if tok.type == "code_inline" and code:
            tick = "``" if "`" in tok.content else "`"
            parts.append(f"{tick}{tok.content}{tick}")
        elif tok.type in ("text", "code_inline"):
            parts.append(tok.content)
        elif tok.type == "image":
            parts.append("".join(c.content for c in tok.children or []))
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return " ".join("".join(parts).split())


def _fence_closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (len(line) - len(line.lstrip(" ")) < 4 and len(stripped) >= len(fence)
            and set(stripped) == {fence[0]})


def _line_kind(line: str) -> tuple[str, str]:
    """One line read alone as CommonMark reads it: ``(kind, inline source)``, kind ``prose``
    (a paragraph or a list item, its marker gone), ``heading``, ``code`` (indented) or ``html``;
    ``("", "")`` for a line that is no text (a thematic break)."""
    tokens = _parser(inline=False).parse(line)
    for i, tok in enumerate(tokens):
        if tok.type == "inline":
            return ("heading" if tokens[i - 1].type == "heading_open" else "prose"), tok.content
        if tok.type in ("code_block", "html_block"):
            return ("code" if tok.type == "code_block" else "html"), line
    return "", ""


def body_lines(body: str) -> list[tuple[str, str]]:
    """``(kind, line)`` for every non-blank line of a chunk's body (``stages.chunking`` writes one
    unit a line: a sentence, a list item, or the lines of a code block or table), kind ``prose``,
    ``table`` (a row or the delimiter row under a header), ``code`` (a fenced block from its
    opening to its closing fence, or indented code), ``html`` or ``heading``.

    Fences and tables need the lines around them, so they are followed line by line (a fence
    closes on a line of its own character at least as long; a table is its ``|`` lines and the
    header over a delimiter row); every other line is read alone by markdown-it. A prose or
    heading line comes with its inline source (a list marker dropped), to be shown through
    :func:`plain`."""
    raw = [ln for ln in _LINE_END.split(body) if ln.strip()]
    out: list[tuple[str, str]] = []
    fence, table = "", False
    for i, line in enumerate(raw):
        if fence:
            out.append(("code", line))
            fence = "" if _fence_closes(line, fence) else fence
            continue
        opened = _FENCE_OPEN.match(line)
        table = "|" in line and len(line) - len(line.lstrip(" ")) < 4 and bool(
            table or line.lstrip(" ").startswith("|") or _DELIMITER_ROW.match(line)
            or (i + 1 < len(raw) and _DELIMITER_ROW.match(raw[i + 1])))
        if opened:
            fence, table = opened.group(1), False
            out.append(("code", line))
        elif table:
            out.append(("table", line))
        else:
            kind, inline = _line_kind(line)
            if kind:
                out.append((kind, inline))
    return out


def row_text(row: str) -> str:
    """A table row as a person reads it: its cells through :func:`plain`, joined by `` | ``
    (``| `segment_size` | size |`` -> ``segment_size | size``); a delimiter row gives ``""``."""
    if _DELIMITER_ROW.match(row):
        return ""
    return " | ".join(plain(c.replace("\\|", "|")) for c in cells(row))


def cells(row: str) -> list[str]:
    """A table row's cells as written, each stripped (``| `a` | b |`` -> ``["`a`", "b"]``):
    split at the pipes that are not escaped (``\\|`` stays in its cell), the empty cell before
    a leading pipe and after a trailing one dropped."""
    found = re.split(r"(?<!\\)\|", row.strip())
    if found and not found[0].strip():
        found = found[1:]
    if found and not found[-1].strip():
        found = found[:-1]
    return [c.strip() for c in found]
