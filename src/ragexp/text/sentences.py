"""Sentence boundaries as exact character offsets, for the sentence and semantic chunkers.

The rules are pysbd's (Sadvilkar and Neumann, "PySBD: Pragmatic Sentence Boundary
Disambiguation", NLP-OSS 2020, a port of the Golden Rules of the Ruby pragmatic segmenter):
abbreviations ("e.g.", "Dr.", "U.S."), decimals ("3.5 s", "$3.50"), versions ("v1.2") and list
numbers ("1. Install it.") do not end a sentence. Two things pysbd gets wrong in technical text
are masked before it reads the text: a URL (it splits ``https://x.org/a?b=1`` at the ``?``) and
inline code (`` `a.b()` ``). Each is replaced by a run of ``x`` of the same length, and every
line break by a space (a hard-wrapped line is one sentence), so no offset moves and the spans
returned index the original text.
"""

from __future__ import annotations

import re

import pysbd

# Inline code, and a URL up to (not including) trailing sentence punctuation.
_MASKED = re.compile(r"`[^`\n]+`|\b(?:https?|ftp)://[^\s<>()\[\]`]*[^\s<>()\[\]`.,;:!?'\"]"
                     r"|\bwww\.[^\s<>()\[\]`]*[^\s<>()\[\]`.,;:!?'\"]")
_SEGMENTER = pysbd.Segmenter(language="en", clean=False)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: each sentence of ``text`` as a character range ``[start, end)``
    into ``text`` itself, in order, without the whitespace around it; empty for blank text."""
    masked = _MASKED.sub(lambda m: "x" * len(m.group()), text)
    masked = masked.replace("\r", " ").replace("\n", " ")
    spans, cursor = [], 0
    for piece in _SEGMENTER.segment(masked):
        piece = piece.strip()
        if piece:  # pysbd (clean=False) returns pieces of its input, in order
            start = masked.index(piece, cursor)
            spans.append((start, start + len(piece)))
            cursor = start + len(piece)
    return spans
