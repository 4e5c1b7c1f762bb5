"""A server in the background on a free loopback port, stopped by process group: MLflow 3's
``mlflow ui`` starts job workers beside the server, which a plain kill would leave behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from typing import Callable, Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def background_server(command: Callable[[int], list[str]], health: str = "/health",
                      timeout_s: float = 120, env: dict | None = None) -> Iterator[int]:
    """Start ``command(port)``, wait until ``GET health`` answers, yield the port, stop it."""
    port = free_port()
    proc = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{health}", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(command(port))} did not start "
                                       f"(exit code {proc.poll()})") from None
                time.sleep(0.5)
        yield port
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:  # the group is gone already (the server exited early)
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
