"""TREC run and qrels files, both ways: the format trec_eval, ir_measures, ranx and PyTerrier read.

Run (6 whitespace-separated columns, one line per retrieved item)::

    query_id  Q0  item_id  rank  score  tag

qrels (4 columns)::

    query_id  0  item_id  grade

Ordering follows trec_eval: the rank column is informational; items are ordered by score
descending, ties by item id descending (``records.ordered``), so a file read back scores the same
in ragexp and in trec_eval. Ids are strings and stay strings ("007" is not "7").
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Iterable

from ragexp.data import files, readers
from ragexp.errors import InvalidValue, listed, path_problem
from ragexp.records import Qrels, Ranking, ordered

_WS = re.compile(r"\s")
log = logging.getLogger(__name__)


class TrecFormatError(readers.DataError):
    """A TREC file that trec_eval could not read as meant; the message names file and line."""


def _check_id(value: str, what: str) -> str:
    if not value or _WS.search(value):
        raise InvalidValue(f"{what} {readers.shown(value)} is empty or holds whitespace: TREC files are "
                           f"whitespace-separated, so such an id cannot be written")
    return value


def format_run(ranking: Ranking, tag: str = "ragexp") -> str:
    """A ranking ``{qid: {item_id: score}}`` as TREC run text, queries in sorted order, items in
    trec_eval order with ranks 1..n. Raises ``ValueError`` on ids or a tag holding whitespace."""
    _check_id(tag, "run tag")
    lines = []
    for qid in sorted(ranking):
        _check_id(qid, "query id")
        for rank, item in enumerate(ordered(ranking[qid]), start=1):
            lines.append(f"{qid} Q0 {_check_id(item, 'item id')} {rank} "
                         f"{ranking[qid][item]!r} {tag}\n")
    return "".join(lines)


def format_qrels(qrels: Qrels) -> str:
    """Judgements ``{qid: {item_id: grade}}`` as TREC qrels text (grade-0 judgements kept: they
    tell trec_eval a query was judged)."""
    lines = []
    for qid in sorted(qrels):
        _check_id(qid, "query id")
        for item in sorted(qrels[qid]):
            lines.append(f"{qid} 0 {_check_id(item, 'item id')} {int(qrels[qid][item])}\n")
    return "".join(lines)


def write_run(ranking: Ranking, path: str | Path, tag: str = "ragexp") -> Path:
    """Write ``format_run`` to ``path`` (whole file or nothing: written beside it, then renamed)."""
    return _write(Path(path), format_run(ranking, tag))


def write_qrels(qrels: Qrels, path: str | Path) -> Path:
    """Write ``format_qrels`` to ``path`` atomically."""
    return _write(Path(path), format_qrels(qrels))


def _write(path: Path, text: str) -> Path:
    return files.write_atomic(path, text)


def _lines(path: Path) -> Iterable[tuple[int, list[str]]]:
    """Whitespace-split fields of each non-blank line, read as every ragexp reader reads text
    (``readers.py``: UTF-8, BOM and CRLF accepted, undecodable bytes named by offset)."""
    if problem := path_problem(path, "file"):
        raise TrecFormatError(f"{path}: {problem}")
    try:
        numbered = list(readers.lines(path))
    except readers.InputError as exc:
        raise TrecFormatError(str(exc)) from None
    for lineno, line in numbered:
        yield lineno, line.split()


def read_run(path: str | Path) -> Ranking:
    """Read a TREC run file into ``{qid: {item_id: score}}``.

    Raises ``TrecFormatError`` naming file and line for: a line without 6 columns, a score that
    is not a finite number, and an item listed twice for one query (trec_eval would silently
    keep one of them, so the file does not say what its author meant; where the two lines' run
    tags differ, the message says the file holds two runs).

    A file of several run tags is read as one run, every line merged, as trec_eval reads it, with
    a warning naming each tag and its first line: two systems' runs in one file look alike."""
    path = Path(path)
    run: Ranking = {}
    first_line: dict[tuple[str, str], tuple[int, str]] = {}  # and the line's tag
    tags: dict[str, int] = {}  # each tag's first line
    for lineno, cols in _lines(path):
        if len(cols) != 6:
            raise TrecFormatError(f"{path}:{lineno}: expected 6 columns (query_id Q0 item_id rank "
                                  f"score tag), got {len(cols)}")
        qid, _, item, _, score, tag = cols
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise TrecFormatError(f"{path}:{lineno}: score {score[:40]!r} is not a finite number")
        tags.setdefault(tag, lineno)
        seen, seen_tag = first_line.setdefault((qid, item), (lineno, tag))
        if seen != lineno:
            two = (f"; the file holds two runs, tag {readers.shown(seen_tag)} from line "
                   f"{tags[seen_tag]} and {readers.shown(tag)} from line {tags[tag]}: one file "
                   f"per run" if seen_tag != tag else "")
            raise TrecFormatError(f"{path}:{lineno}: item {item[:80]!r} listed twice for query "
                                  f"{qid[:80]!r} (first at line {seen}){two}")
        run.setdefault(qid, {})[item] = value
    if not run:
        raise TrecFormatError(f"{path}: no run lines")
    if len(tags) > 1:
        log.warning("%s holds %d run tags (%s): read as one run, every line merged, as trec_eval "
                    "reads it; two systems' runs belong in a file each", path, len(tags),
                    listed((f"{readers.shown(t)} from line {at}" for t, at in tags.items()), 5))
    return run


def first_line_of(path: str | Path, items: set[str]) -> tuple[int, str] | None:
    """``(line number, item)`` of the first run line of ``path`` whose item id is one of
    ``items``, None when none is: for a message about items already read (``read_run``
    keeps no line numbers)."""
    for lineno, cols in _lines(Path(path)):
        if len(cols) == 6 and cols[2] in items:
            return lineno, cols[2]
    return None


def read_qrels(path: str | Path) -> Qrels:
    """Read TREC qrels into ``{qid: {item_id: grade}}``; ``TrecFormatError`` names file and line
    for a line without 4 columns, a grade that is not an integer, or a pair judged twice."""
    path = Path(path)
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    for lineno, cols in _lines(path):
        if len(cols) != 4:
            raise TrecFormatError(f"{path}:{lineno}: expected 4 columns (query_id 0 item_id "
                                  f"grade), got {len(cols)}")
        qid, _, item, grade = cols
        try:
            value = int(grade)
        except ValueError:
            raise TrecFormatError(f"{path}:{lineno}: grade {grade[:40]!r} is not an "
                                  f"integer") from None
        seen = first_line.setdefault((qid, item), lineno)
        if seen != lineno:
            raise TrecFormatError(f"{path}:{lineno}: ({qid[:80]}, {item[:80]}) judged twice "
                                  f"(first at line {seen})")
        qrels.setdefault(qid, {})[item] = value
    return qrels
