"""Vectors computed elsewhere (``embedder=precomputed``): read from a folder, checked, and served
through the same embedding cache and stage store as computed ones.

``embedder.path=DIR`` holds ``passages.npy`` (float32, one row per id) with ``passages.txt``
(one document or chunk id per line, in row order), and ``queries.npy`` with ``queries.txt``
(question ids) unless a named embedder embeds the questions (``embedder.queries=minilm``; its
dimension must match). Every check runs when the embedder is built, before any vector is used:
shapes and dtype, rows against ids, empty or duplicate ids, NaN/inf and zero rows, each error
naming the file, the row and the id; rows not L2-normalised are normalised with one warning
saying how many. Binding to a run's chunks and questions (``bind``) then checks that every
passage and question has a row and that passages.txt names no id the run does not hold;
queries.txt may hold more questions than the run scores (the other split's). Composition
checks all but the rows' contents first (``folder_problems``).

A run's passage vectors are read by chunk id (``passage_vectors``), not through the text-keyed
embedding cache, so two chunks of one text keep their own rows; a sweep's ablations read the
files once per process (``_read``) and the vectors once from the stage store. Questions are
looked up by their text (the retrievers are given texts), so two of the run's questions with
one text and different rows are refused at ``bind``; a passage looked up by text (``embed``)
whose text has two different rows is refused there.
"""

from __future__ import annotations

import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from ragexp import settings
from ragexp.data import readers
from ragexp.errors import InvalidValue, listed
from ragexp.index.embedders import Embedder, EmbedderError, EmbedderIdentity
from ragexp.records import Chunk

log = logging.getLogger(__name__)
FILES = {"passage": ("passages.npy", "passages.txt"), "query": ("queries.npy", "queries.txt")}
NORM_TOLERANCE = 1e-3  # |norm - 1| above this: a row is not L2-normalised
SHOWN = 3  # ids or rows an error names
BLOCK = 1 << 16  # rows checked at a time (bounded temporary memory)
TINY = 1e-30  # a float32 squared norm below this is recomputed in float64 (underflow)
READ = 1 << 30  # bytes per read call (Linux returns at most 2 GiB - 4 KiB per read)


class PrecomputedError(EmbedderError, InvalidValue):
    """A precomputed vector folder is malformed or does not match the run's passages or
    questions; the message names the file and the first offending rows or ids. An input the
    user gave that is refused (``InvalidValue``: the command exits 2)."""


@dataclass(frozen=True)
class VectorFile:
    """One checked pair of files: ``vectors`` (n, dim) float32 with unit rows, ``ids`` (n,)
    in row order (distinct), ``normalised`` rows that were rescaled."""

    vectors: np.ndarray
    ids: list[str]
    normalised: int

    @cached_property
    def row(self) -> dict[str, int]:
        """``{id: row}``, built when first asked: a million ids take about a second to map,
        which ``bind`` skips when the run's passages come in the file's order."""
        return dict(zip(self.ids, range(len(self.ids))))

    def rows_of(self, ids: list[str]) -> range | list[int]:
        """The row of each of ``ids`` (each must be one of the file's)."""
        return range(len(ids)) if ids == self.ids else [self.row[x] for x in ids]


def _first(items: list, n: int = SHOWN) -> str:
    return ", ".join(repr(x) for x in items[:n]) + (f" (and {len(items) - n} more)"
                                                     if len(items) > n else "")


def _read_ids(txt: str) -> tuple[list[str], bool, bool]:
    """``(ids, any blank, all distinct)`` of an id file: one id per line. Both checks run in C
    (``str.strip`` over the lines; distinctness on the ids' hashes, ``_distinct``); the
    offending lines are found only to report them. A UTF-8 byte order mark (which some
    editors and Windows tools write) is not part of the first id. Raises ``PrecomputedError``
    for a file that is not UTF-8 (UTF-16, say)."""
    try:
        ids = Path(txt).read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise PrecomputedError(f"{txt} is not UTF-8 text (byte {exc.start}: {exc.reason}): "
                               f"write one id per line in UTF-8") from None
    return ids, not all(map(str.strip, ids)), _distinct(ids)


