"""Datasets: a corpus, labelled queries, and the judgements that relate them.

Two shapes, one interface:
- ``MarkdownDataset``: a folder of markdown documents + a question file (or folder of them)
  labelled by quote, section or document (``golden.py``); judged per *chunk* through the span
  rule of ``relevance.py`` (so labels hold at any chunking). The Brindle handbook is one.
- ``BeirDataset``: any BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``);
  judged per *document*: the chunk ranking is collapsed to documents before scoring.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragexp.golden import KIND_NAME, golden_files, load_corpus, load_golden
from ragexp.records import UNANSWERABLE, Chunk, Document, Qrels, Query
from ragexp.relevance import span_qrels
from ragexp.units import check_unit, lift_qrels, unit_of

log = logging.getLogger(__name__)


class Dataset(Protocol):
    name: str
    unit: str  # what judgements and metrics speak of: "chunk", "section" or "document"

    def documents(self) -> list[Document]: ...
    def queries(self) -> list[Query]: ...
    def qrels(self, chunks: list[Chunk]) -> Qrels: ...
    def fingerprint(self) -> dict[str, str]: ...


def _hash_files(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


@dataclass
class MarkdownDataset:
    """Markdown documents under ``corpus_dir`` and the questions in ``questions`` (a ``.jsonl``
    file or a folder of them). Raises ``FileNotFoundError`` for a missing folder or file and
    ``golden.GoldenError`` listing every bad question line."""

    corpus_dir: str = "corpus"
    questions: str = "golden"
    name: str = "markdown"
    unit: str = "chunk"
    _docs: dict[str, Document] = field(default_factory=dict, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        check_unit(self.unit)
        self._docs = load_corpus(self.corpus_dir)
        self._queries = load_golden(self.questions, self._docs)

    def documents(self) -> list[Document]:
        return list(self._docs.values())

    def queries(self) -> list[Query]:
        return list(self._queries)

    def qrels(self, chunks: list[Chunk]) -> Qrels:
        qrels = span_qrels(self._queries, chunks)
        empty = sorted(q for q, rel in qrels.items() if not rel)
        if empty:
            raise ValueError(f"{len(empty)} answerable question(s) have no relevant chunk under "
                             f"this chunking ({', '.join(empty[:5])}); the chunker lost source "
                             f"offsets or the evidence spans are outside every chunk")
        return lift_qrels(qrels, unit_of(chunks, self.unit))

    def fingerprint(self) -> dict[str, str]:
        root = Path(self.corpus_dir)
        files = golden_files(Path(self.questions))
        groot = Path(self.questions) if Path(self.questions).is_dir() else files[0].parent
        return {"corpus_hash": _hash_files(list(root.rglob("*.md")), root),
                "golden_hash": _hash_files(files, groot)}


class BeirFormatError(ValueError):
    pass


def _read_jsonl(path: Path, required: tuple[str, ...]) -> list[dict]:
    if not path.is_file():
        raise BeirFormatError(f"{path}: file not found (a BEIR folder needs corpus.jsonl, "
                              f"queries.jsonl and qrels/<split>.tsv)")
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BeirFormatError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise BeirFormatError(f"{path}:{lineno}: expected a JSON object")
            missing = [k for k in required if k not in row]
            if missing:
                raise BeirFormatError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
            row["_id"] = str(row["_id"])
            rows.append(row)
    return rows


@dataclass
class BeirDataset:
    """A BEIR folder. ``kind_field`` (dotted path into a query's JSON, e.g. ``metadata.kind``)
    names its kind; a query is unanswerable when ``unanswerable_field`` holds
    ``unanswerable_value`` (e.g. ``metadata.answerable`` = ``false``) or its kind is
    ``unanswerable``: it is kept without judgements and feeds the abstain curve. A query with
    neither judgements nor the marker is reported and left out. Raises ``BeirFormatError``
    naming file and line, or the query, on bad input."""

    path: str = ""
    split: str = "test"
    name: str = "beir"
    unit: str = "document"  # BEIR judges documents; nothing finer can be scored
    kind_field: str | None = "metadata.kind"
    unanswerable_field: str | None = None
    unanswerable_value: Any = False
    _docs: list[Document] = field(default_factory=list, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)
    _qrels: Qrels = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        root = Path(self.path)
        if self.unit != "document":
            raise ValueError(f"dataset.unit={self.unit!r}: a BEIR dataset is judged per document, "
                             f"so it is scored per document (dataset.unit=document)")
        if not self.path or not root.is_dir():
            raise BeirFormatError(f"dataset.path={self.path!r} is not a folder; pass "
                                  f"dataset.path=DIR pointing at a BEIR-format dataset")
        corpus = _read_jsonl(root / "corpus.jsonl", ("_id", "text"))
        self._docs = [Document(r["_id"], str(r.get("title") or ""), str(r["text"]))
                      for r in corpus]
        doc_ids = {d.doc_id for d in self._docs}
        self._qrels = self._read_qrels(root / "qrels" / f"{self.split}.tsv", doc_ids)
        queries = _read_jsonl(root / "queries.jsonl", ("_id", "text"))
        kinds = {r["_id"]: self._kind(r) for r in queries}
        judged_una = [q for q, k in kinds.items() if k == UNANSWERABLE
                      and any(g > 0 for g in self._qrels.get(q, {}).values())]
        if judged_una:
            raise BeirFormatError(f"{root / 'queries.jsonl'}: {len(judged_una)} query(ies) marked "
                                  f"unanswerable have relevant documents in qrels/{self.split}.tsv "
                                  f"({', '.join(judged_una[:5])}): fix the marker or the qrels")
        _report_judgements([r for r in queries if kinds[r["_id"]] != UNANSWERABLE], self._qrels,
                           self.split)
        self._queries = [Query(r["_id"], str(r["text"]), kinds[r["_id"]]) for r in queries
                         if r["_id"] in self._qrels or kinds[r["_id"]] == UNANSWERABLE]
        if not any(q.answerable for q in self._queries):
            raise BeirFormatError(f"{root}: no query has judgements in qrels/{self.split}.tsv")

    @staticmethod
    def _read_qrels(path: Path, doc_ids: set[str]) -> Qrels:
        if not path.is_file():
            raise BeirFormatError(f"{path}: qrels file not found (check dataset.split)")
        qrels: Qrels = {}
        with path.open(encoding="utf-8", newline="") as fh:
            for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
                if not row or (lineno == 1 and row[0] == "query-id"):
                    continue
                if len(row) != 3:
                    raise BeirFormatError(f"{path}:{lineno}: expected 3 tab-separated columns "
                                          f"(query-id, corpus-id, score), got {len(row)}")
                qid, did, score = row
                try:
                    grade = int(score)
                except ValueError:
                    raise BeirFormatError(f"{path}:{lineno}: score {score!r} is not an integer")
                if did not in doc_ids:
                    raise BeirFormatError(f"{path}:{lineno}: corpus-id {did!r} is not in "
                                          f"corpus.jsonl")
                qrels.setdefault(qid, {})[did] = grade  # grade 0 too: judged, not relevant
        return qrels

    def documents(self) -> list[Document]:
        return list(self._docs)

    def queries(self) -> list[Query]:
        return list(self._queries)

    def qrels(self, chunks: list[Chunk]) -> Qrels:
        return {q.qid: dict(self._qrels[q.qid]) for q in self._queries if q.answerable}

    def _kind(self, row: dict) -> str:
        if self.unanswerable_field and _field(row, self.unanswerable_field) == \
                self.unanswerable_value:
            return UNANSWERABLE
        kind = _field(row, self.kind_field) if self.kind_field else _ABSENT
        if kind is _ABSENT or kind is None or kind == "":
            return "general"
        if not KIND_NAME.fullmatch(str(kind)):
            raise BeirFormatError(f"{Path(self.path) / 'queries.jsonl'}: query {row['_id']!r}: "
                                  f"{self.kind_field} {str(kind)[:60]!r} is not a kind name "
                                  f"(1-40 letters, digits, '_' or '-')")
        return str(kind)

    def fingerprint(self) -> dict[str, str]:
        root = Path(self.path)
        return {"corpus_hash": _hash_files([root / "corpus.jsonl"], root),
                "golden_hash": _hash_files([root / "queries.jsonl",
                                            root / "qrels" / f"{self.split}.tsv"], root)}


def _report_judgements(queries: list[dict], qrels: Qrels, split: str) -> None:
    """Say which queries are averaged (trec_eval's rule): one with no judgements at all is left
    out; one judged with nothing relevant (every grade 0) counts, with 0 on every measure."""
    unjudged = [r["_id"] for r in queries if r["_id"] not in qrels]
    if unjudged:
        log.warning("%d of %d queries have no judgements in split %r and are left out of every "
                    "mean: %s", len(unjudged), len(queries), split, ", ".join(unjudged[:5]))
    nothing = [r["_id"] for r in queries
               if r["_id"] in qrels and not any(g > 0 for g in qrels[r["_id"]].values())]
    if nothing:
        log.warning("%d of %d queries are judged but have no relevant document (every grade "
                    "0) in split %r; they count in every mean with 0 (trec_eval's rule): %s",
                    len(nothing), len(queries), split, ", ".join(nothing[:5]))


_ABSENT = object()


def _field(row: dict, dotted: str):
    """``row["metadata"]["kind"]`` for ``"metadata.kind"``; a sentinel when any part is absent."""
    value = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value
