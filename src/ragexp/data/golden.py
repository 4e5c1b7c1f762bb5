"""The labelled golden set: load it, resolve its evidence to document offsets, validate it.

Format: ``golden/*.jsonl``, one question per line::

    {"id": "a-01", "kind": "factual", "question": "...", "answer": "...",
     "evidence": [{"doc": "concepts/scheduling.md", "quote": "verbatim text"}]}

Blank lines and lines starting with ``//`` (comments) are skipped. ``kind`` is any name but
``all``, the group of every question (default ``general``); ``unanswerable`` marks a question the
corpus does not answer (no evidence).
``source`` names who wrote a question (default ``hand``; ``ragexp questions generate`` writes
``generated``): measures are logged per source when a dataset holds several; ``model`` names the
model that wrote a generated one (a run warns when that model is also one it answers, judges or
embeds with: ``generate.circularity``). Evidence comes at three levels, mixable in one file:

- ``{"doc": PATH, "quote": TEXT}``: matched with whitespace runs collapsed (so it may span
  hard-wrapped lines); must occur exactly once, and not within a heading (a chunk's context,
  never its source text: label the section instead);
- ``{"doc": PATH, "section": "Install > Docker"}``: a heading path, or its unambiguous tail
  (``"Docker"``); the section owns its subsections, so a heading-only section is labellable;
- ``{"doc": PATH}``: the whole document.

Each resolves to a character ``Span`` of the document as read (``readers.read_text``: no
byte-order mark, line ends made ``\\n``); relevance is later decided from those
spans, never from chunk ids (see ``relevance.py``).

``python -m ragexp.data.golden check`` prints counts per kind and exits 1, naming file and line,
on any problem, and on a set no run could score (no question, or no answerable one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import yaml

from ragexp.data import readers, shipped, split
from ragexp.data.readers import label, shown
from ragexp.errors import InvalidValue, MissingInput, counted, listed, path_problem
from ragexp.records import HAND, OVERALL, UNANSWERABLE, Document, Query, Span
from ragexp.session import Session
from ragexp.text import markdown
from ragexp.text.analysis import content_words, normalize_ws
from ragexp.text.sections import find_section, outline

log = logging.getLogger(__name__)

MAX_SEMANTIC_OVERLAP = 1
DEFAULT_KIND = "general"
KIND_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:  # line 0: a problem of the whole set, not of one line
        return f"{self.file}:{self.line}: {self.message}" if self.line else \
            f"{self.file}: {self.message}"


class GoldenError(readers.DataError):
    """The golden set does not match the corpus or is malformed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"golden set has {counted(len(problems), 'problem')}:\n{shown}{more}")


def front_matter_meta(text: str, path: str | Path) -> dict:
    """A markdown document's YAML front matter (``markdown.front_matter``) as a dict, ``{}``
    when it has none. Raises ``readers.InputError`` (file, line) for front matter that is not
    valid YAML, is not a mapping, or whose ``title`` is not a single value."""
    found = markdown.front_matter(text)
    if found is None:
        return {}
    try:
        meta = yaml.safe_load(found.content)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = found.first_line + 1 + (mark.line if mark is not None else 0)
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise readers.InputError(path, line, f"front matter is not valid YAML ({problem}); "
                                 f"fix it, or remove the '---' lines around it") from None
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise readers.InputError(path, found.first_line, f"front matter must be a YAML mapping "
                                 f"(key: value lines), got a {type(meta).__name__}")
    if isinstance(meta.get("title"), (dict, list)):
        raise readers.InputError(path, found.first_line, "front matter 'title' must be a "
                                 "single value, not a list or mapping")
    return meta


def document_title(doc_id: str, text: str, meta: dict) -> str:
    """The front matter's ``title``, else the first level-1 heading (ATX or setext, as
    ``markdown.blocks`` reads it), else ``doc_id``."""
    if meta.get("title") not in (None, ""):
        return " ".join(str(meta["title"]).split())
    return next((b.title for b in markdown.blocks(text) if b.kind == "heading" and b.level == 1
                 and b.title), doc_id)


