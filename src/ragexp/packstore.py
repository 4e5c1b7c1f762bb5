"""Packed vector storage: append-only shards of fixed-width float32 rows with a key index.

One folder holds the vectors of one embedder (one ``dim``). Each writing process appends to its
own shard, a pair of files::

    <name>.f32   rows of dim float32, row i = the vector of key i
    <name>.keys  32-byte binary keys (sha256 digests), one per row

The vector is appended before its key, so a key on disk always has its row; a torn tail (a crash
mid-append, a full disk) is ignored: a shard's valid length is ``min(keys // 32, f32 // 4*dim)``.
Only the shard's own writer ever appends to it, so appends need no lock. Readers read every
shard's keys into one sorted index (the first 8 bytes of each key, verified against all 32), and
gather vectors through a memory map: reading N cached vectors costs about one read of N rows.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KEY_BYTES = 32


@dataclass
class _Shard:
    path: Path  # without suffix
    index: int  # position in PackedStore._names
    rows: int = 0  # valid rows read so far


class PackedStore:
    """Shards under ``folder``; ``find``/``gather`` read stored rows by key, ``append`` adds rows.

    Raises ``OSError`` from ``append`` when the folder cannot be written (read-only, full);
    the caller decides whether that is fatal.
    """

    def __init__(self, folder: str | Path, dim: int):
        self.folder, self.dim = Path(folder), int(dim)
        self.row_bytes = 4 * self.dim
        self._shards: dict[str, _Shard] = {}
        self._names: list[str] = []
        self._own: tuple[Path, object, object] | None = None  # (stem, f32 file, keys file)
        # The index: every key sorted by its first 8 bytes, with its shard and row.
        self._keys = np.zeros((0, 4), dtype="<u8")
        self._shard_of = np.zeros(0, dtype=np.int64)
        self._row_of = np.zeros(0, dtype=np.int64)

    # -- reading --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the keys appended since the last refresh (by any process) into the index:
        cost proportional to the new keys plus one merge (a copy) of the index."""
        parts = []
        for path in sorted(self.folder.glob("*.keys")) if self.folder.is_dir() else ():
            stem = path.with_suffix("")
            shard = self._shards.get(stem.name)
            if shard is None:
                shard = self._shards[stem.name] = _Shard(stem, len(self._names))
                self._names.append(stem.name)
            try:
                valid = min(path.stat().st_size // KEY_BYTES,
                            stem.with_suffix(".f32").stat().st_size // self.row_bytes)
            except FileNotFoundError:
                continue
            if valid <= shard.rows:
                continue
            with path.open("rb") as fh:
                fh.seek(shard.rows * KEY_BYTES)
                blob = fh.read((valid - shard.rows) * KEY_BYTES)
            parts.append((np.frombuffer(blob, dtype="<u8").reshape(-1, 4),
                          np.full(valid - shard.rows, shard.index, dtype=np.int64),
                          np.arange(shard.rows, valid, dtype=np.int64)))
            shard.rows = valid
        if parts:
            self._merge(*(np.concatenate(x) for x in zip(*parts)))

    def _merge(self, keys: np.ndarray, shard_of: np.ndarray, row_of: np.ndarray) -> None:
        order = np.argsort(keys[:, 0], kind="stable")
        keys, shard_of, row_of = keys[order], shard_of[order], row_of[order]
        if not len(self._keys):
            self._keys, self._shard_of, self._row_of = keys, shard_of, row_of
            return
        at = np.searchsorted(self._keys[:, 0], keys[:, 0], side="right")
        self._keys = np.insert(self._keys, at, keys, axis=0)
        self._shard_of = np.insert(self._shard_of, at, shard_of)
        self._row_of = np.insert(self._row_of, at, row_of)

    def __len__(self) -> int:
        return len(self._keys)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard index, row) for each key of ``keys`` ((n, 4) uint64); -1 where absent.
        Rare first-word collisions are resolved by scanning the equal run."""
        sorted_keys, shard_of, row_of = self._keys, self._shard_of, self._row_of
        shard = np.full(len(keys), -1, dtype=np.int64)
        row = np.full(len(keys), -1, dtype=np.int64)
        if not len(sorted_keys) or not len(keys):
            return shard, row
        first = sorted_keys[:, 0]
        pos = np.minimum(np.searchsorted(first, keys[:, 0]), len(first) - 1)
        exact = (sorted_keys[pos] == keys).all(axis=1)
        shard[exact], row[exact] = shard_of[pos[exact]], row_of[pos[exact]]
        for i in np.flatnonzero(~exact & (first[pos] == keys[:, 0])):
            j = pos[i]
            while j < len(first) and first[j] == keys[i, 0]:
                if (sorted_keys[j] == keys[i]).all():
                    shard[i], row[i] = shard_of[j], row_of[j]
                    break
                j += 1
        return shard, row

    def gather(self, shard: np.ndarray, row: np.ndarray, out: np.ndarray) -> None:
        """Copy the stored rows into ``out`` (one row per found key; -1 rows left untouched)."""
        for s in np.unique(shard[shard >= 0]):
            meta = self._shards[self._names[s]]
            mm = np.memmap(meta.path.with_suffix(".f32"), dtype=np.float32, mode="r",
                           shape=(meta.rows, self.dim))
            if len(self._shards) == 1 and (shard >= 0).all():
                np.take(mm, row, axis=0, out=out)  # every key in this shard: no scatter
            else:
                where = np.flatnonzero(shard == s)
                out[where] = np.take(mm, row[where], axis=0)
            del mm

    # -- writing --------------------------------------------------------------------------
    def append(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Append rows to this process's own shard: vectors first, then keys, each flushed."""
        if not len(keys):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(keys), self.dim):
            raise ValueError(f"expected ({len(keys)}, {self.dim}) vectors, got {vectors.shape}")
        if self._own is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            stem = self.folder / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._own = (stem, open(stem.with_suffix(".f32"), "ab"),
                         open(stem.with_suffix(".keys"), "ab"))
        _, f32, kf = self._own
        try:
            f32.write(vectors.tobytes())
            f32.flush()
            kf.write(np.ascontiguousarray(keys, dtype="<u8").tobytes())
            kf.flush()
        except OSError:
            self.close()  # a torn tail stays ignored; later appends go to a fresh shard
            raise

    def close(self) -> None:
        if self._own is not None:
            for fh in self._own[1:]:
                try:
                    fh.close()
                except OSError:
                    pass
            self._own = None

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.folder.glob("*") if p.is_file())
