"""Readers for the three files of a BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and
``qrels/<split>.tsv``.

They accept what BEIR's ``GenericDataLoader`` and ir_datasets accept: UTF-8 with or without a
byte-order mark, any line ending, blank lines, JSON integers as ids (``1`` is ``"1"``), extra
fields, a missing or null ``title``; qrels with or without the ``query-id corpus-id score``
header, and TREC's four-column ``qid iter docid grade`` lines (trec_eval's reader). A qrels line
is split on tabs as ir_datasets does (no CSV quoting: an id may hold a ``"``), or on whitespace
when it holds no tab.

They refuse, naming file and line (see ``readers.py``), what those loaders would read into a
different dataset than the file's author meant: an id given twice (BEIR keeps the last copy
silently; ragexp would index both and score one), a pair judged twice with different grades,
ids that are not strings or integers, text that is not a string.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Iterable, Iterator

from ragexp.data.readers import (
    ONE_PER_LINE,
    InputError,
    decode,
    duplicates_message,
    lines,
    parse_json,
    shown,
    string_id,
)
from ragexp.errors import listed, path_problem
from ragexp.records import Document, Qrels
from ragexp.session import Session

log = logging.getLogger(__name__)
_INT = re.compile(r"[+-]?[0-9]+")
QRELS_HEADER_IDS = {"query-id", "query_id", "queryid", "qid", "query", "topic", "topic_id"}


class BeirFormatError(InputError):
    """A BEIR folder or file ragexp cannot read as its author meant."""


def _records(path: Path, required: tuple[str, ...],
             text: str | None = None) -> Iterator[tuple[int, dict]]:
    """``(line number, JSON object)`` per record of ``path`` (``text``: its text, already read),
    parsed one line at a time. Raises ``BeirFormatError`` naming file and line."""
    if text is None and (problem := path_problem(path, "file")):
        raise BeirFormatError(path, None, f"{problem} (a BEIR folder needs corpus.jsonl, "
                              "queries.jsonl and qrels/<split>.tsv)")
    empty = True
    try:
        for lineno, line in lines(path, text):
            row = parse_json(line, path, lineno)
            if not isinstance(row, dict):
                raise BeirFormatError(path, lineno, f"expected a JSON object, got "
                                      f"{type(row).__name__}"
                                      f"{ONE_PER_LINE if isinstance(row, list) else ''}")
            missing = [k for k in required if k not in row]
            if missing:
                raise BeirFormatError(path, lineno, f"missing field(s) {', '.join(missing)}")
            empty = False
            yield lineno, row
    except BeirFormatError:
        raise
    except InputError as exc:
        raise BeirFormatError(exc.file, exc.line, exc.message) from None
    if empty:
        raise BeirFormatError(path, None, "no records (the file is empty)")


def _text(row: dict, key: str, path: Path, lineno: int, optional: bool = False) -> str:
    value = row.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise BeirFormatError(path, lineno, f"{key!r} must be a string"
                              + (" or null" if optional else "") + f", got {shown(value)}")
    return value


def _unique(rows: Iterable[tuple[int, dict]], path: Path) -> Iterator[tuple[int, str, dict]]:
    """``(line number, string id, row)`` per row, as they come; once all have come, raises
    ``BeirFormatError`` naming every line of every id given more than once."""
    first: dict[str, int] = {}
    again: dict[str, list[int]] = {}
    for lineno, row in rows:
        try:
            rid = string_id(row["_id"], path, lineno)
        except InputError as exc:
            raise BeirFormatError(exc.file, exc.line, exc.message) from None
        if first.setdefault(rid, lineno) != lineno:
            again.setdefault(rid, [first[rid]]).append(lineno)
        yield lineno, rid, row
    message = duplicates_message(dict(sorted(again.items(), key=lambda kv: kv[1][0])), "_id")
    if message:
        raise BeirFormatError(path, None, message + ": each record needs its own id")


def read_corpus(path: Path) -> list[Document]:
    """``corpus.jsonl``: ``{"_id", "title" (optional, may be null), "text"}`` per line, in file
    order. Raises ``BeirFormatError`` naming file and line.

    The last corpus read in this session is kept with the sha256 of its bytes
    (``Session.corpora``): reading a file with the same bytes again (the next job of a sweep)
    returns it without parsing."""
    try:
        data = path.read_bytes()
    except OSError:
        data = None  # _records says what is wrong with the path
    digest = None if data is None else hashlib.sha256(data).hexdigest()
    key = str(path.resolve())
    last = Session.current().corpora
    held = last.get(key)
    if digest is not None and held is not None and held[0] == digest:
        return list(held[1])
    text = None if data is None else decode(data, path)
    del data  # parsed one line at a time from the text: the bytes are not needed again
    rows = _unique(_records(path, ("_id", "text"), text), path)
    docs = [Document(rid, _text(row, "title", path, n, optional=True), _text(row, "text", path, n))
            for n, rid, row in rows]
    del text
    last.clear()
    if digest is not None:
        last[key] = (digest, docs)
    return list(docs)


def read_queries(path: Path) -> list[dict]:
    """``queries.jsonl``: each line's JSON object in file order, its ``_id`` made a string and
    its ``text`` checked to be one (other fields as given, for kind and answerability fields).
    Raises ``BeirFormatError`` naming file and line."""
    rows = _unique(_records(path, ("_id", "text")), path)
    return [{**row, "_id": rid, "text": _text(row, "text", path, n)} for n, rid, row in rows]


def _qrels_fields(row: list[str]) -> list[str] | None:
    """``[qid, docid, grade]`` from a BEIR (3 tab-separated) or TREC (4 columns) line."""
    fields = [f.strip() for f in row]
    if len(fields) == 1:
        fields = fields[0].split()
    if len(fields) == 3:
        return fields
    if len(fields) == 4:
        return [fields[0], fields[2], fields[3]]
    return None


def read_qrels(path: Path, doc_ids: set[str]) -> Qrels:
    """``qrels/<split>.tsv``: every judgement ``{query_id: {doc_id: grade}}``, grade 0 and
    negative grades included (what counts as relevant is the caller's rule).

    Raises ``BeirFormatError`` naming file and line for a line that is neither BEIR's
    ``query-id<TAB>corpus-id<TAB>score`` nor TREC's ``qid iter docid grade``, a grade that is not
    an integer, a corpus-id missing from the corpus, and a pair judged twice with different
    grades (an identical repeat is accepted)."""
    if not path.is_file():
        raise BeirFormatError(path, None, "qrels file not found (check dataset.split)")
    qrels: Qrels = {}
    where: dict[tuple[str, str], int] = {}
    try:
        numbered = list(lines(path))
    except InputError as exc:
        raise BeirFormatError(exc.file, exc.line, exc.message) from None
    for index, (lineno, line) in enumerate(numbered):
        row = line.split("\t")
        fields = _qrels_fields(row)
        if fields is None:
            raise BeirFormatError(path, lineno, f"expected 3 tab-separated columns (query-id, "
                                  f"corpus-id, score) or 4 TREC columns (qid iter docid grade), "
                                  f"got {len(row)}")
        qid, did, score = fields
        if index == 0 and qid.lower() in QRELS_HEADER_IDS and not _is_int(score):
            continue
        if not _is_int(score):
            raise BeirFormatError(path, lineno, f"score {shown(score)} is not an integer")
        if not qid or not did:
            raise BeirFormatError(path, lineno, "empty query-id or corpus-id")
        if did not in doc_ids:
            raise BeirFormatError(path, lineno, f"corpus-id {shown(did)} is not in corpus.jsonl")
        grade = int(score)
        first = where.setdefault((qid, did), lineno)
        if first != lineno and qrels[qid][did] != grade:
            raise BeirFormatError(path, lineno, f"({shown(qid)}, {shown(did)}) judged "
                                  f"{grade} here and {qrels[qid][did]} at line {first}")
        qrels.setdefault(qid, {})[did] = grade
    return qrels


def _is_int(text: str) -> bool:
    """ASCII decimal digits with an optional sign, as trec_eval's ``atol`` reads them (Python's
    ``int`` would also take ``1_000`` and non-ASCII digits)."""
    return _INT.fullmatch(text) is not None


def warn_unknown_queries(qrels: Qrels, query_ids: set[str], path: Path) -> list[str]:
    """Log a warning naming how many query-ids of the qrels are not in queries.jsonl, and the
    first few; return them all (sorted)."""
    unknown = sorted(set(qrels) - query_ids)
    if unknown:
        log.warning("%s: %d query-id(s) are not in queries.jsonl and are ignored: %s", path,
                    len(unknown), listed((shown(q) for q in unknown), 5))
    return unknown