def _distinct(ids: list[str]) -> bool:
    """Whether no id is given twice. Equal ids have equal ``hash``es, so when the sorted hashes
    hold no equal neighbours every id is distinct; only then is a ``set`` skipped, which at a
    million ids takes 2.5x as long as hashing and sorting them (distinct 64-bit hashes of a
    million ids collide with odds about 3e-8, and a collision costs only the set)."""
    hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
    hashes.sort()
    if not (hashes[1:] == hashes[:-1]).any():
        return True
    return len(set(ids)) == len(ids)


def _shape_problem(npy: str, shape: tuple, dtype: np.dtype) -> str | None:
    """What is wrong with a matrix of ``shape`` and ``dtype`` read from ``npy``, or None."""
    if len(shape) != 2 or shape[1] == 0:
        return f"{npy} has shape {tuple(shape)}; need (rows, dim)"
    if dtype != np.float32:
        return f"{npy} holds {dtype}; need float32 (np.save(path, x.astype(np.float32)))"
    return None


def _ids_problem(npy: str, rows: int, txt: str, ids: list[str], blank: bool,
                 distinct: bool) -> str | None:
    """What is wrong with the ids ``txt`` of a matrix of ``rows`` rows, or None: an empty line
    (first: a blank last line would otherwise read as one id too many), a count other than
    ``rows``, an id given twice (with its lines). Lines count from 1, rows from 0."""
    if blank:
        empty = [i + 1 for i, x in enumerate(ids) if not x.strip()]
        return f"{txt}: empty id on line {_first(empty)}"
    if len(ids) != rows:
        return (f"{npy} has {rows} rows but {txt} has {len(ids)} ids (one id per line, in row "
                f"order)")
    if not distinct:
        row: dict[str, int] = {}
        dupes = []
        for i, x in enumerate(ids):
            if row.setdefault(x, i) != i:
                dupes.append(f"{x} (lines {row[x] + 1} and {i + 1})")
        return f"{txt}: {len(dupes)} duplicate ids: {listed(dupes, SHOWN)}"
    return None


@lru_cache(maxsize=4)
def _read(npy: str, txt: str, stamp: tuple) -> VectorFile:
    """Load and check ``npy`` and its ids ``txt``; ``stamp`` (sizes, mtimes) keys the
    per-process memo, so a sweep's jobs read a folder once. The header is checked first (a
    matrix of the wrong shape or dtype is refused unread); a thread then reads the rows
    (``_fill``, which releases the GIL while it reads) while this one reads and checks the ids,
    and the rows are checked last. Errors come in that order: shape and dtype, ids, rows.
    Raises ``PrecomputedError``."""
    shape, dtype, fortran, offset = _header(npy)
    problem = _shape_problem(npy, shape, dtype)
    if problem:
        raise PrecomputedError(problem)
    vectors = np.empty(shape[::-1] if fortran else shape, dtype=np.float32)
    with ThreadPoolExecutor(max_workers=1) as pool:
        reading = pool.submit(_fill, npy, offset, vectors)
        ids, blank, distinct = _read_ids(txt)
        reading.result()
    if fortran:  # np.save wrote the transpose's rows: the same F-ordered view np.load gives
        vectors = vectors.T
    problem = _ids_problem(npy, len(vectors), txt, ids, blank, distinct)
    if problem:
        raise PrecomputedError(problem)
    normalised = 0
    for start in range(0, len(vectors), BLOCK):
        normalised += _check_block(vectors[start:start + BLOCK], start, npy, ids)
    if normalised:
        message = (f"{npy}: {normalised} of {len(vectors)} rows were not L2-normalised "
                   f"(|norm - 1| > {NORM_TOLERANCE}); normalised")
        log.warning(message)
    return VectorFile(vectors, ids, normalised)