def load_corpus(corpus_dir: str | Path) -> dict[str, Document]:
    """Every markdown file (``readers.markdown_files``: ``*.md``, ``*.markdown``, any case) under
    ``corpus_dir``, keyed by its path relative to it (posix), read as
    ``readers.read_text`` reads (UTF-8, byte-order mark dropped, line ends made ``\n``), its
    front matter kept as metadata (``Document.meta``) and its title from ``document_title``.

    Raises ``FileNotFoundError`` for a missing or empty folder and ``readers.InputError``
    (file, line, byte offset) for a file that is not UTF-8 text or whose name is not UTF-8, and
    for front matter that cannot be read (``front_matter_meta``)."""
    root = Path(corpus_dir)
    if problem := path_problem(root, "dir"):
        raise MissingInput(f"corpus folder {root}: {problem}")
    docs: dict[str, Document] = {}
    documents, hidden = readers.markdown_tree(root)
    for path in documents:
        doc_id = path.relative_to(root).as_posix()
        if readers.has_surrogate(doc_id) >= 0:  # bytes of the name that are not UTF-8
            raise readers.InputError(shown(str(path), 200), None, "the file name is not UTF-8; "
                                     "rename the file (its name is the document id)")
        text = readers.read_text(path)
        meta = front_matter_meta(text, path)
        docs[doc_id] = Document(doc_id, document_title(doc_id, text, meta), text, meta)
    if hidden:
        log.info("%s: %d hidden markdown file(s) not read (a name starting with '.': %s)", root,
                 len(hidden), listed((p.relative_to(root).as_posix() for p in hidden), 3))
    if not docs:
        raise MissingInput(f"no markdown documents under {root}")
    if same := same_text(docs):
        log.warning("%s: %d group(s) of documents hold the same text (front matter aside): %s. "
                    "A question labelled in one is not credited for retrieving another, and "
                    "their tied scores are ordered by document id (as trec_eval orders ties): "
                    "remove the copies, or label the question in each", root, len(same),
                    listed((" = ".join(map(label, ids)) for ids in same), 5, "; "))
    return docs


def same_text(docs: dict[str, Document]) -> list[list[str]]:
    """Groups (two or more ids, sorted; groups sorted by first id) of documents whose text after
    the front matter (``markdown.text_start``) is the same, whitespace at its ends aside; empty
    documents are not grouped (``load_golden`` names a question on one)."""
    by_text: dict[bytes, list[str]] = {}
    for doc_id, doc in docs.items():
        body = doc.text[markdown.text_start(doc.text):].strip()
        if body:
            by_text.setdefault(hashlib.sha256(body.encode()).digest(), []).append(doc_id)
    return sorted(sorted(ids) for ids in by_text.values() if len(ids) > 1)


def _once(key: tuple) -> bool:
    """True the first time ``key`` is seen in this session (``Session.said``): a warning about
    a file is said once, though a run reads its question files four times (a ``.json`` file's,
    four lines)."""
    said = Session.current().said
    if key in said:
        return False
    said.add(key)
    return True


def golden_files(golden: str | Path | list) -> list[Path]:
    """The question files of ``golden`` (a file or folder, or a list of them): a folder gives
    its files named ``*.jsonl`` in any case (``A.JSONL`` from a Windows tool was skipped without
    a word, its questions missing from every mean), sorted, not those of its subfolders; its
    ``*.json`` files are named in a warning (once a process), not read (one was skipped
    without a word). Raises ``MissingInput`` for a path that is not there or a folder without
    one, ``InvalidValue`` for a file given twice."""
    paths = golden if isinstance(golden, (list, tuple)) else [golden]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            entries = sorted(f for f in p.iterdir() if f.is_file())
            files.extend(f for f in entries if f.suffix.lower() == ".jsonl")
            json_files = [f.name for f in entries if f.suffix.lower() == ".json"]
            if json_files and _once(("json", str(p.resolve()), tuple(json_files))):
                log.warning("%s: %s not read: questions are JSON Lines files named *.jsonl "
                            "(one JSON object a line); rename one that holds questions",
                            p, listed(json_files, 3))
        elif p.is_file():
            files.append(p)
        else:
            raise MissingInput(f"golden set not found: {p}")
    if not files:
        raise MissingInput(f"no *.jsonl golden files in {', '.join(map(str, paths))}")
    seen: dict[Path, Path] = {}
    for f in files:  # every question would be its own duplicate, "first at" itself
        first = seen.setdefault(f.resolve(), f)
        if first is not f:
            raise InvalidValue(f"the question file {f} is given twice (dataset.questions lists "
                               f"it, or a folder holding it, more than once): list it once")
    return files


