"""Sentence boundaries as exact character offsets, for the sentence and semantic chunkers.

The rules are sentencex's for English (Wikimedia's segmenter: terminal punctuation, with its
abbreviation list, so "e.g.", "Dr.", "U.S.", "Fig. 3", initials, decimals "3.5 s" and versions
"v1.2" do not end a sentence). Three things it gets wrong in technical text are masked before it
reads the text: inline code (`` `a.b()` ``), a URL (``https://x.org/a.b?x=1.2``) and a list
number ("1." at the start, or after a sentence ends, which it takes for a sentence of its own).
Two abbreviations its list lacks are masked too (#23): "Ms." before a name ("Ms. Lindqvist"
read as two sentences) and "approx." before a number or a lower-case word ("approx. 5 minutes");
an "approx." before a capital still ends a sentence. "5 s." (a unit before a full stop) is left
as sentencex reads it. Each is replaced by a run of ``x`` of the same length, so no offset
moves and the spans returned index the original text. The measurement behind the choice is in
docs/config.md.
"""

from __future__ import annotations

import re

import sentencex

_URL_END = r"[^\s<>()\[\]`.,;:!?'\"]"  # a URL's last character: not sentence punctuation
_MASKED = re.compile(
    r"`[^`\n]+`"  # inline code
    rf"|\b(?:https?|ftp)://[^\s<>()\[\]`]*{_URL_END}|\bwww\.[^\s<>()\[\]`]*{_URL_END}"
    r"|(?:^|(?<=[.!?:]\s))\d{1,2}[.)](?=\s)"  # a list number
    r"|\bMs\.(?=\s)|\bapprox\.(?=\s+[0-9a-z])",  # abbreviations sentencex does not know
    re.MULTILINE)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: each sentence of ``text`` as a character range ``[start, end)``
    into ``text`` itself, in order, without the whitespace around it; empty for blank text.
    A hard-wrapped line break inside a sentence stays inside it."""
    masked = _MASKED.sub(lambda m: "x" * len(m.group()), text)
    spans, cursor = [], 0
    for piece in sentencex.segment("en", masked):
        piece = piece.strip()
        if piece:  # sentencex returns pieces of its input, in order
            start = masked.index(piece, cursor)
            spans.append((start, start + len(piece)))
            cursor = start + len(piece)
    return spans