def _fill(npy: str, offset: int, out: np.ndarray) -> None:
    """Read the matrix's bytes, from ``offset`` (past the header), into ``out`` (C-contiguous,
    the size the header declares), at most ``READ`` bytes per call: one unbuffered read per
    call, without the GIL (the same bytes ``np.load`` reads). Raises ``PrecomputedError`` for a
    file shorter than its header says. The rows are checked after, on the calling thread:
    checking each block here as it arrives measured slower (``tools/bench_embedding.py``)."""
    view = memoryview(out.reshape(-1)).cast("B")
    with open(npy, "rb", buffering=0) as fh:
        fh.seek(offset)
        done = 0
        while done < len(view):
            got = fh.readinto(view[done:done + READ])
            if not got:
                raise PrecomputedError(f"{npy} is truncated: its header declares a "
                                       f"{out.shape} float32 matrix ({len(view):,} bytes after "
                                       f"the header) but it holds {done:,}")
            done += got


def _not_npy(npy: str | Path) -> str:
    return f"{npy} is not a .npy matrix (write it with np.save)"


def _header(npy: str | Path) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """``(shape, dtype, fortran_order, offset of the data)`` of a ``.npy`` file's header
    (numpy's format: magic string, then header). Raises ``PrecomputedError`` for a file that
    is not a ``.npy`` matrix."""
    try:
        with open(npy, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(fh)
            return tuple(shape), dtype, fortran, fh.tell()
    except (OSError, ValueError) as exc:
        raise PrecomputedError(_not_npy(npy)) from exc


def matrix_header(npy: str | Path) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` a ``.npy`` file declares in its header, read without loading the
    matrix (so composition knows a precomputed folder's dimension). Raises ``PrecomputedError``
    for a file that is not a ``.npy`` matrix (numpy's format: magic string, then header)."""
    return _header(npy)[:2]


def matrix_shape(npy: str | Path) -> tuple[int, ...]:
    """The shape ``matrix_header`` reads. Raises ``PrecomputedError`` as it does."""
    return matrix_header(npy)[0]


def file_pairs(folder: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """``({mode: [npy, txt]}, missing file names)`` of a precomputed folder (``FILES``): the
    passage pair always, the query pair when either of its files is there."""
    pairs, missing = {}, []
    for mode, names in FILES.items():
        paths = [folder / n for n in names]
        present = [p.is_file() for p in paths]
        if mode == "query" and not any(present):
            continue
        if all(present):
            pairs[mode] = paths
        else:
            missing += [n for n, ok in zip(names, present) if not ok]
    return pairs, missing


def folder_problems(path: str) -> list[str]:
    """What composition can know is wrong with the folder ``embedder.path=path`` without
    loading a matrix: not a folder, a file of a pair missing (``queries.*`` may both be
    absent), a ``.npy`` header other than 2-D float32, ids other than one distinct non-empty
    id per row, ``queries.npy`` of another dimension than ``passages.npy``. Reading the ids is
    cheap (a million lines in under a second); NaN/inf and zero rows need the whole matrix
    (``check_rows``). Returns one line per problem (none for a good folder)."""
    folder = Path(path).expanduser()
    if not folder.exists():
        return [f"{path}: no such folder"]
    if not folder.is_dir():
        return [f"{path} is a file, not a folder (a folder of passages.npy, passages.txt and "
                f"queries.npy/queries.txt)"]
    pairs, missing = file_pairs(folder)
    problems, dims = [f"{path} lacks {', '.join(missing)}"] if missing else [], {}
    for mode, paths in pairs.items():
        npy, txt = map(str, paths)
        try:
            shape, dtype = matrix_header(npy)
        except PrecomputedError as exc:
            problems.append(str(exc))
            continue
        problem = (_shape_problem(npy, shape, dtype)
                   or _ids_problem(npy, shape[0], txt, *_read_ids(txt)))
        if problem:
            problems.append(problem)
        else:
            dims[mode] = shape[1]
    if len(dims) == 2 and dims["query"] != dims["passage"]:
        problems.append(f"{folder / 'queries.npy'} gives {dims['query']}-d vectors but "
                        f"passages.npy holds {dims['passage']}-d ones: both must have the same "
                        f"dimension")
    return problems


def check_rows(path: str) -> None:
    """Load and check every matrix of the folder ``path`` (``_read``, memoised: the embedder
    built later reads them from memory), so NaN/inf and zero rows are refused before a run is
    created. Raises ``PrecomputedError``."""
    folder = Path(path).expanduser()
    for names in FILES.values():
        paths = [folder / n for n in names]
        if all(p.is_file() for p in paths):
            _read(str(paths[0]), str(paths[1]), _stamp(paths))


def _check_block(block: np.ndarray, start: int, npy: str, ids: list[str]) -> int:
    """Check rows ``start...`` of the matrix (``block``, a view) and L2-normalise in place those
    off unit length; returns how many were. One float32 pass finds each row's squared norm: a
    NaN or inf makes it non-finite and a zero row 0, so only the rows it flags (with those
    whose float32 square could overflow or underflow) are read again exactly, and the norms of
    the rows rescaled are recomputed in float64. Raises ``PrecomputedError`` for NaN/inf and
    zero rows."""
    squares = np.einsum("ij,ij->i", block, block)
    flagged = np.flatnonzero(~np.isfinite(squares) | (squares < TINY))
    if len(flagged):
        bad = flagged[~np.isfinite(block[flagged]).all(axis=1)]
        if len(bad):
            rows = [int(start + b) for b in bad]
            raise PrecomputedError(f"{npy}: NaN or inf in row {rows[0]} (id {ids[rows[0]]!r})"
                                   f"{f', {len(rows)} rows in all' if len(rows) > 1 else ''}")
        exact = np.einsum("ij,ij->i", block[flagged], block[flagged], dtype=np.float64)
        zero = flagged[exact == 0]
        if len(zero):
            r = int(start + zero[0])
            raise PrecomputedError(f"{npy}: row {r} (id {ids[r]!r}) is all zero: it has no "
                                   f"direction to score by cosine")
        squares[flagged] = 0  # rescaled below, by their exact norms
    off = np.flatnonzero(np.abs(np.sqrt(squares) - 1.0) > NORM_TOLERANCE)
    if len(off):
        norms = np.sqrt(np.einsum("ij,ij->i", block[off], block[off], dtype=np.float64))
        block[off] /= norms[:, None].astype(np.float32)
    return len(off)


def _stamp(paths: list[Path]) -> tuple:
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)


@dataclass
class PrecomputedEmbedder:
    """An ``Embedder`` whose vectors were computed elsewhere (module docstring).

    ``path`` the folder; ``queries`` the name of the embedder option that embeds the questions
    (recorded; the built one is ``query_embedder``, given by ``config.build``) or None for
    ``queries.npy``. Raises ``PrecomputedError`` for a missing or malformed file, a query
    embedder of another dimension, or both a query embedder and ``queries.npy``."""

    # checked by the embedder itself (``folder_problems``); an input of the run
    path: str = field(metadata={"input": "dir"})
    # the questions' vectors from a named embedder option (e.g. minilm) instead of queries.npy
    queries: str | None = None
    name: str = "precomputed"
    query_embedder: Embedder | None = field(default=None, repr=False, metadata=settings.BUILT)
    identity: EmbedderIdentity = field(init=False)

    def __post_init__(self) -> None:
        folder = Path(self.path).expanduser()
        if not folder.is_dir():
            raise PrecomputedError(f"embedder.path={folder_problems(self.path)[0]}")
        pairs, missing = file_pairs(folder)
        if missing:
            raise PrecomputedError(f"embedder.path={self.path} lacks {', '.join(missing)}")
        self.files: dict[str, VectorFile] = {
            mode: _read(str(paths[0]), str(paths[1]), _stamp(paths))
            for mode, paths in pairs.items()}
        dim = self.files["passage"].vectors.shape[1]
        self._check_queries(folder, dim)
        self.identity = EmbedderIdentity("precomputed", self._model(folder),
                                         str((folder / FILES["passage"][0]).resolve()),
                                         self._fingerprint(folder), dim)
        self._by_text: dict[str, dict[str, int]] = {}
        self._shared: set[str] = set()  # passage texts of chunks with different rows

    def _check_queries(self, folder: Path, dim: int) -> None:
        if self.queries and self.query_embedder is None:
            raise PrecomputedError(f"embedder.queries={self.queries} was not built: build the "
                                   f"embedder with ragexp.config.build")
        if self.query_embedder is not None and "query" in self.files:
            raise PrecomputedError(f"embedder.queries={self.queries} and {folder / 'queries.npy'} "
                                   f"both give the questions' vectors: remove one")
        if self.query_embedder is None and "query" not in self.files:
            raise PrecomputedError(f"embedder.path={self.path} has no queries.npy/queries.txt: "
                                   f"add them, or embed the questions with a named embedder "
                                   f"(embedder.queries=minilm)")
        qdim = (self.query_embedder.identity.dim if self.query_embedder is not None
                else self.files["query"].vectors.shape[1])
        if qdim != dim:
            where = (f"embedder.queries={self.queries}" if self.query_embedder is not None
                     else str(folder / "queries.npy"))
            raise PrecomputedError(f"{where} gives {qdim}-d vectors but passages.npy holds "
                                   f"{dim}-d ones: both must have the same dimension")

    def _model(self, folder: Path) -> str:
        queries = f"+queries={self.query_embedder.identity.key}" if self.query_embedder else ""
        return f"{folder.resolve()}{queries}"

    def _fingerprint(self, folder: Path) -> str:
        """sha256 of the id files' bytes and the matrices' sizes and mtimes: hashing 1.5 GB
        of vectors would double the import time (docs/embedding.md)."""
        h = hashlib.sha256()
        for mode in self.files:
            npy, txt = (folder / n for n in FILES[mode])
            h.update(txt.read_bytes())
            st = os.stat(npy)
            h.update(f"\0{mode}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        return h.hexdigest()

    def bind(self, chunks: list[Chunk], questions: dict[str, str]) -> None:
        """Map each chunk's text to its id's row of ``passages.npy`` and each question's text
        (``{qid: text}``; none when serving) to its row of ``queries.npy``. Raises
        ``PrecomputedError`` naming the first few passages or questions without a row, passage
        ids the run does not hold (the vectors of another corpus or chunking), and document ids
        with a chunking that splits documents (they need ``chunking=none``). Question ids the
        run does not score (another split's, a question without qrels) are ignored, with one
        info line saying how many."""
        files = self.files["passage"]
        chunk_ids = [c.chunk_id for c in chunks]
        in_order = chunk_ids == files.ids  # the usual case, checked at C speed
        missing = [] if in_order else [c for c in chunk_ids if c not in files.row]
        held = set(chunk_ids)
        unknown = [x for x in files.ids if x not in held] if missing or len(files.ids) > len(
            held) else []
        if missing:
            docs = {c.doc_id for c in chunks}
            if docs and all(d in files.row for d in docs):
                raise PrecomputedError(
                    f"{self.path}/passages.txt holds document ids but the chunking names "
                    f"its {len(chunks)} chunks otherwise (e.g. {missing[0]!r}): document ids "
                    f"need chunking=none (one chunk per document, chunking.windows=truncate)")
            named = (f"; it names {len(unknown)} ids the run does not hold: {_first(unknown)}"
                     if unknown else "")
            raise PrecomputedError(f"{len(missing)} of the run's {len(chunks)} passages have "
                                   f"no row in {self.path}/passages.txt: {_first(missing)}"
                                   f"{named}{readers.look_alikes(unknown, missing)}")
        if unknown:
            raise PrecomputedError(f"{self.path}/passages.txt names {len(unknown)} ids the run "
                                   f"does not hold: {_first(unknown)}"
                                   f"{readers.look_alikes(unknown, chunk_ids)}")
        self._by_text["passage"], self._shared = self._texts(files, chunk_ids,
                                                             [c.text for c in chunks])
        if "query" in self.files:
            qfile = self.files["query"]
            absent = [q for q in questions if q not in qfile.row]
            if absent:
                raise PrecomputedError(f"{len(absent)} of the run's {len(questions)} questions "
                                       f"have no row in {self.path}/queries.txt: "
                                       f"{_first(absent)}"
                                       f"{readers.look_alikes(absent, qfile.ids)}")
            extra = len(qfile.ids) - len(questions)  # all the run's questions have a row
            if extra and questions:  # serving binds no questions: each is looked up as asked
                log.info("%s/queries.txt: %d of its %d questions are not among the run's %d "
                         "(another split's, or without qrels): ignored", self.path, extra,
                         len(qfile.ids), len(questions))
            by_text, shared = self._texts(qfile, list(questions), list(questions.values()))
            if shared:
                raise PrecomputedError(self._same_text(qfile, questions, shared))
            self._by_text["query"] = by_text

    @staticmethod
    def _texts(files: VectorFile, ids: list[str],
               texts: list[str]) -> tuple[dict[str, int], set[str]]:
        """``{text: row}`` (a text's first id's row), and the texts that ids of different
        vectors share: those name no one vector."""
        out: dict[str, int] = {}
        shared: set[str] = set()
        for own, text in zip(files.rows_of(ids), texts):
            r = out.setdefault(text, own)
            if r != own and not np.array_equal(files.vectors[r], files.vectors[own]):
                shared.add(text)
        return out, shared

    def _same_text(self, files: VectorFile, questions: dict[str, str], shared: set[str]) -> str:
        """The refusal of ``shared`` (texts of the run's ``questions``, ``{qid: text}``, with
        different rows of queries.npy): the first such text by its ids and their lines, and how
        many more there are."""
        text = next(t for t in questions.values() if t in shared)
        ids = [q for q, t in questions.items() if t == text]
        lines = ", ".join(f"{q!r} (line {r + 1})" for q, r in zip(ids, files.rows_of(ids)))
        more = f" ({len(shared) - 1} more texts alike)" if len(shared) > 1 else ""
        return (f"{self.path}/queries.txt: {lines} have the same text ({text[:60]!r}) but "
                f"different rows of queries.npy{more}; a question's vector is looked up by its "
                f"text, so give them one vector or different texts")

    def passage_vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """(len(chunk_ids), dim) float32 unit rows of ``passages.npy``, by id (each one of the
        bound chunks'). Raises ``PrecomputedError`` before ``bind``."""
        if "passage" not in self._by_text:
            raise PrecomputedError("embedder=precomputed has not been bound to the run's "
                                   "passages (Resources binds it)")
        files = self.files["passage"]
        return files.vectors[np.asarray(files.rows_of(chunk_ids), dtype=np.intp)]

    def embed(self, texts: list[str], mode: str = "passage") -> np.ndarray:
        """(len(texts), dim) float32 unit rows: each text's row, found through ``bind``; the
        questions through ``query_embedder`` when one is set. Raises ``PrecomputedError`` for
        a text that is not one of the bound passages or questions (a new question in serving
        needs ``embedder.queries``)."""
        if mode == "query" and self.query_embedder is not None:
            return self.query_embedder.embed(texts, mode)
        rows_of = self._by_text.get(mode)
        if rows_of is None:
            raise PrecomputedError(f"embedder=precomputed has not been bound to the run's "
                                   f"{'passages' if mode == 'passage' else 'questions'} "
                                   f"(Resources binds it)")
        unknown = [t for t in texts if t not in rows_of]
        shared = [t for t in texts if t in self._shared] if mode == "passage" else []
        if shared:
            raise PrecomputedError(f"{len(shared)} passage texts belong to chunks with "
                                   f"different precomputed vectors, so a text names no one "
                                   f"vector: {_first([t[:60] for t in shared])} (a run reads "
                                   f"them by chunk id)")
        if unknown:
            hint = " (serving a new question needs embedder.queries=NAME)" \
                if mode == "query" else ""
            raise PrecomputedError(f"{len(unknown)} {mode} texts have no precomputed vector: "
                                   f"{_first([t[:60] for t in unknown])}{hint}")
        return self.files[mode].vectors[[rows_of[t] for t in texts]]

    def tokens(self) -> None:
        """None: precomputed vectors have no token window ragexp can read."""
        return None
