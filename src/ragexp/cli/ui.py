"""``ragexp ui`` (``make ui``): the MLflow UI of the store runs go to.

A tracking *server* (``MLFLOW_TRACKING_URI=http(s)://...``) already serves its UI: its URL is
printed, nothing is started (``mlflow ui`` would take the URI for a database and crash). A
local store (sqlite, a folder, a database URL) gets ``mlflow ui`` on it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from ragexp.tracking import store as tracking


@dataclass(frozen=True)
class Plan:
    """``url``: where the UI is; ``command``: what starts it (empty: it is already running)."""

    url: str
    command: tuple[str, ...] = ()
    note: str = ""


def plan(uri: str, host: str = "127.0.0.1", port: int = 5000) -> Plan:
    """What ``ragexp ui`` does for tracking URI ``uri`` (pure: nothing is started)."""
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("http", "https"):
        return Plan(uri.rstrip("/"), note="the tracking server serves its own UI")
    if scheme.startswith("databricks") or uri == "databricks":
        return Plan("", note="runs go to Databricks: open the experiment in your workspace")
    return Plan(f"http://{host}:{port}",
                (sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host,
                 "--port", str(port)))


def ui(host: str = "127.0.0.1", port: int = 5000) -> int:
    """Print where the UI is; start ``mlflow ui`` when the store is local. Returns exit code."""
    p = plan(tracking.tracking_uri(), host, port)
    if not p.command:
        print(f"MLflow UI: {p.url} ({p.note})" if p.url else p.note)
        return 0
    print(f"MLflow UI: {p.url} (Ctrl-C stops it)", flush=True)
    try:
        return subprocess.call(list(p.command))
    except KeyboardInterrupt:
        return 0
