"""The labelled golden set: load it, resolve its evidence to document offsets, validate it.

Format: ``golden/*.jsonl``, one question per line::

    {"id": "a-01", "kind": "factual", "question": "...", "answer": "...",
     "evidence": [{"doc": "concepts/scheduling.md", "quote": "verbatim text"}]}

A quote is matched against its document with whitespace runs collapsed (so it may span
hard-wrapped lines) and must occur exactly once; it resolves to a character ``Span`` of the raw
file. Relevance is later decided from those spans, never from chunk ids (see ``relevance.py``).

``python -m ragexp.golden check`` prints counts per kind and exits 1, naming file and line, on any
problem.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ragexp.readers import DataError, InputError, lines, parse_json, read_text, shown
from ragexp.records import KINDS, Document, Query, Span
from ragexp.text import content_words, normalize_ws

MAX_SEMANTIC_OVERLAP = 1


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class GoldenError(DataError):
    """The golden set does not match the corpus or is malformed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"golden set has {len(problems)} problem(s):\n{shown}{more}")


def load_corpus(corpus_dir: str | Path) -> dict[str, Document]:
    """Every ``*.md`` under ``corpus_dir``, keyed by its path relative to it (posix), read as
    ``readers.read_text`` reads (UTF-8, byte-order mark dropped, line ends made ``\n``).

    Raises ``FileNotFoundError`` for a missing or empty folder and ``readers.InputError``
    (file, line, byte offset) for a file that is not UTF-8 text."""
    root = Path(corpus_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus folder not found: {root}")
    docs: dict[str, Document] = {}
    for path in sorted(root.rglob("*.md")):
        text = read_text(path)
        doc_id = path.relative_to(root).as_posix()
        title = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), doc_id)
        docs[doc_id] = Document(doc_id=doc_id, title=title, text=text)
    if not docs:
        raise FileNotFoundError(f"no markdown documents under {root}")
    return docs


def golden_files(golden: str | Path | list) -> list[Path]:
    paths = golden if isinstance(golden, (list, tuple)) else [golden]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"golden set not found: {p}")
    if not files:
        raise FileNotFoundError(f"no *.jsonl golden files in {', '.join(map(str, paths))}")
    return files


def find_quote(doc: Document, quote: str) -> list[Span]:
    """All whitespace-insensitive occurrences of ``quote`` in ``doc`` as raw-text spans."""
    norm_doc, offsets = normalize_ws(doc.text)
    norm_quote, _ = normalize_ws(quote)
    if not norm_quote:
        return []
    spans, start = [], norm_doc.find(norm_quote)
    while start != -1:
        end = start + len(norm_quote) - 1
        spans.append(Span(doc.doc_id, offsets[start], offsets[end] + 1))
        start = norm_doc.find(norm_quote, start + 1)
    return spans


def _check_record(rec: object, where: tuple[str, int], docs: dict[str, Document],
                  problems: list[Problem]) -> Query | None:
    file, line = where

    def bad(msg: str) -> None:
        problems.append(Problem(file, line, msg))

    if not isinstance(rec, dict):
        bad("expected a JSON object")
        return None
    qid, kind, text = rec.get("id"), rec.get("kind"), rec.get("question")
    if not isinstance(qid, str) or not qid.strip():
        bad(f"'id' must be a non-empty string, got {shown(qid)}")
        return None
    name = qid if len(qid) <= 60 and qid.isprintable() else shown(qid)
    if not isinstance(text, str) or not text.strip():
        bad(f"{name}: missing or empty 'question'")
    if kind not in KINDS:
        bad(f"{name}: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
        return None
    evidence = rec.get("evidence") or []
    if not isinstance(evidence, list):
        bad(f"{name}: 'evidence' must be a list")
        return None
    if kind == "unanswerable" and evidence:
        bad(f"{name}: unanswerable question has evidence")
    if kind != "unanswerable" and not evidence:
        bad(f"{name}: answerable question ({kind}) has no evidence")
    if kind != "unanswerable" and not str(rec.get("answer", "")).strip():
        bad(f"{name}: answerable question has no reference answer")
    spans: list[Span] = []
    for ev in evidence:
        if not isinstance(ev, dict) or not isinstance(ev.get("doc"), str) \
                or not isinstance(ev.get("quote"), str):
            bad(f"{name}: each evidence item needs string 'doc' and 'quote'")
            continue
        doc = docs.get(ev["doc"])
        if doc is None:
            bad(f"{name}: document not found in corpus: {shown(ev['doc'])}")
            continue
        found = find_quote(doc, ev["quote"])
        if not found:
            bad(f"{name}: quote not found in {shown(ev['doc'])}: {shown(ev['quote'])}")
        elif len(found) > 1:
            bad(f"{name}: quote is ambiguous, found {len(found)} times in {shown(ev['doc'])}: "
                f"{shown(ev['quote'])}")
        else:
            spans.append(found[0])
    if kind == "semantic" and isinstance(text, str):
        quotes = " ".join(ev.get("quote", "") for ev in evidence if isinstance(ev, dict))
        shared = content_words(text) & content_words(quotes)
        if len(shared) > MAX_SEMANTIC_OVERLAP:
            bad(f"{name}: semantic question shares {len(shared)} content words with its evidence "
                f"(max {MAX_SEMANTIC_OVERLAP}): {', '.join(sorted(shared))}")
    return Query(qid=qid, text=text or "", kind=kind, answer=str(rec.get("answer", "")),
                 evidence=tuple(spans))


def check_golden(golden, docs: dict[str, Document]) -> tuple[list[Query], list[Problem]]:
    """Parse and validate; return the questions and every problem found (never stops early)."""
    problems: list[Problem] = []
    queries: list[Query] = []
    first_seen: dict[str, tuple[str, int]] = {}
    for path in golden_files(golden):
        try:
            numbered = list(lines(path))
        except InputError as exc:
            problems.append(Problem(exc.file, exc.line or 0, exc.message))
            continue
        for lineno, raw in numbered:
            try:
                rec = parse_json(raw, path, lineno)
            except InputError as exc:
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
    return queries, problems


def load_golden(golden, docs: dict[str, Document]) -> list[Query]:
    """Validated questions; raises :class:`GoldenError` listing every problem."""
    queries, problems = check_golden(golden, docs)
    if problems:
        raise GoldenError(problems)
    return queries


def kind_counts(queries: list[Query]) -> dict[str, int]:
    counts = Counter(q.kind for q in queries)
    return {kind: counts.get(kind, 0) for kind in KINDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragexp.golden",
                                     description="Validate a golden set against its corpus.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="validate and print counts per kind")
    check.add_argument("--corpus", default="corpus")
    check.add_argument("--golden", nargs="+", default=["golden"])
    check.add_argument("--readme", help="also write the counts into this file's golden block")
    args = parser.parse_args(argv)
    try:
        docs = load_corpus(args.corpus)
        queries, problems = check_golden(args.golden, docs)
    except (FileNotFoundError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = kind_counts(queries)
    lines = [f"{len(docs)} documents, {len(queries)} questions", "",
             "| kind | questions |", "|---|---|",
             *(f"| {kind} | {n} |" for kind, n in counts.items()), f"| total | {len(queries)} |"]
    print("\n".join(lines))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return 1
    if args.readme:
        from ragexp.readme import replace_block

        replace_block(args.readme, "golden", "Printed by `make check-golden`:\n\n"
                      + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
