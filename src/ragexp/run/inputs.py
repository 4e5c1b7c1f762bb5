"""The files a run reads beside its dataset, as part of its identity.

A run is skipped when a finished one has its identity (``tracking.config_hash``: the measured
config, the data fingerprint, the code). The dataset's files are in the data fingerprint; the
other files a config names were not, so editing the TREC run of ``retriever=trec_run``, the
vectors of ``embedder=precomputed``, a model folder or the judge's labels and running the same
command again reused the old run's numbers ("skipping: identical config, data and code").
``hashes`` gives each such file's digest, keyed by its config key, for the identity.

Which keys: every field whose schema declares ``path`` (the runner checks those exist) or
``input`` metadata (``embedder.path``, checked by the precomputed embedder itself), in typed
nodes and in untyped ones whose ``_target_`` is a schema's (a hybrid part's retriever or
embedder), the ``dataset`` group left out (its fingerprint has them). A file's digest is the
sha256 of its bytes, hashed once per process for its path, size and modification time (the
cache the embedders' model files go through: ``embedders.file_sha256``); a file
over ``HASHED_MAX`` bytes counts by its size and modification time instead (hashing 1.5 GB of
precomputed vectors would double their import; ``precomputed`` keys its cache the same way). A
folder's digest covers each file under it (names starting with ``.`` left out) by relative
path and digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ragexp.config import schema
from ragexp.data.readers import is_hidden
from ragexp.index.embedders import file_sha256

HASHED_MAX = 256 << 20  # bytes: a larger file counts by size and modification time


def hashes(cfg: DictConfig) -> dict[str, str]:
    """``{"input:<config key>": digest}`` for each input file or folder ``cfg`` names (see the
    module docstring); a path that does not exist has the digest ``"missing"`` (the run itself
    refuses it). Several paths under one key are hashed in order into one digest."""
    out = {}
    for key, value in sorted(_input_values(cfg, "")):
        paths = list(value) if isinstance(value, (list, ListConfig)) else [value]
        h = hashlib.sha256()
        for p in paths:
            h.update(f"{p}\0{_digest(Path(str(p)).expanduser())}\0".encode())
        out[f"input:{key}"] = h.hexdigest()[:16]
    return out


def _input_values(node: DictConfig, prefix: str) -> list[tuple[str, Any]]:
    found = []
    fields = _input_fields(node)
    for key in node:
        if key in ("hydra", "dataset") and not prefix:
            continue
        if key in fields and not OmegaConf.is_missing(node, key) and node[key] is not None:
            found.append((f"{prefix}{key}", node[key]))
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found += _input_values(child, f"{prefix}{key}.")
    return found


def _input_fields(node: DictConfig) -> set[str]:
    schema_type = OmegaConf.get_type(node)
    if not (schema_type and dataclasses.is_dataclass(schema_type)):
        target = node.get("_target_") if "_target_" in node else None
        schema_type = _schemas_by_target().get(target)
    if schema_type is None:
        return set()
    return {f.name for f in dataclasses.fields(schema_type)
            if "path" in f.metadata or "input" in f.metadata}


@lru_cache(maxsize=1)
def _schemas_by_target() -> dict[str, type]:
    """Each schema dataclass of ``config.schema`` by the ``_target_`` it builds."""
    out = {}
    for value in vars(schema).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            target = {f.name: f.default for f in dataclasses.fields(value)}.get("_target_")
            if isinstance(target, str):
                out.setdefault(target, value)
    return out


def _digest(path: Path) -> str:
    if path.is_file():
        st = path.stat()
        if st.st_size > HASHED_MAX:
            return f"size={st.st_size},mtime_ns={st.st_mtime_ns}"
        return file_sha256(path.resolve())
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            rel = p.relative_to(path)
            if not is_hidden(rel):
                h.update(f"{rel.as_posix()}\0{_digest(p)}\0".encode())
        return h.hexdigest()
    return "missing"
