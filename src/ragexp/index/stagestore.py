"""Stage reuse across the jobs of a sweep: chunks, tokens, BM25 and passage vectors, built once.

Each stage is keyed by what determines it, and nothing else::

    chunks  = data fingerprint + chunker (class and every field) + ragexp code
    tokens  = chunks key                 (the analyser is part of the code)
    bm25    = chunks key + BM25 settings (``BM25Params``: k1, b, method, delta)
    vectors = chunks key + embedder identity (model, model-file sha256, dim)

The ragexp code fingerprint (sha256 of the package's source files) is in every key, so an edited
tokenizer or chunker can never serve stale stages. A stage is looked up in this process's memory
(the latest value of each stage name, so a sweep of query-time variants in one process builds
nothing twice: ``ragexp.session.Session.stages``), then on disk under
``<cache_dir>/stages/<stage>/<key>`` (written to a private name and moved into place,
``data.files``, so a reader never sees half a file), and built
only when both miss. Two processes that miss the same key at once build it once: the second
waits on the key's ``filelock`` and then reads the first's file. A store that cannot be written
warns once, naming its path, and the run goes on building in memory.

Disk values are pickles (numpy arrays as ``.npy``): the store is a private cache of the user who
runs ragexp, not an exchange format; do not point ``cache_dir`` at files from untrusted sources.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import uuid
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
from filelock import FileLock

from ragexp.data import files
from ragexp.session import Session

log = logging.getLogger(__name__)


PACKAGE = Path(__file__).resolve().parents[1]  # .../ragexp


def source_hash(package_dir: Path) -> str:
    """sha256 (hex) over the relative paths and bytes of every ``.py`` file under a folder, its
    subpackages included."""
    h = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        h.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes()
                 + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256[:16] over the source of every module of the ragexp package (path and bytes)."""
    return source_hash(PACKAGE)[:16]


def stage_key(*parts: Any) -> str:
    """Stable key of JSON-serialisable parts (objects by ``repr``) plus the code fingerprint."""
    payload = json.dumps([code_fingerprint(), *parts], sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


@dataclass
class StageStore:
    """``get(stage, key, build)``: the stage's value for ``key``, built at most once.

    ``root`` None keeps stages in memory only; ``enabled`` False builds every time (for
    comparing results with and without reuse). ``events`` records, per stage, where its value
    came from: ``memory``, ``disk`` or ``built``. ``memory`` holds the latest value of each
    stage name, ``{stage: (key, value)}``: the current session's (``Session.stages``), which
    later jobs of the session share, unless given.
    """

    root: str | None = ".cache/ragexp/stages"
    enabled: bool = True
    events: dict[str, str] = field(default_factory=dict)
    memory: dict[str, tuple[str, Any]] = field(default_factory=lambda: Session.current().stages,
                                               repr=False)
    _unwritable: bool = field(default=False, repr=False)

    def get(self, stage: str, key: str, build: Callable[[], Any], disk: bool = True) -> Any:
        """``disk`` False keeps the stage in memory only (a value cheap to rebuild from another
        stage, such as a FAISS flat index from its vectors)."""
        if not self.enabled:
            self.events[stage] = "built"
            return build()
        held = self.memory.get(stage)
        if held is not None and held[0] == key:
            self.events[stage] = "memory"
            return held[1]
        value, source = self._from_disk_or_build(stage, key, build) if disk else (build(), "built")
        self.memory[stage] = (key, value)
        self.events[stage] = source
        log.info("stage %s %s (key %s)", stage, "reused from disk" if source == "disk"
                 else "built", key)
        return value

    def scratch(self, stage: str, key: str, factory: Callable[[], Any]) -> Any:
        """A mutable value (``factory()``, e.g. a dict) that later jobs of this session with the
        same ``key`` share: memory only, no event recorded; a fresh one each call when the store
        is disabled. For what a job fills in piece by piece, such as timed searches."""
        if not self.enabled:
            return factory()
        held = self.memory.get(stage)
        if held is None or held[0] != key:
            held = self.memory[stage] = (key, factory())
        return held[1]

    def _from_disk_or_build(self, stage: str, key: str, build) -> tuple[Any, str]:
        if self.root is None:
            return build(), "built"
        folder = Path(self.root) / stage
        value = self._load(folder, key)
        if value is not None:
            return value, "disk"
        if self._unwritable or not self._writable(folder):
            return build(), "built"
        with FileLock(str(folder / f"{key}.lock")):
            value = self._load(folder, key)  # built by another process while we waited
            if value is not None:
                return value, "disk"
            value = build()
            self._save(folder, key, value)
        return value, "built"

    @staticmethod
    def _load(folder: Path, key: str) -> Any:
        npy, pkl = folder / f"{key}.npy", folder / f"{key}.pkl"
        try:
            if npy.is_file():
                return np.load(npy)
            if pkl.is_file():
                with pkl.open("rb") as fh:
                    return pickle.load(fh)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
            log.warning("stage file %s unreadable (%s): rebuilding it", npy if npy.is_file()
                        else pkl, exc)
        return None

    def _save(self, folder: Path, key: str, value: Any) -> None:
        is_array = isinstance(value, np.ndarray)
        target = folder / f"{key}.{'npy' if is_array else 'pkl'}"

        def dump(fh) -> None:
            if is_array:
                np.save(fh, value, allow_pickle=False)
            else:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)

        try:
            files.write_atomic(target, dump)
        except OSError as exc:
            self._cannot_write(folder, exc)

    def _writable(self, folder: Path) -> bool:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
            return True
        except OSError as exc:
            self._cannot_write(folder, exc)
            return False

    def _cannot_write(self, folder: Path, exc: OSError) -> None:
        if not self._unwritable:
            message = (f"stage store {folder} cannot be written ({exc}); stages are built in "
                       f"memory and not shared with other processes")
            warnings.warn(message, RuntimeWarning, stacklevel=5)
            log.warning(message)
        self._unwritable = True

    def counts(self) -> dict[str, float]:
        """Metrics: ``stages.reused`` / ``stages.built`` and ``stage.<name>.built`` (1 or 0)."""
        out = {"stages.reused": float(sum(v != "built" for v in self.events.values())),
               "stages.built": float(sum(v == "built" for v in self.events.values()))}
        out.update({f"stage.{k}.built": float(v == "built") for k, v in self.events.items()})
        return out
