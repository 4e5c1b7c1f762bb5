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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ragexp.beir import (BeirFormatError, read_corpus, read_qrels, read_queries,
                         warn_unknown_queries)
from ragexp.golden import golden_files, load_corpus, load_golden
from ragexp.readers import shown
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
            raise BeirFormatError(f"dataset.path={shown(self.path)}", None, "is not a folder; "
                                  "pass dataset.path=DIR pointing at a BEIR-format dataset")
        self._docs = read_corpus(root / "corpus.jsonl")
        qrels_path = root / "qrels" / f"{self.split}.tsv"
        self._qrels = read_qrels(qrels_path, {d.doc_id for d in self._docs})
        queries = read_queries(root / "queries.jsonl")
        warn_unknown_queries(self._qrels, {qid for qid, _, _ in queries}, qrels_path)
        _report_judgements([qid for qid, _, _ in queries], self._qrels, self.split)
        self._queries = [Query(qid, text, _kind(meta)) for qid, text, meta in queries
                         if qid in self._qrels]
        if not self._queries:
            raise BeirFormatError(qrels_path, None, "no query of queries.jsonl has judgements "
                                  "here (no query has judgements)")

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


def _report_judgements(query_ids: list[str], qrels: Qrels, split: str) -> None:
    """Say which queries are averaged (trec_eval's rule): one with no judgements at all is left
    out; one judged with nothing relevant (every grade 0) counts, with 0 on every measure."""
    unjudged = [q for q in query_ids if q not in qrels]
    if unjudged:
        log.warning("%d of %d queries have no judgements in split %r and are left out of every "
                    "mean: %s", len(unjudged), len(query_ids), split,
                    ", ".join(shown(q) for q in unjudged[:5]))
    nothing = [q for q in query_ids if q in qrels and not any(g > 0 for g in qrels[q].values())]
    if nothing:
        log.warning("%d of %d queries are judged but have no relevant document (every grade "
                    "0) in split %r; they count in every mean with 0 (trec_eval's rule): %s",
                    len(nothing), len(query_ids), split, ", ".join(shown(q) for q in nothing[:5]))


def _kind(metadata: dict) -> str:
    kind = metadata.get("kind")
    return str(kind) if kind else "general"