@lru_cache(maxsize=128)
def _normalized(text: str) -> tuple[str, list[int]]:
    """``normalize_ws(text)``, once per document text per process (read only): every quote of
    a golden set, and every job of a sweep, searched the whole document normalised anew."""
    return normalize_ws(text)


def find_quote(doc: Document, quote: str) -> list[Span]:
    """All whitespace-insensitive occurrences of ``quote`` in ``doc`` as spans of its text."""
    norm_doc, offsets = _normalized(doc.text)
    norm_quote, _ = normalize_ws(quote)
    if not norm_quote:
        return []
    spans, start = [], norm_doc.find(norm_quote)
    while start != -1:
        end = start + len(norm_quote) - 1
        spans.append(Span(doc.doc_id, offsets[start], offsets[end] + 1))
        start = norm_doc.find(norm_quote, start + 1)
    return spans


EVIDENCE_REASONS = ("evidence_malformed", "doc_not_found", "doc_empty", "quote_in_front_matter",
                    "quote_not_found", "quote_ambiguous", "quote_in_heading",
                    "quote_across_heading", "section_not_found", "section_ambiguous",
                    "section_empty")


@dataclass(frozen=True)
class Resolved:
    """One evidence item resolved: the ``span`` it labels, or ``None`` with why: ``reason`` (one
    of ``EVIDENCE_REASONS``, the drop reason ``ragexp questions generate`` counts) and
    ``message`` (what ``ragexp questions check`` says of it, after the question's id)."""

    span: Span | None
    reason: str = ""
    message: str = ""


def resolve_evidence(ev: object, docs: dict[str, Document]) -> Resolved:
    """One evidence item -> the character span it labels, or why it labels none: the one rule
    ``questions check`` applies and ``questions generate`` filters by (``generate.filters``), so
    a file the generator wrote passes the check.

    Three levels: ``{"doc", "quote"}`` (the quote's one occurrence: ``resolve_quote``),
    ``{"doc", "section"}`` (the text the heading owns, subsections included: ``sections.py``)
    and ``{"doc"}`` (the whole document). All three are spans, so one relevance rule judges
    them at any chunking."""
    problem = _evidence_shape_problem(ev)
    if problem:
        return Resolved(None, "evidence_malformed", problem)
    doc = docs.get(ev["doc"])
    if doc is None:
        suffix = Path(str(ev["doc"])).suffix
        kinds = ", ".join(readers.MARKDOWN_SUFFIXES)
        hint = (f" (the corpus reads only markdown files, {kinds}; a {suffix} file is not read: "
                f"rename it to .md)"
                if suffix and not readers.is_markdown(Path(str(ev["doc"]))) else "")
        if readers.is_hidden(Path(str(ev["doc"]))):
            hint += (" (a file or folder whose name starts with '.' is hidden, not a document "
                     "of the corpus: rename it)")
        return Resolved(None, "doc_not_found",
                        f"document not found in corpus: {label(ev['doc'])}{hint}"
                        f"{readers.look_alikes([str(ev['doc'])], docs)}")
    if "quote" in ev:
        return resolve_quote(doc, ev["quote"], ev["doc"])
    if "section" in ev:
        return _section_span(doc, ev["doc"], ev["section"])
    start = markdown.text_start(doc.text)
    if not doc.text[start:].strip():
        return Resolved(None, "doc_empty",
                        f"document {label(ev['doc'])} is empty" if not start else
                        f"document {label(ev['doc'])} has no text: it holds only front matter "
                        f"(metadata, which no chunk holds)")
    return Resolved(Span(doc.doc_id, 0, len(doc.text)))


