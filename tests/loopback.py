"""A real uvicorn serving an ASGI app on a free loopback port, in a thread of the test process:
what the browser and fuzzing tests talk to over HTTP."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from tools.background import free_port


@contextmanager
def serving(app, start_timeout: float = 60) -> Iterator[str]:
    """Yields the base URL (``http://127.0.0.1:PORT``) once uvicorn has started; stops it on
    exit. Fails the test if uvicorn has not started within ``start_timeout`` seconds."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
