"""Run the ``ragexp`` CLI in a child process on a throwaway store: the tracking URI, cache and
environment every subprocess test needs, in one place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workspaces import PARENT_ENV, migrated_store, store_uri

ROOT = Path(__file__).resolve().parents[1]


def cli_env(tmp: Path, uri: str | None = None) -> dict[str, str]:
    """The environment of a child ``ragexp``: the sqlite store in ``tmp`` (``store_uri``) or
    the store at ``uri``, offline, no inherited sweep parent."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri or store_uri(tmp),
           "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}
    env.pop(PARENT_ENV, None)
    return env


def run_ragexp(tmp: Path, *args: str, timeout: int = 900,
               migrated: bool = True) -> subprocess.CompletedProcess:
    """``python -m ragexp ARGS cache_dir=TMP/cache progress=false`` from the repository root,
    on the ``migrated_store`` in ``tmp`` (``migrated=False``: on a store not created yet, for a
    test that the command creates none)."""
    uri = migrated_store(tmp) if migrated else store_uri(tmp)
    return subprocess.run([sys.executable, "-m", "ragexp", *args, f"cache_dir={tmp / 'cache'}",
                           "progress=false"], cwd=ROOT, env=cli_env(tmp, uri),
                          capture_output=True, text=True, timeout=timeout)