def _resolve_evidence(qid: str, ev: object, docs: dict[str, Document], bad) -> Span | None:
    """``resolve_evidence``'s span, or None after reporting why (``bad``, after ``qid``)."""
    found = resolve_evidence(ev, docs)
    if found.span is None:
        bad(f"{qid}: {found.message}")
    return found.span


def _evidence_shape_problem(ev: object) -> str | None:
    """What is wrong with an evidence item's fields (a string ``doc``, at most one of a
    non-empty ``quote`` or ``section``, nothing else), or None when nothing is."""
    if not isinstance(ev, dict) or not isinstance(ev.get("doc"), str):
        return "each evidence item needs a string 'doc' (and optionally a 'quote' or a 'section')"
    extra = sorted(set(ev) - {"doc", "quote", "section"})
    if extra:
        return (f"unknown evidence field(s) {listed(map(shown, extra), 5)} (expected "
                f"'doc' with an optional 'quote' or 'section')")
    if "quote" in ev and "section" in ev:
        return f"evidence names both a quote and a section in {label(ev['doc'])}: give one"
    for key in ("quote", "section"):
        if key in ev and (not isinstance(ev[key], str) or not ev[key].strip()):
            return f"evidence '{key}' must be a non-empty string"
    return None


def resolve_quote(doc: Document, quote: str, name: str | None = None) -> Resolved:
    """The span of ``quote``'s one occurrence in ``doc`` (named ``name`` by the evidence,
    default its id), or why it labels none: found nowhere (``quote_not_found``), only in the
    front matter (metadata, not text: ``quote_in_front_matter``), more than once
    (``quote_ambiguous``), within a heading (``quote_in_heading``: the handbook's faq.md
    heading ``How do I rotate TLS certificates without downtime?``, which an ``llm`` question
    quoted and ``questions check`` then refused) or across one with no section holding half of
    it (``quote_across_heading``)."""
    name = doc.doc_id if name is None else name
    start = markdown.text_start(doc.text)
    everywhere = find_quote(doc, quote)
    found = [s for s in everywhere if s.start >= start]
    if everywhere and not found:
        return Resolved(None, "quote_in_front_matter",
                        f"quote lies in the front matter of {label(name)} (metadata, which no "
                        f"chunk holds), not in its text: {shown(quote)}")
    if not found:
        return Resolved(None, "quote_not_found", f"quote not found in {label(name)}: "
                        f"{shown(quote)}{_other_form(doc, quote)}")
    if len(found) > 1:
        return Resolved(None, "quote_ambiguous", f"quote is ambiguous, found {len(found)} times "
                        f"in {label(name)}: {shown(quote)}")
    if heading := _heading_holding(doc.text, found[0]):
        return Resolved(None, "quote_in_heading",
                        f"quote lies in the heading at line {heading.line} of {label(name)} (a "
                        f"heading is its chunks' context, not source text: no chunk but a whole "
                        f"document's holds it, so a chunking ablation could not judge it): quote "
                        f"the text under it, or label the section, {{\"doc\": "
                        f"{json.dumps(name)}, \"section\": {json.dumps(heading.title)}}}: "
                        f"{shown(quote)}")
    if heading := _heading_crossed(doc.text, found[0]):
        return Resolved(None, "quote_across_heading",
                        f"quote runs across the heading at line {heading.line} of {label(name)} "
                        f"({shown(heading.title)}) and no section holds half of it: a heading "
                        f"starts a section and its chunks, so no chunk holds the quote whole, nor "
                        f"half of it, and the run refuses the question: quote the text of one "
                        f"section: {shown(quote)}")
    return Resolved(found[0])


# characters that show as nothing: a quote copied from a rendered page lacks them, or has them;
# read as nothing (a soft hyphen inside a word) or as a space (a zero-width space between two)
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_AS_NOTHING = dict.fromkeys(map(ord, _INVISIBLE))
_AS_SPACE = dict.fromkeys(map(ord, _INVISIBLE), " ")
# typeset punctuation and its typewriter form: an editor or a rendered page turns one into the
# other (an apostrophe into U+2019, " - " into an em dash), and they print alike at a glance
_PLAIN_PUNCTUATION = str.maketrans({
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    "\u2026": "..."})


