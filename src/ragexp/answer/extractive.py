"""``answer=extractive`` (the default): sentences copied from the retrieved chunks, no model.

After :func:`ragexp.answer.base.refuse_early`, each sentence of the top ``n_chunks`` chunks is
scored by the idf-weighted share of the question's terms it holds,
``sum_{t in Q∩S} idf(t) / sum_{t in Q} idf(t)``; of those scoring at least ``min_overlap`` the
best ``max_sentences`` are kept, ranked by that score halved (``QUANTITY_MISSING``) for a
sentence without a digit when the question asks for a quantity (``how long``, ``how many``,
``what size``, ...: the expected answer type of TREC QA systems, Moldovan et al., ACL 2000),
each tagged ``[n]`` for its chunk (a sentence that overlapping chunks both hold is kept once,
for the first), and passed through the shared citation checker
(:func:`ragexp.answer.base.finish`).

Sentences are read as text, not as markdown source (``text.markdown.body_lines``): a sentence
is shown with its inline markup rendered (``**14 days**`` -> ``14 days``, backticks gone), a
table row as its cells' text. Table rows, headings, HTML and code lines are answer sentences
only when the question asks for them (:func:`asks_for`): when it names an identifier the line
holds (``BD-2110``, ``dead_letter_retention``, ``--ttl``, a backticked name) or asks for a
command, code, a table or a column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ragexp import settings
from ragexp.answer.base import (Answer, AnswerInput, Coverage, body, finish, refuse_early,
                                sources_for)
from ragexp.text import markdown
from ragexp.text.analysis import tokenize, word_count
from ragexp.text.sentences import sentence_spans

QUANTITY_MISSING = 0.5  # score factor of a sentence without a digit, for a quantity question
# A name a question can point at: a backticked span, words joined by "_" or ".", letters mixed
# with digits (BD-2110, ARM64), a command-line flag.
_IDENTIFIER = re.compile(r"`([^`]+)`|\b([A-Za-z][\w-]*(?:[_.][\w-]+)+)"
                         r"|\b((?=[\w-]*[A-Za-z])(?=[\w-]*\d)[\w-]{2,})|(--[\w-]+)")
# Questions whose answer is a quantity (the expected answer type of TREC QA systems: Moldovan et
# al., "The structure and performance of an open-domain question answering system", ACL 2000).
_QUANTITY = re.compile(r"\bhow\s+(?:long|many|much|often|big|large|old|far|soon|fast|frequently)\b"
                       r"|\bwhat\s+(?:size|age|port|percentage|rate|interval|timeout|number)\b",
                       re.I)
_ASKS = {"code": re.compile(r"\b(?:commands?|snippet|syntax|code)\b", re.I),
         "table": re.compile(r"\b(?:table|column|row|codes?|list)s?\b", re.I)}


def asks_for(question: str, kind: str, line: str) -> bool:
    """Whether a question asks for a non-prose line (``kind`` ``table``, ``code``, ``html`` or
    ``heading``): it names an identifier that occurs in ``line`` (case-insensitive, as a whole
    word), or asks for a command (code) or a table (a table row: a table, column or row, a code
    such as an error code, or a list: "List the error codes")."""
    if kind in _ASKS and _ASKS[kind].search(question):
        return True
    for m in _IDENTIFIER.finditer(question):
        name = next(g for g in m.groups() if g)
        if re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", line, re.I):
            return True
    return False


@dataclass(frozen=True)
class ExtractiveAnswerer:
    """The answer step's settings, as config (``answer.*``): they trade answer rate against
    refusals and citation precision, so they are swept like any other stage.

    Raises ``InvalidValue`` (a ValueError) for ``n_chunks``/``max_sentences`` < 1 or
    ``min_overlap`` or ``min_support`` outside [0, 1].
    """

    n_chunks: int = field(default=3, metadata={"ge": 1})
    max_sentences: int = field(default=2, metadata={"ge": 1})
    min_overlap: float = field(default=0.3, metadata={"ge": 0, "le": 1})
    min_support: float = field(default=0.6, metadata={"ge": 0, "le": 1})
    name: str = "extractive"

    def __post_init__(self) -> None:
        settings.check(self, "answer")

    def answer(self, inputs: Sequence[AnswerInput], coverage: Coverage,
               progress: bool = False) -> list[Answer]:
        return [self.answer_one(inp, coverage) for inp in inputs]

    def answer_one(self, inp: AnswerInput, coverage: Coverage) -> Answer:
        sources = sources_for(inp, self.n_chunks)
        early = refuse_early(inp, sources)
        if early is not None:
            return early
        q_terms = set(tokenize(inp.question))
        quantity = bool(_QUANTITY.search(inp.question))
        candidates = []
        for src, chunk in zip(sources, inp.retrieved):
            header, previous = "", "prose"
            for rank, (kind, line) in enumerate(markdown.body_lines(body(chunk))):
                if kind == "table" and previous != "table":
                    header = markdown.row_text(line)
                previous = kind
                if kind != "prose" and not asks_for(inp.question, kind, line):
                    continue
                if kind in ("prose", "heading"):
                    plain = markdown.plain(line)  # cut as the sentence chunker cuts
                    shown = [plain[start:end] for start, end in sentence_spans(plain)]
                else:
                    shown = [markdown.row_text(line) if kind == "table" else line.strip()]
                # a row is read with its table's header and section heading: "which error code
                # means X" is covered by the row of X under "Error codes | code | meaning"
                context = set(tokenize(f"{chunk.heading} {header}")) if kind == "table" else set()
                for sentence in shown:
                    score = coverage(q_terms, set(tokenize(sentence)) | context)
                    if score >= self.min_overlap and word_count(sentence) >= 3:
                        if quantity and not any(ch.isdigit() for ch in sentence):
                            score *= QUANTITY_MISSING
                        candidates.append((score, -src.n, -rank, sentence))
        # a sentence in two overlapping chunks is one sentence: shown once, cited by the first
        picked: dict[str, str] = {}
        for _, n, _, sentence in sorted(candidates, reverse=True):
            if len(picked) < self.max_sentences:
                picked.setdefault(sentence, f"{sentence} [{-n}]")
        return finish(inp, list(picked.values()), sources, coverage, self.min_support,
                      "no retrieved sentence covers enough of the question, or none kept a "
                      "valid citation")
