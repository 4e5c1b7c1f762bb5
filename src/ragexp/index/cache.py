"""Content-addressed, on-disk embedding cache shared by runs, processes and sweep workers.

Key = sha256 over (embedder identity key, normalisation, mode, text): the identity key holds the
model name, the model file's sha256 and the dimension, so a changed model never reads stale
vectors. Vectors are packed (``packstore.py``): ``<root>/<model>/packed/`` holds append-only
shards of float32 rows with a 32-byte key per row, written in the order of the texts (each claim
of texts is embedded in batches of similar length, then appended in text order), so rereading
N cached vectors is about one sequential read, and disk use is the raw vectors plus 32 bytes a
vector.

Workers of one sweep never embed the same text twice. Before embedding a batch, a worker claims
its keys under the model folder's lock (``filelock``): a claim is a file of keys that its owner
holds an exclusive ``flock`` on while it embeds. Another worker leaves claimed keys out of its
own batches, and once its own work is done waits for those claims (a shared ``flock`` on the
claim file returns when the owner finishes or dies) and reads the vectors from the store; keys a
dead owner never wrote are claimed again. A claim whose lock nobody holds is stale and removed.

An old per-file cache (``<root>/<model>/<ab>/<key>.f32``, ragexp before the packed store) is
migrated on read: a key missing from the packed store is looked up there and, when whole,
copied into the store instead of being embedded again. The old files are left in place and a
one-line notice says they can be deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import uuid
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from ragexp.errors import RagexpError
from ragexp.index.embedders import CacheWriteError, Embedder, EmbedderIdentity
from ragexp.index.packstore import PackedStore

log = logging.getLogger(__name__)
CLAIM_BATCHES = 16  # batches per claim: fewer rounds of locking on big pending sets

log = logging.getLogger(__name__)


def cache_key(identity: EmbedderIdentity, mode: str, text: str, normalized: bool = True) -> str:
    """Hex sha256 of ``identity.key \\0 norm=... \\0 mode=... \\0 text \\0``."""
    return _digests(identity, mode, [text], normalized)[0].hex()


def _digests(identity: EmbedderIdentity, mode: str, texts: list[str],
             normalized: bool = True) -> list[bytes]:
    prefix = hashlib.sha256()
    for part in (identity.key, f"norm={normalized}", f"mode={mode}"):
        prefix.update(part.encode("utf-8") + b"\0")
    out = []
    for text in texts:
        h = prefix.copy()
        h.update(text.encode("utf-8") + b"\0")
        out.append(h.digest())
    return out


def model_folder(root: str | Path, identity: EmbedderIdentity) -> Path:
    return Path(root) / hashlib.sha256(identity.key.encode()).hexdigest()[:16]


@dataclass
class EmbeddingCache:
    """``embed`` returns (len(texts), dim) float32 vectors, embedding only uncached texts.

    ``hits`` counts texts served from the cache (including ones another worker embedded while
    this one waited), ``misses`` texts this cache computed (repeats within a call included).
    A cache that cannot be written (read-only or full disk) either stops the caller with
    ``CacheWriteError`` naming the folder (``on_write_error="raise"``: experiment runs) or warns
    once, naming the path, and goes on computing (``"warn"``: serving).
    """

    root: str = ".cache/ragexp/embeddings"
    enabled: bool = True
    batch_size: int = 64
    hits: int = 0
    misses: int = 0
    migrated: int = 0
    on_write_error: str = "raise"  # "raise": CacheWriteError; "warn": warn once, stop writing
    _stores: dict = field(default_factory=dict, repr=False)
    _unwritable: str | None = field(default=None, repr=False)

    def store(self, identity: EmbedderIdentity) -> PackedStore:
        key = identity.key
        if key not in self._stores:
            self._stores[key] = PackedStore(model_folder(self.root, identity) / "packed",
                                            identity.dim)
        return self._stores[key]

    def embed(self, embedder: Embedder, texts: list[str], mode: str,
              batch_size: int | None = None, progress: bool = True) -> np.ndarray:
        """Vectors for ``texts``; see the class docstring for what is counted and shared."""
        ident = embedder.identity
        if not texts:
            return np.zeros((0, ident.dim), dtype=np.float32)
        if not self.enabled:
            self.misses += len(texts)
            return embedder.embed(list(texts), mode)
        digests = _digests(ident, mode, texts)
        store = self.store(ident)
        out = store.empty(len(texts))  # every row is filled below: read, migrated or embedded
        store.refresh()
        todo = self._read(store, digests, out)
        if todo:
            todo = self._migrate(ident, store, digests, todo, out)
        self.hits += len(texts) - sum(len(v) for v in todo.values())
        if todo:
            self._fill(embedder, mode, texts, digests, todo, out,
                       batch_size or self.batch_size, progress)
        return out

    def _read(self, store: PackedStore, digests: list[bytes], out: np.ndarray) -> dict:
        """Fill ``out`` from the store; return {digest: [positions]} of the keys not found."""
        keys = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4)
        shard, row = store.find(keys)
        store.gather(shard, row, out)
        todo: dict[bytes, list[int]] = {}
        for i in np.flatnonzero(shard < 0):
            todo.setdefault(digests[i], []).append(int(i))
        return todo

    # -- migration from the per-file layout -------------------------------------------------
    def _migrate(self, ident, store, digests, todo: dict, out: np.ndarray) -> dict:
        folder = model_folder(self.root, ident)
        if not folder.is_dir() or not any(p.name != "packed" and len(p.name) == 2
                                          for p in folder.iterdir() if p.is_dir()):
            return todo
        found_keys, found_vecs = [], []
        for digest in list(todo):
            hexkey = digest.hex()
            try:
                vec = np.fromfile(folder / hexkey[:2] / f"{hexkey}.f32", dtype=np.float32)
            except OSError:
                continue
            if vec.shape != (ident.dim,):
                continue  # a torn or foreign file is a miss, as it always was
            out[todo.pop(digest)] = vec
            found_keys.append(digest)
            found_vecs.append(vec)
        if found_keys:
            self.migrated += len(found_keys)
            self._append(store, found_keys, np.stack(found_vecs))
            log.warning("embedding cache: migrated %d vectors from the old per-file cache under "
                        "%s into %s; the per-file folders (%s/??/) can be deleted",
                        len(found_keys), folder, store.folder, folder)
        return todo

    # -- computing what is missing ----------------------------------------------------------
    def _fill(self, embedder, mode, texts, digests, todo: dict, out, batch_size, progress):
        """Embed the keys of ``todo`` that no other worker is embedding, a claim of up to
        ``CLAIM_BATCHES`` batches at a time; then wait for and read the others'. Each round
        looks at a window of the queue only, so a round costs the same at any queue length."""
        store = self.store(embedder.identity)
        text_of = {d: texts[pos[0]] for d, pos in todo.items()}
        queue = deque(todo)  # text order: rows are appended in it, so a reread is one read
        deferred: list[bytes] = []  # keys another worker had claimed when last looked at
        unit = batch_size * CLAIM_BATCHES
        what = "queries" if mode == "query" else f"{mode}s"
        bar = tqdm(total=len(queue), desc=f"embed {what}", unit="text", miniters=64,
                   disable=not progress, leave=False)
        claims = _Claims(store.folder.parent) if self._writable(store) else None
        while queue or deferred:
            if not queue:
                queue.extend(deferred)
                deferred = []
            window = [queue.popleft() for _ in range(min(len(queue), 4 * unit))]
            busy = None
            if claims is None:
                take = window[:unit]
                queue.extendleft(reversed(window[unit:]))
            else:
                with claims.lock:
                    # Claims first, store second: an owner appends before it drops its claim,
                    # so a claim seen gone here has its vectors visible to the refresh below.
                    live = claims.live()
                    store.refresh()
                    self._collect(store, window, todo, out, bar)
                    held = set().union(*live.values()) if live else set()
                    free = [d for d in window if d in todo and d not in held]
                    take = free[:unit]
                    claims.claim(take)
                queue.extendleft(reversed(free[unit:]))
                others = [d for d in window if d in todo and d in held]
                deferred.extend(others)
                busy = next((p for p, keys in live.items() if others and others[0] in keys),
                            None)
            if take:
                try:
                    vectors = self._embed_unit(embedder, mode, [text_of[d] for d in take],
                                               batch_size, bar)
                    self._append(store, take, vectors)
                    out[[todo[d][0] for d in take]] = vectors
                    for d, vec in zip(take, vectors):
                        positions = todo.pop(d)
                        if len(positions) > 1:  # the same text more than once
                            out[positions[1:]] = vec
                        self.misses += len(positions)
                finally:
                    if claims is not None:
                        claims.release()
                if self._unwritable:
                    claims = None
            elif busy is not None and not queue:
                _Claims.wait(busy)  # only others' keys are left: wait for one claim, then read
        bar.close()

    @staticmethod
    def _embed_unit(embedder, mode, unit: list[str], batch_size: int, bar) -> np.ndarray:
        """Vectors of ``unit`` in its order, embedded in batches of similar length: a batch is
        padded to its longest text, so mixing short and long texts wastes most of the model's
        work (measured: about 2x on the handbook). An embedder with data-parallel workers
        (``parallel``) gets the unit in one call, which it splits into its own batches."""
        order = sorted(range(len(unit)), key=lambda i: len(unit[i]))
        vectors = np.empty((len(unit), embedder.identity.dim), dtype=np.float32)
        # Data-parallel workers (embedder.parallel) start per call: give them the whole unit.
        step = len(order) if getattr(embedder, "parallel", None) else batch_size
        for start in range(0, len(order), step):
            batch = order[start:start + step]
            vectors[batch] = embedder.embed([unit[i] for i in batch], mode)
            bar.update(len(batch))
        return vectors

    def _collect(self, store, pending, todo, out, bar) -> None:
        """Move pending keys that reached the store (another worker wrote them) into ``out``."""
        pending = [d for d in pending if d in todo]
        if not pending:
            return
        keys = np.frombuffer(b"".join(pending), dtype="<u8").reshape(-1, 4)
        shard, row = store.find(keys)
        found = np.flatnonzero(shard >= 0)
        if not len(found):
            return
        vecs = np.zeros((len(pending), store.dim), dtype=np.float32)
        store.gather(shard, row, vecs)
        for i in found:
            positions = todo.pop(pending[i])
            out[positions] = vecs[i]
            self.hits += len(positions)
        bar.update(len(found))

    def _writable(self, store: PackedStore) -> bool:
        if self._unwritable is None:
            try:
                store.folder.mkdir(parents=True, exist_ok=True)
                (store.folder.parent / "claims").mkdir(exist_ok=True)
                probe = store.folder / f".probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                self._cannot_write(store, exc)
        return not self._unwritable

    def _append(self, store: PackedStore, digests: list[bytes], vectors: np.ndarray) -> None:
        if self._unwritable:
            return
        try:
            keys = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4)
            store.append(keys, vectors)
        except OSError as exc:
            self._cannot_write(store, exc)

    def _cannot_write(self, store: PackedStore, exc: OSError) -> None:
        if self.on_write_error == "raise":
            raise CacheWriteError(
                f"cannot write the embedding cache at {store.folder.resolve()}: "
                f"{exc.strerror or exc}; make it writable, free space, or set cache_dir= to a "
                f"writable folder") from exc
        self._unwritable = f"embedding cache {store.folder} cannot be written ({exc}); " \
            "vectors are computed without being cached"
        warnings.warn(self._unwritable, RuntimeWarning, stacklevel=4)
        log.warning(self._unwritable)


class _Claims:
    """Claim files under ``<model folder>/claims``: see the module docstring."""

    def __init__(self, model_dir: Path):
        self.dir = model_dir / "claims"
        self.lock = FileLock(str(model_dir / "claims.lock"))
        self._mine: tuple[Path, object] | None = None

    def live(self) -> dict[Path, set[bytes]]:
        """Claims whose owner is alive (holds its lock); stale ones are removed. Call under
        ``self.lock``, so no claim is between creation and locking."""
        live = {}
        for path in self.dir.glob("*.claim"):
            try:
                with path.open("rb") as fh:
                    try:
                        fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    except BlockingIOError:
                        blob = fh.read()
                        live[path] = {blob[i:i + 32] for i in range(0, len(blob) - 31, 32)}
                        continue
                path.unlink(missing_ok=True)  # its owner died before finishing
            except FileNotFoundError:
                continue
        return live

    def claim(self, keys: list[bytes]) -> None:
        """Claim ``keys`` (none if empty) for this worker. Call under ``self.lock``."""
        if not keys:
            return
        path = self.dir / f"{os.getpid()}-{uuid.uuid4().hex}.claim"
        fh = path.open("wb")
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(b"".join(keys))
        fh.flush()
        self._mine = (path, fh)

    def release(self) -> None:
        """Drop this worker's claim (after its vectors are in the store)."""
        if self._mine is not None:
            path, fh = self._mine
            path.unlink(missing_ok=True)
            fh.close()
            self._mine = None

    @staticmethod
    def wait(path: Path) -> None:
        """Block until the claim's owner releases it (finished or died)."""
        try:
            with path.open("rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
        except FileNotFoundError:
            pass