def _other_form(doc: Document, quote: str) -> str:
    """``"; the document has it ..."`` when ``quote`` is found once both it and the document
    are NFC-normalised (other code points), stripped of invisible characters (zero-width spaces
    and joiners, soft hyphens), given typewriter punctuation (curly quotes, dashes, ellipsis)
    or case folded (other case), else ``""``: such a quote prints like the text it misses, and
    a quote is matched as written (its span is the file's)."""
    def found(fold) -> bool:
        q = normalize_ws(fold(quote))[0]
        return bool(q) and q in normalize_ws(fold(doc.text))[0]

    def nfc(t: str) -> str:
        return unicodedata.normalize("NFC", t)

    if found(nfc) and (nfc(quote) != quote or nfc(doc.text) != doc.text):
        form = "NFD" if nfc(quote) != quote else "NFC"
        return (f"; the document has it in other code points (the quote's are {form}, the "
                f"document's {'NFC' if form == 'NFD' else 'NFD'}: Unicode normalisation): copy "
                f"the quote from the document")
    if found(lambda t: t.translate(_AS_NOTHING)) or found(lambda t: t.translate(_AS_SPACE)):
        return ("; the document has it with other invisible characters (zero-width spaces or "
                "joiners, soft hyphens, which print as nothing): copy the quote from the "
                "document's source, not a rendered page")
    if found(lambda t: t.translate(_PLAIN_PUNCTUATION)):
        return ("; the document has it with other punctuation (curly quotes, dashes or an "
                "ellipsis where the quote has straight quotes, hyphens or '...', or the reverse): "
                "copy the quote from the document's source, not a rendered page")
    if found(str.casefold):
        return "; the document has it in other case (a quote matches case as written)"
    return ""


def _heading_holding(text: str, span: Span) -> markdown.Block | None:
    """The heading block (ATX line, or setext text and underline) whose range holds all of
    ``span``, if any: ``markdown.blocks`` reads headings as the chunkers do. None in a document
    of headings only, whose chunks hold their headings' text (``chunking.parse_sections``)."""
    blocks = markdown.blocks(text)
    if all(b.kind == "heading" for b in blocks):
        return None
    return next((b for b in blocks if b.kind == "heading"
                 and b.start <= span.start and span.end <= b.end), None)


