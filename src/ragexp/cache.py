"""Content-addressed, on-disk embedding cache shared by runs and processes.

Key = sha256 over (embedder identity key, normalisation, mode, text): the identity key holds the
model name and the model file's sha256, so a changed model never reads stale vectors. Each
vector is one file ``<root>/<model>/<ab>/<key>.f32`` written to a temporary name and moved into
place with ``os.replace`` (atomic on POSIX), so two processes writing the same entry at once
both leave a whole file and a reader never sees half of one.

A write that fails (read-only folder, full disk) either stops the caller with ``CacheWriteError``
naming the cache folder (``on_write_error="raise"``, experiment runs) or is warned about once,
after which the cache only reads and vectors are computed (``"warn"``, serving).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ragexp.embedders import Embedder, EmbedderIdentity

log = logging.getLogger(__name__)


class CacheWriteError(OSError):
    """The embedding cache folder cannot be written (permissions, full disk)."""


def cache_key(identity: EmbedderIdentity, mode: str, text: str, normalized: bool = True) -> str:
    h = hashlib.sha256()
    for part in (identity.key, f"norm={normalized}", f"mode={mode}", text):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class EmbeddingCache:
    root: str = ".cache/ragexp/embeddings"
    enabled: bool = True
    hits: int = 0
    misses: int = 0
    on_write_error: str = "raise"  # "raise": CacheWriteError; "warn": warn once, stop writing
    _dir_made: set = field(default_factory=set, repr=False)
    _unwritable: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.on_write_error not in ("raise", "warn"):
            raise ValueError(f"on_write_error must be 'raise' or 'warn', got "
                             f"{self.on_write_error!r}")

    def _path(self, identity: EmbedderIdentity, key: str) -> Path:
        model_dir = hashlib.sha256(identity.key.encode()).hexdigest()[:16]
        return Path(self.root) / model_dir / key[:2] / f"{key}.f32"

    def _read(self, path: Path, dim: int) -> np.ndarray | None:
        try:
            vec = np.fromfile(path, dtype=np.float32)
        except (FileNotFoundError, OSError):
            return None
        return vec if vec.shape == (dim,) else None  # a foreign/corrupt file is a miss

    def _write(self, path: Path, vec: np.ndarray) -> None:
        if path.parent not in self._dir_made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._dir_made.add(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(np.ascontiguousarray(vec, dtype=np.float32).tobytes())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _store(self, path: Path, vec: np.ndarray) -> None:
        """The write boundary: ``_write``, with a failure handled per ``on_write_error``."""
        if self._unwritable:
            return
        try:
            self._write(path, vec)
        except OSError as exc:
            reason = f"{exc.strerror or exc} ({exc.filename or path})"
            if self.on_write_error == "raise":
                raise CacheWriteError(
                    f"cannot write the embedding cache at {Path(self.root).resolve()}: {reason}; "
                    f"make it writable, free space, or set cache_dir= to a writable folder"
                ) from exc
            self._unwritable = True
            log.warning("embedding cache %s cannot be written (%s): computing vectors without "
                        "caching them from now on", Path(self.root).resolve(), reason)

    def embed(self, embedder: Embedder, texts: list[str], mode: str,
              batch_size: int = 64, progress: bool = True) -> np.ndarray:
        """Vectors for ``texts``, embedding only the ones not cached (in batches, with progress)."""
        ident = embedder.identity
        out = np.zeros((len(texts), ident.dim), dtype=np.float32)
        if not self.enabled:
            self.misses += len(texts)
            return embedder.embed(list(texts), mode) if texts else out
        paths = [self._path(ident, cache_key(ident, mode, t)) for t in texts]
        todo: dict[str, list[int]] = {}
        for i, path in enumerate(paths):
            vec = self._read(path, ident.dim)
            if vec is None:
                todo.setdefault(texts[i], []).append(i)
            else:
                out[i] = vec
        self.hits += len(texts) - sum(len(v) for v in todo.values())
        self.misses += sum(len(v) for v in todo.values())
        # Embed in length order: a batch is padded to its longest text, so mixing short and
        # long texts wastes most of the model's work (measured: about 2x on the handbook).
        pending = sorted(todo, key=len)
        bar = tqdm(total=len(pending), desc=f"embed {mode}s", unit="text",
                   disable=not progress or not pending, leave=False)
        for start in range(0, len(pending), batch_size):
            batch = pending[start:start + batch_size]
            vectors = embedder.embed(batch, mode)
            for text, vec in zip(batch, vectors):
                self._store(paths[todo[text][0]], vec)
                out[todo[text]] = vec
            bar.update(len(batch))
        bar.close()
        return out
