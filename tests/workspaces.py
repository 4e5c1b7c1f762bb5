"""A throwaway copy of the shipped handbook to record runs on, as a user's project would."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from ragexp.data import shipped

# Hydra overrides pointing a run at the copy, relative to its ``work/`` folder.
RELATIVE = ["dataset.corpus_dir=data/corpus", "dataset.questions=data/golden", "cache_dir=cache"]


@contextmanager
def handbook_copy(tmp: Path) -> Iterator[tuple[Path, pytest.MonkeyPatch]]:
    """The handbook's corpus and golden set copied to ``tmp/work/data``, a sqlite store at
    ``tmp/mlflow.db`` and the current folder ``tmp/work`` (record runs with ``RELATIVE``).
    Yields ``(work, monkeypatch)``; the patch (store, folder) is undone on exit."""
    work = tmp / "work"
    shutil.copytree(shipped.path("handbook/corpus"), work / "data" / "corpus")
    shutil.copytree(shipped.path("handbook/golden"), work / "data" / "golden")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    mp.chdir(work)
    try:
        yield work, mp
    finally:
        mp.undo()