def _heading_crossed(text: str, span: Span) -> markdown.Block | None:
    """The first heading that begins inside ``span`` when the quote runs from one section's
    text across it into the next and no section's piece holds half of the quote (counting
    non-space characters; the headings' own text is in no piece): a chunker splits there, so
    no chunk holds such a quote whole and every chunking judges it by pieces too small to
    count (the relevance rule's half, ``data.relevance``). A quote mostly in one section stays
    that section's, as the run judges it; a quote from a heading into its own text begins in
    the heading and is kept. None in a document of headings only, whose chunks hold their
    headings' text. A trial's quote ``"Clear the hopper and restart. ### Error E-43 E-43
    means the milk"`` (pieces of 25 and 16 of its 53 characters) passed ``questions
    check`` and the run then refused its question: no chunk held half of it."""
    blocks = markdown.blocks(text)
    if all(b.kind == "heading" for b in blocks):
        return None
    crossed = [b for b in blocks if b.kind == "heading" and span.start < b.start < span.end]
    if not crossed:
        return None

    def weight(a: int, b: int) -> int:
        return sum(not c.isspace() for c in text[a:b])

    bounds = [span.start, *(x for b in crossed for x in (b.start, min(b.end, span.end))),
              span.end]
    pieces = [weight(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    return crossed[0] if 2 * max(pieces) < weight(span.start, span.end) else None


def _section_span(doc: Document, name: str, section: str) -> Resolved:
    """The span of the one section of ``doc`` (named ``name`` by the evidence) that ``section``
    names (``find_section``), or why none: found nowhere (naming the document's headings:
    ``section_not_found``), more than once (``section_ambiguous``), or with no text under its
    heading (``section_empty``)."""
    found = find_section(doc, section)
    if not found:
        headings = listed((shown(s.title) for s in outline(doc)), 8) or "none"
        return Resolved(None, "section_not_found", f"no section {shown(section, 80)} in "
                        f"{label(name)} (its headings: {headings})")
    if len(found) > 1 and len({s.title for s in found}) == 1:  # no more path to give
        lines = ", ".join(str(s.line) for s in found)
        return Resolved(None, "section_ambiguous",
                        f"section {shown(section, 80)} is ambiguous in {label(name)}: "
                        f"{len(found)} sections have the heading path {shown(found[0].title)} "
                        f"(lines {lines}), which no label can tell apart; quote the text meant "
                        f"instead ({{\"doc\": {json.dumps(name)}, \"quote\": ...}})")
    if len(found) > 1:
        where = ", ".join(f"{shown(s.title)} (line {s.line})" for s in found)
        return Resolved(None, "section_ambiguous", f"section {shown(section, 80)} is ambiguous "
                        f"in {label(name)}: {where}; give more of its heading path")
    if not doc.text[found[0].span.start:found[0].span.end].strip():
        return Resolved(None, "section_empty", f"section {found[0].title!r} of {label(name)} "
                        f"(line {found[0].line}) has no text under its heading")
    return Resolved(found[0].span)


def kind_problem(kind: object) -> str | None:
    """Why ``kind`` cannot name a kind of questions (not a name of 1-40 letters, digits, ``_``
    or ``-``; or ``all``, the group of every question), None when it can: ``questions check``
    refuses such a question, ``questions generate`` drops it (``kind_not_asked``)."""
    if not isinstance(kind, str) or not KIND_NAME.fullmatch(kind):
        return (f"kind {shown(kind)} is not a name of 1-40 letters, digits, '_' or '-' (it "
                f"becomes part of metric names such as ndcg_at_10.<kind>)")
    if kind.casefold() == OVERALL:
        return (f"kind {shown(kind)} is the name of the group of every question (the "
                f"'{OVERALL}' rows of compare, gate and the sweep's page): name the kind otherwise")
    return None


def label_problems(kind: str, evidence: list, answer: object) -> list[tuple[str, str]]:
    """``(reason, message)`` for each way a question's kind, evidence and reference answer
    disagree: an ``unanswerable`` question with evidence (``unanswerable_with_evidence``), an
    answerable one without evidence (``no_evidence``) or without a reference answer
    (``no_answer``). The rule of ``questions check`` and of ``questions generate``'s filters."""
    if kind == UNANSWERABLE:
        return [("unanswerable_with_evidence", "unanswerable question has evidence")] \
            if evidence else []
    out = []
    if not evidence:
        alike = (f"; the kind that marks a question the corpus does not answer is "
                 f"{UNANSWERABLE!r}, in lower case" if kind.casefold() == UNANSWERABLE else "")
        out.append(("no_evidence", f"answerable question ({kind}) has no evidence{alike}"))
    if not str(answer).strip():
        out.append(("no_answer", "answerable question has no reference answer"))
    return out


def source_problem(source: object) -> str | None:
    """Why ``source`` cannot name a question source, or None when it can: a name of 1-40
    letters, digits, ``_`` or ``-`` (it becomes part of metric names), not ``all`` (every
    source together). One rule for ``questions check``, ``questions generate source=`` and
    ``questions calibrate``'s set names."""
    if not isinstance(source, str) or not KIND_NAME.fullmatch(source):
        return (f"source {shown(source)} is not a name of 1-40 letters, digits, '_' or '-' "
                f"(it becomes part of metric names such as ndcg_at_10.source.<source>)")
    if source.casefold() == OVERALL:
        return (f"source {shown(source)} is the name of every source together "
                f"(objective_source={OVERALL}): name the source otherwise")
    return None


def semantic_shared(question: str, quotes: Sequence[str]) -> set[str]:
    """The content words (``text.analysis.content_words``) ``question`` shares with its
    evidence's ``quotes``: a ``semantic`` question may share at most ``MAX_SEMANTIC_OVERLAP``
    (``questions check`` refuses more, ``questions generate`` drops it)."""
    return content_words(question) & content_words(" ".join(quotes))


def _check_record(rec: object, where: tuple[str, int], docs: dict[str, Document],
                  problems: list[Problem]) -> Query | None:
    file, line = where

    def bad(msg: str) -> None:
        problems.append(Problem(file, line, msg))

    if not isinstance(rec, dict):
        bad("expected a JSON object" + (readers.ONE_PER_LINE if isinstance(rec, list) else ""))
        return None
    qid, kind, text = rec.get("id"), rec.get("kind", DEFAULT_KIND), rec.get("question")
    try:  # JSON integers are ids too (``7`` is ``"7"``), as every reader takes them
        qid = readers.string_id(qid, file, line, "'id'")
    except readers.InputError as exc:
        bad(exc.message)
        return None
    name = label(qid)
    if not isinstance(text, str) or not text.strip():
        bad(f"{name}: missing or empty 'question'")
    if wrong := kind_problem(kind):
        bad(f"{name}: {wrong}")
        return None
    source = rec.get("source", HAND)
    if wrong := source_problem(source):
        bad(f"{name}: {wrong}")
        return None
    evidence = rec.get("evidence") or []
    if not isinstance(evidence, list):
        bad(f"{name}: 'evidence' must be a list")
        return None
    for _, wrong in label_problems(kind, evidence, rec.get("answer", "")):
        bad(f"{name}: {wrong}")
    spans: list[Span] = []
    for i, ev in enumerate(evidence):
        if ev in evidence[:i]:  # the same item again: judged once, a problem of it said once
            continue
        span = _resolve_evidence(name, ev, docs, bad)
        if span is not None:
            spans.append(span)
    if kind == "semantic" and isinstance(text, str):
        shared = semantic_shared(text, [str(ev.get("quote", "")) for ev in evidence
                                        if isinstance(ev, dict)])
        if len(shared) > MAX_SEMANTIC_OVERLAP:
            bad(f"{name}: semantic question shares {len(shared)} content words with its evidence "
                f"(max {MAX_SEMANTIC_OVERLAP}): {', '.join(sorted(shared))}")
    model = rec.get("model")
    return Query(qid=qid, text=text or "", kind=kind, answer=str(rec.get("answer", "")),
                 evidence=tuple(spans), source=source,
                 model=model if isinstance(model, str) and model else None)


def check_golden(golden, docs: dict[str, Document]) -> tuple[list[Query], list[Problem]]:
    """Parse and validate; return the questions and every problem found (never stops early)."""
    problems: list[Problem] = []
    queries: list[Query] = []
    first_seen: dict[str, tuple[str, int]] = {}
    for path in golden_files(golden):
        try:
            numbered = list(readers.lines(path))
        except readers.InputError as exc:
            problems.append(Problem(exc.file, exc.line or 0, exc.message))
            continue
        for lineno, raw in numbered:
            if raw.lstrip().startswith("//"):  # a comment line
                continue
            try:
                rec = readers.parse_json(raw, path, lineno)
            except readers.InputError as exc:
                problems.append(Problem(exc.file, exc.line or 0, exc.message))
                continue
            query = _check_record(rec, (str(path), lineno), docs, problems)
            if query is None:
                continue
            if query.qid in first_seen:
                f, ln = first_seen[query.qid]
                problems.append(Problem(str(path), lineno,
                                        f"duplicate id {shown(query.qid)} (first at {f}:{ln})"))
                continue
            first_seen[query.qid] = (str(path), lineno)
            queries.append(query)
    problems.extend(_unscorable(queries, golden, problems))
    return queries, problems


def _unscorable(queries: list[Query], golden, problems: list[Problem]) -> list[Problem]:
    """A set no run could score: no question at all, or no answerable one (every measure
    averages answerable questions: ``evaluation/metrics.py``). Named against the first file;
    not reported when other problems already explain the missing questions."""
    if problems or any(q.answerable for q in queries):
        return []
    where = str(golden_files(golden)[0])
    if not queries:
        return [Problem(where, 0, "the golden set holds no question: add at least one "
                                  "answerable question (with evidence)")]
    return [Problem(where, 0, f"all {len(queries)} question(s) are unanswerable, so no run can "
                              f"score any measure: add answerable questions (with evidence)")]


def load_golden(golden, docs: dict[str, Document]) -> list[Query]:
    """Validated questions; raises :class:`GoldenError` listing every problem. Questions of the
    same text are named in a warning (``repeated``)."""
    queries, problems = check_golden(golden, docs)
    if problems:
        raise GoldenError(problems)
    if said := repeated(queries):
        log.warning("%s", said)
    return queries


def repeated(queries: Sequence[Query]) -> str:
    """``""``, or a line naming the groups of questions whose text is the same
    (``split.same_text_key``): each copy counts again in every mean, and ragexp's dev/test split
    keeps copies of one kind on one side (a copy in test confirmed what its twin chose on dev)."""
    groups: dict[str, list[str]] = {}
    for q in queries:
        groups.setdefault(split.same_text_key(q.text), []).append(q.qid)
    same = [ids for ids in groups.values() if len(ids) > 1]
    if not same:
        return ""
    shown_ = listed((listed(map(label, ids), 4, " = ") for ids in same), 5, "; ")
    return (f"{len(same)} question text(s) are asked more than once ({shown_}): each copy "
            f"counts again in every mean; ragexp's dev/test split puts copies of one kind on "
            f"one side")


def kind_counts(queries: list[Query]) -> dict[str, int]:
    """Questions per kind, kinds in order of first appearance, unanswerable last."""
    counts = Counter(q.kind for q in queries)
    return dict(sorted(counts.items(), key=lambda kv: kv[0] == UNANSWERABLE))


def counts_table(n_docs: int, queries: Sequence[Query]) -> str:
    """The counts ``ragexp questions check`` prints: documents and questions, then a markdown
    table of questions per kind (``kind_counts``) with the total."""
    lines = [f"{counted(n_docs, 'document')}, {counted(len(queries), 'question')}", "",
             "| kind | questions |", "|---|---|",
             *(f"| {kind} | {n} |" for kind, n in kind_counts(queries).items()),
             f"| total | {len(queries)} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragexp.data.golden",
                                     description="Validate a golden set against its corpus.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="validate and print counts per kind")
    check.add_argument("--corpus", help="markdown folder (default: the shipped Brindle "
                       "handbook)")
    check.add_argument("--golden", nargs="+", help="question files or folders (default: the "
                       "handbook's golden set)")
    args = parser.parse_args(argv)
    defaulted = {"--corpus": "corpus", "--golden": "golden set"}
    for key, value in (("--corpus", args.corpus), ("--golden", args.golden)):
        if value is not None:
            del defaulted[key]
    if defaulted:  # run in a folder of one's own, it passed on the handbook's files, exit 0
        print(f"note: no {' or '.join(defaulted)} given: checking the shipped Brindle "
              f"handbook's {' and '.join(defaulted.values())}; pass --corpus DIR --golden "
              f"FILE_OR_DIR to check your own", file=sys.stderr)
    args.corpus = args.corpus or shipped.path("handbook/corpus")
    args.golden = args.golden or [shipped.path("handbook/golden")]
    try:
        docs = load_corpus(args.corpus)
        queries, problems = check_golden(args.golden, docs)
    except (FileNotFoundError, readers.InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(counts_table(len(docs), queries))
    small = not problems and split.too_small(queries, "dev", split.SEED, split.TEST_SHARE)
    if said := not problems and repeated(queries):
        print(f"warning: {said}", file=sys.stderr)
    if small:
        print(f"warning: a run with the default split=auto scores ragexp's dev split: {small}",
              file=sys.stderr)
    off_dev = {} if problems or small else split.kinds_without(queries, "dev", split.SEED,
                                                                 split.TEST_SHARE)
    for kind, n in off_dev.items():
        print(f"warning: kind {kind!r} has no question on ragexp's dev split (seed {split.SEED}, "
              f"test share {split.TEST_SHARE}): its {counted(n, 'question')} "
              f"{'is' if n == 1 else 'are'} in test (each kind puts floor({split.TEST_SHARE} x "
              f"its questions + 0.5) there), so a run with the default split=auto logs no "
              f"measure of {kind!r}; add questions of it, or score every question with "
              f"split=all", file=sys.stderr)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print(f"{counted(len(problems), 'problem')} found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
