"""``ragexp ui`` (``make ui``): the MLflow UI of the store runs go to.

A tracking *server* (``MLFLOW_TRACKING_URI=http(s)://...``) already serves its UI: its URL is
printed, nothing is started (``mlflow ui`` would take the URI for a database and crash). A
local store (sqlite, a folder, a database URL) gets ``mlflow ui`` on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    """Print where the UI is; start ``mlflow ui`` when the store is local, in a process group
    of its own, and stop that whole group (its server and worker processes) when ``ragexp ui``
    ends: Ctrl-C, SIGTERM, or the UI exiting. Returns exit code."""
    p = plan(tracking.tracking_uri(), host, port)
    if not p.command:
        print(f"MLflow UI: {p.url} ({p.note})" if p.url else p.note)
        return 0
    print(f"MLflow UI: {p.url} (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(list(p.command), start_new_session=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_group(proc)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to ``proc``'s process group (``mlflow ui`` starts a server and workers there),
    SIGKILL after ``grace_s`` seconds if the leader has not exited; nothing when it is gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace_s)
            if sig == signal.SIGTERM:
                _reap_group(proc.pid, grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _reap_group(pgid: int, grace_s: float) -> None:
    """Wait up to ``grace_s`` seconds for the rest of group ``pgid`` (workers the leader did
    not wait for) to exit, then SIGKILL what is left."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
