"""Datasets: a corpus, labelled queries, and the judgements that relate them.

Two shapes, one interface:
- ``MarkdownDataset``: a folder of markdown documents + a question file (or folder of them)
  labelled by quote, section or document (``golden.py``); judged per *chunk* through the span
  rule of ``relevance.py`` (so labels hold at any chunking). The Brindle handbook is one.
- ``BeirDataset``: any BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``);
  judged per *document*: the chunk ranking is collapsed to documents before scoring.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ragexp.data.beir import (
    BeirFormatError,
    read_corpus,
    read_qrels,
    read_queries,
    warn_unknown_queries,
)
from ragexp.data.golden import KIND_NAME, golden_files, load_corpus, load_golden
from ragexp.data.readers import label, markdown_files, shown
from ragexp.data.relevance import span_qrels, why_unjudged
from ragexp.data.units import UNITS, check_unit, unit_chunks
from ragexp.errors import InvalidValue, listed
from ragexp.records import OVERALL, UNANSWERABLE, Chunk, Document, Qrels, Query
from ragexp.session import Session

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
    """Markdown documents under ``corpus_dir`` and the questions in ``questions``: a ``.jsonl``
    file or a folder of them, or a list of such (``[golden/, generated.jsonl]``: hand-written and
    generated side by side, told apart by each question's ``source``). Raises ``FileNotFoundError`` for a missing folder or file and
    ``golden.GoldenError`` listing every bad question line."""

    corpus_dir: str = field(default="corpus", metadata={
        "path": "dir", "hint": "the folder of your markdown documents"})
    # a file or folder, or a list of them (hand-written + generated)
    questions: str | list[str] = field(default="golden", metadata={
        "path": "any", "hint": "your labelled questions: a .jsonl file or a folder of them, or "
                               "a list of them"})
    # one experiment per corpus
    name: str = field(default="markdown", metadata={
        "interpolate": "markdown-${ragexp.folder_name:${.corpus_dir}}"})
    unit: str = field(default="chunk", metadata={"choices": UNITS})  # the scoring unit
    _docs: dict[str, Document] = field(default_factory=dict, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        check_unit(self.unit)
        if not isinstance(self.questions, str):  # a list (Hydra passes a ListConfig)
            self.questions = [str(p) for p in self.questions]
        paths = [self.questions] if isinstance(self.questions, str) else self.questions
        try:
            key = (str(Path(self.corpus_dir).resolve()),
                   tuple(str(Path(p).resolve()) for p in paths),
                   tuple(sorted(self.fingerprint().items())))
        except Exception:  # a missing file or folder: reading reports it, as it always has
            key = None
        # the last dataset read in this session (frozen records), keyed by its folders and the
        # hashes of every file in them: edit a file and it is read again
        read = Session.current().datasets
        if key is None or key not in read:  # a sweep's jobs read the same files: parse once
            docs = load_corpus(self.corpus_dir)
            read.clear()
            read[key] = docs, load_golden(self.questions, docs)
        docs, queries = read[key]
        self._docs, self._queries = dict(docs), list(queries)

    def documents(self) -> list[Document]:
        return list(self._docs.values())

    def queries(self) -> list[Query]:
        return list(self._queries)

    def qrels(self, chunks: list[Chunk]) -> Qrels:
        """``{qid: {unit id: 1}}`` by the span rule (``relevance``), at ``dataset.unit``: a unit
        is judged on its chunks' source text merged (``units.unit_chunks``), not lifted from its
        chunks' judgements. Raises ``InvalidValue`` naming the questions no chunk, or no unit,
        is relevant to, and why (``why_unjudged``)."""
        by_id = {q.qid: q for q in self._queries}
        qrels = span_qrels(self._queries, chunks)
        empty = sorted(q for q, rel in qrels.items() if not rel)
        if empty:
            raise InvalidValue(f"{len(empty)} answerable question(s) have no relevant chunk under "
                               f"this chunking ({listed(empty, 5)}): "
                               + " | ".join(why_unjudged(by_id[q], chunks) for q in empty[:3]))
        if self.unit == "chunk":
            return qrels
        units = unit_chunks(chunks, self.unit)
        qrels = span_qrels(self._queries, units)
        empty = sorted(q for q, rel in qrels.items() if not rel)
        if empty:
            raise InvalidValue(f"{len(empty)} answerable question(s) have no relevant "
                               f"{self.unit} at dataset.unit={self.unit} ({listed(empty, 5)})"
                               f": " + " | ".join(why_unjudged(by_id[q], units, self.unit)
                                                   for q in empty[:3]))
        return qrels

    def fingerprint(self) -> dict[str, str]:
        root = Path(self.corpus_dir)
        if isinstance(self.questions, str):
            files = golden_files(Path(self.questions))
            groot = Path(self.questions) if Path(self.questions).is_dir() else files[0].parent
        else:  # several: names relative to the folder that holds them all
            files = golden_files(self.questions)
            groot = Path(os.path.commonpath([f.resolve().parent for f in files]))
            files = [f.resolve() for f in files]
        return {"corpus_hash": _hash_files(markdown_files(root), root),
                "golden_hash": _hash_files(files, groot)}


@dataclass
class BeirDataset:
    """A BEIR folder. ``kind_field`` (dotted path into a query's JSON, e.g. ``metadata.kind``)
    names its kind; a query is unanswerable when ``unanswerable_field`` holds
    ``unanswerable_value`` (e.g. ``metadata.answerable`` = ``false``) or its kind is
    ``unanswerable``: it is kept without judgements and feeds the abstain curve. A query with
    neither judgements nor the marker is reported and left out. Raises ``BeirFormatError``
    naming file and line, or the query, on bad input."""

    LEADING: ClassVar[tuple[str, ...]] = ("path", "name")  # first in the config, as before

    path: str = field(default="", metadata={
        "path": "dir", "hint": "a BEIR-format folder (corpus.jsonl, queries.jsonl, qrels/)"})
    split: str = "test"  # qrels/<split>.tsv (validation's rule beir_files_exist)
    # one experiment per BEIR folder
    name: str = field(default="beir", metadata={
        "interpolate": "beir-${ragexp.folder_name:${.path}}"})
    # BEIR judges documents; nothing finer can be scored
    unit: str = field(default="document", metadata={"choices": ("document",)})
    kind_field: str | None = "metadata.kind"  # dotted path into a query's JSON
    unanswerable_field: str | None = None  # e.g. metadata.answerable
    unanswerable_value: Any = False  # the value there that marks a query unanswerable
    _docs: list[Document] = field(default_factory=list, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)
    _qrels: Qrels = field(default_factory=dict, init=False, repr=False)
    _fingerprint: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    # passages are plain text: a markdown chunker's losses are warned of (pipeline.read_corpus)
    plain_text: ClassVar[bool] = True

    def __post_init__(self) -> None:
        root = Path(self.path)
        if self.unit != "document":
            raise InvalidValue(f"dataset.unit={self.unit!r}: a BEIR dataset is judged per document, "
                               f"so it is scored per document (dataset.unit=document)")
        if not self.path or not root.is_dir():
            raise BeirFormatError(f"dataset.path={shown(self.path)}", None, "is not a folder; "
                                  "pass dataset.path=DIR pointing at a BEIR-format dataset")
        self._docs = read_corpus(root / "corpus.jsonl")
        qrels_path = root / "qrels" / f"{self.split}.tsv"
        self._qrels = read_qrels(qrels_path, {d.doc_id for d in self._docs})
        queries = read_queries(root / "queries.jsonl")
        warn_unknown_queries(self._qrels, {r["_id"] for r in queries}, qrels_path)
        kinds = {r["_id"]: self._kind(r) for r in queries}
        judged_una = [q for q, k in kinds.items() if k == UNANSWERABLE
                      and any(g > 0 for g in self._qrels.get(q, {}).values())]
        if judged_una:
            raise BeirFormatError(root / "queries.jsonl", None, f"{len(judged_una)} query(ies) "
                                  f"marked unanswerable have relevant documents in "
                                  f"qrels/{self.split}.tsv "
                                  f"({listed(map(label, judged_una), 5)}): fix the marker or "
                                  f"the qrels")
        self._queries = [Query(r["_id"], str(r["text"]), kinds[r["_id"]]) for r in queries
                         if r["_id"] in self._qrels or kinds[r["_id"]] == UNANSWERABLE]
        _report_judgements([r for r in queries if kinds[r["_id"]] != UNANSWERABLE], self._qrels,
                           self.split, len(queries), len(self._queries))
        if not any(q.answerable for q in self._queries):
            raise BeirFormatError(qrels_path, None, "no query of queries.jsonl has judgements here "
                                  "(no query has judgements)")
        judged = [q.qid for q in self._queries if q.answerable]
        if not any(g > 0 for q in judged for g in self._qrels[q].values()):
            raise BeirFormatError(qrels_path, None, f"no document is relevant to any query: "
                                  f"every judgement of the {len(judged)} judged query(ies) has "
                                  f"grade 0 or below, so every run would score 0 on every "
                                  f"measure (a grade above 0 marks a relevant document): check "
                                  f"the score column, or pick another file with dataset.split")

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
            raise BeirFormatError(Path(self.path) / "queries.jsonl", None,
                                  f"query {shown(row['_id'])}: {self.kind_field} {shown(kind)} "
                                  f"is not a kind name (1-40 letters, digits, '_' or '-')")
        if str(kind).casefold() == OVERALL:
            raise BeirFormatError(Path(self.path) / "queries.jsonl", None,
                                  f"query {shown(row['_id'])}: {self.kind_field} {shown(kind)} "
                                  f"is the name of the group of every question (the "
                                  f"'{OVERALL}' rows of compare, gate and the sweep's page): "
                                  f"name the kind otherwise, or set dataset.kind_field=null")
        return str(kind)

    def fingerprint(self) -> dict[str, str]:
        """Hashes of the files' bytes, computed once per dataset object (a job asks for it
        twice: for its identity and for its stage keys)."""
        if not self._fingerprint:
            root = Path(self.path)
            self._fingerprint = {
                "corpus_hash": _hash_files([root / "corpus.jsonl"], root),
                "golden_hash": _hash_files([root / "queries.jsonl",
                                            root / "qrels" / f"{self.split}.tsv"], root)}
        return dict(self._fingerprint)


def _report_judgements(queries: list[dict], qrels: Qrels, split: str, in_file: int,
                       kept: int) -> None:
    """Say which queries are averaged (trec_eval's rule): one with no judgements at all is left
    out; one judged with nothing relevant (every grade 0) counts, with 0 on every measure.
    ``queries`` are the answerable ones (not marked unanswerable), ``in_file`` every query of
    queries.jsonl, ``kept`` the questions the run loads (what its ``scoring N of M`` line
    counts)."""
    unjudged = [r["_id"] for r in queries if r["_id"] not in qrels]
    if unjudged:
        log.warning("%d of the %d answerable queries (of %d in queries.jsonl) have no judgements "
                    "in split %r and are left out of the questions and of every mean, leaving "
                    "%d questions (unanswerable ones included): %s", len(unjudged), len(queries),
                    in_file, split, kept, listed(unjudged, 5))
    nothing = [r["_id"] for r in queries
               if r["_id"] in qrels and not any(g > 0 for g in qrels[r["_id"]].values())]
    if nothing:
        log.warning("%d of %d queries are judged but have no relevant document (every grade "
                    "0) in split %r; they count in every mean with 0 (trec_eval's rule): %s",
                    len(nothing), len(queries), split, listed(nothing, 5))


_ABSENT = object()


def _field(row: dict, dotted: str):
    """``row["metadata"]["kind"]`` for ``"metadata.kind"``; a sentinel when any part is absent."""
    value = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value
