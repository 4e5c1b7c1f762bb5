"""The checks a generated question passes before it is written; each failure is a drop reason
counted in the run's summary. Nothing that ``ragexp questions check`` would refuse gets through:
the check's own rules decide (``data.golden``: ``resolve_evidence``, a quote found exactly once,
whitespace-folded, in the document's text and not within or across a heading; ``kind_problem``;
``label_problems``; ``semantic_shared``), each refusal under the check's reason name. Before them,
every identical copy of a question's evidence is labelled (``Filters.copies``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Sequence

from ragexp.data import golden
from ragexp.records import UNANSWERABLE, Document
from ragexp.text import markdown
from ragexp.text.analysis import content_words, normalize_ws, word_count

NEAR_IDENTICAL = 0.8  # Jaccard of content words at or above which two questions are one


def leaks(question: str, answer: str, quotes: Sequence[str]) -> bool:
    """True when the question gives its answer away: the quote's distinctive words (the content
    words the answer takes from the quote) are all in the question, and there is at least one."""
    distinctive = content_words(answer) & content_words(" ".join(quotes))
    return bool(distinctive) and distinctive <= content_words(question)


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


@dataclass
class Filters:
    """The checks, with what earlier questions of the file hold (spans and question words) for
    the duplicate check. ``check_leak`` is off for generators whose questions are the passage's
    own words by design (known-item queries). Word counts as ``text.analysis.word_count``."""

    docs: dict[str, Document]
    kinds: tuple[str, ...]
    min_words: int = 2
    max_words: int = 40
    check_leak: bool = True
    _spans: set[tuple] = field(default_factory=set, init=False, repr=False)
    _questions: list[set[str]] = field(default_factory=list, init=False, repr=False)
    _corpus: tuple[str, list[int], list[str]] | None = field(default=None, init=False,
                                                               repr=False)

    def copies(self, rec: dict) -> dict:
        """``rec`` with an evidence item ``{"doc", "quote"}`` added, after its own, for every
        other document whose text (front matter aside) holds one of its quotes verbatim,
        whitespace-folded as ``data.golden.find_quote`` matches it; documents in id order. A
        retriever that returns the copy found the answer as surely as one that returns the
        original: a question labelled in one of them only scores it 0 (a footer repeated on
        every page, labelled in one). A copy found twice in its document is then dropped by
        :meth:`problem` (``quote_ambiguous``), as the original would be."""
        added = []
        for ev in rec["evidence"]:
            if "quote" not in ev:
                continue
            labelled = {e["doc"] for e in rec["evidence"] if e.get("quote") == ev["quote"]}
            added += [{"doc": d, "quote": ev["quote"]} for d in self._holding(ev["quote"])
                      if d not in labelled and {"doc": d, "quote": ev["quote"]} not in added]
        return {**rec, "evidence": [*rec["evidence"], *added]} if added else rec

    def _holding(self, quote: str) -> list[str]:
        """Ids of the documents whose text after the front matter holds ``quote``
        (whitespace-folded), sorted: one search of every document's folded text, joined by a
        newline (which no folded text holds)."""
        if self._corpus is None:
            ids = sorted(self.docs)
            texts = [normalize_ws(self.docs[d].text[markdown.text_start(self.docs[d].text):])[0]
                     for d in ids]
            starts, at = [], 0
            for t in texts:
                starts.append(at)
                at += len(t) + 1
            self._corpus = ("\n".join(texts), starts, ids)
        joined, starts, ids = self._corpus
        needle = normalize_ws(quote)[0]
        found: set[str] = set()
        at = joined.find(needle) if needle else -1
        while at != -1:
            found.add(ids[bisect_right(starts, at) - 1])
            at = joined.find(needle, at + 1)
        return sorted(found)

    def problem(self, rec: dict) -> str | None:
        """The drop reason for record ``rec`` (``question``, ``kind``, ``answer``,
        ``evidence``), or None when it may be written (then it is remembered as written).
        Evidence that ``questions check`` refuses drops the record under the check's reason
        (``golden.EVIDENCE_REASONS``: ``quote_not_found``, ``quote_in_heading``, ...), as do
        a kind and evidence that disagree (``golden.label_problems``: ``no_evidence``, ...)."""
        question, kind, evidence = rec["question"], rec["kind"], rec["evidence"]
        if kind not in self.kinds or golden.kind_problem(kind):
            return "kind_not_asked"
        n_words = word_count(question)
        if n_words < self.min_words:
            return "too_short"
        if n_words > self.max_words:
            return "too_long"
        spans = []
        for ev in evidence:
            found = golden.resolve_evidence(ev, self.docs)
            if found.span is None:
                return found.reason
            spans.append((found.span.doc_id, found.span.start, found.span.end))
        quotes = [ev["quote"] for ev in evidence if "quote" in ev]
        if wrong := golden.label_problems(kind, evidence, rec["answer"]):
            return wrong[0][0]
        if self.check_leak and kind != UNANSWERABLE and leaks(question, rec["answer"], quotes):
            return "answer_leaked"
        if kind == "semantic" and len(golden.semantic_shared(question, quotes)) > \
                golden.MAX_SEMANTIC_OVERLAP:
            return "semantic_overlap"
        key, words = tuple(sorted(spans)), content_words(question)
        if (key and key in self._spans) or any(jaccard(words, w) >= NEAR_IDENTICAL
                                               for w in self._questions):
            return "duplicate"
        self.remember(rec)
        return None

    def remember(self, rec: dict) -> None:
        """Hold a written record's spans and words (records already in a resumed file too)."""
        found = (golden.resolve_evidence(ev, self.docs).span for ev in rec.get("evidence") or [])
        spans = [(s.doc_id, s.start, s.end) for s in found if s is not None]
        if spans:
            self._spans.add(tuple(sorted(spans)))
        self._questions.append(content_words(rec["question"]))
