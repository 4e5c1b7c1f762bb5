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
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype="<u8"))
    read_bytes: int = 0


class PackedStore:
    """Shards under ``folder``; ``get`` returns the stored rows of keys, ``append`` adds rows.

    Raises ``OSError`` from ``append`` when the folder cannot be written (read-only, full);
    the caller decides whether that is fatal.
    """

    def __init__(self, folder: str | Path, dim: int):
        self.folder, self.dim = Path(folder), int(dim)
        self.row_bytes = 4 * self.dim
        self._shards: dict[str, _Shard] = {}
        self._own: tuple[Path, object, object] | None = None  # (stem, f32 file, keys file)
        self._lookup: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- reading --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the keys appended since the last refresh (by any process)."""
        changed = False
        for path in sorted(self.folder.glob("*.keys")) if self.folder.is_dir() else ():
            stem = path.with_suffix("")
            shard = self._shards.setdefault(stem.name, _Shard(stem))
            try:
                valid = min(path.stat().st_size // KEY_BYTES,
                            stem.with_suffix(".f32").stat().st_size // self.row_bytes)
            except FileNotFoundError:
                continue
            if valid * KEY_BYTES <= shard.read_bytes:
                continue
            with path.open("rb") as fh:
                fh.seek(shard.read_bytes)
                blob = fh.read(valid * KEY_BYTES - shard.read_bytes)
            new = np.frombuffer(blob, dtype="<u8").reshape(-1, 4)
            shard.keys = np.concatenate([shard.keys, new]) if len(shard.keys) else new
            shard.read_bytes += len(blob)
            changed = True
        if changed or self._lookup is None:
            self._build_lookup()

    def _build_lookup(self) -> None:
        names = list(self._shards)
        keys = [self._shards[n].keys for n in names]
        all_keys = np.concatenate(keys) if keys else np.zeros((0, 4), dtype="<u8")
        shard_of = np.repeat(np.arange(len(names)), [len(k) for k in keys])
        row_of = np.concatenate([np.arange(len(k)) for k in keys]) if keys else np.zeros(0, int)
        order = np.argsort(all_keys[:, 0], kind="stable")
        self._names = names
        self._lookup = (all_keys[order], shard_of[order], row_of[order])

    def __len__(self) -> int:
        return sum(len(s.keys) for s in self._shards.values())

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard index, row) for each key of ``keys`` ((n, 4) uint64); -1 where absent.
        Rare first-word collisions are resolved by scanning the equal run."""
        if self._lookup is None:
            self.refresh()
        sorted_keys, shard_of, row_of = self._lookup
        shard = np.full(len(keys), -1, dtype=np.int64)
        row = np.full(len(keys), -1, dtype=np.int64)
        if not len(sorted_keys) or not len(keys):
            return shard, row
        first = sorted_keys[:, 0]
        pos = np.searchsorted(first, keys[:, 0])
        pos_c = np.minimum(pos, len(first) - 1)
        exact = (sorted_keys[pos_c] == keys).all(axis=1)
        shard[exact], row[exact] = shard_of[pos_c[exact]], row_of[pos_c[exact]]
        for i in np.flatnonzero(~exact & (first[pos_c] == keys[:, 0])):
            j = pos_c[i]
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
                           shape=(len(meta.keys), self.dim))
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
