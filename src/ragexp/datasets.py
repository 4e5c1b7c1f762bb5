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
from typing import Protocol

from ragexp.golden import golden_files, load_corpus, load_golden
from ragexp.records import Chunk, Document, Qrels, Query
from ragexp.relevance import span_qrels

log = logging.getLogger(__name__)


class Dataset(Protocol):
    name: str
    level: str  # "chunk" or "doc": the unit that judgements and metrics speak of

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
    level: str = "chunk"
    _docs: dict[str, Document] = field(default_factory=dict, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
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
        return qrels

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
    path: str = ""
    split: str = "test"
    name: str = "beir"
    level: str = "doc"
    _docs: list[Document] = field(default_factory=list, init=False, repr=False)
    _queries: list[Query] = field(default_factory=list, init=False, repr=False)
    _qrels: Qrels = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        root = Path(self.path)
        if not self.path or not root.is_dir():
            raise BeirFormatError(f"dataset.path={self.path!r} is not a folder; pass "
                                  f"dataset.path=DIR pointing at a BEIR-format dataset")
        corpus = _read_jsonl(root / "corpus.jsonl", ("_id", "text"))
        self._docs = [Document(r["_id"], str(r.get("title") or ""), str(r["text"]))
                      for r in corpus]
        doc_ids = {d.doc_id for d in self._docs}
        self._qrels = self._read_qrels(root / "qrels" / f"{self.split}.tsv", doc_ids)
        queries = _read_jsonl(root / "queries.jsonl", ("_id", "text"))
        _report_judgements(queries, self._qrels, self.split)
        self._queries = [
            Query(r["_id"], str(r["text"]), _kind(r)) for r in queries if r["_id"] in self._qrels
        ]
        if not self._queries:
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
        return {q.qid: dict(self._qrels[q.qid]) for q in self._queries}

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


def _kind(row: dict) -> str:
    kind = (row.get("metadata") or {}).get("kind")
    return str(kind) if kind else "general"
