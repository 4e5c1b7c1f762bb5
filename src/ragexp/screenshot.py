"""``make screenshot``: the MLflow UI comparing the latest ablation runs, rendered by headless
Chromium into a PNG for the README.

Starts ``mlflow ui`` on a free loopback port in its own process group (MLflow 3 starts job
workers beside the server, so it is stopped by group), opens the compare-runs page, and waits
for the single-page app to render with Chromium's virtual-time budget.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ragexp import tracking
from ragexp.report import ablation_runs


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("no Chromium found: `apt-get install chromium` (Debian) first")


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or ["docs/mlflow-ui.png"])[0]).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    browser = chromium()
    df = ablation_runs("ragexp-handbook")
    exp_id = tracking.ensure_experiment("ragexp-handbook")
    uri = tracking.tracking_uri()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host",
         "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit("mlflow ui did not start within 60 s")
        query = urllib.parse.urlencode({"runs": json.dumps(list(df["run_id"])),
                                        "experiments": json.dumps([exp_id])})
        url = f"http://127.0.0.1:{port}/#/compare-runs?{query}"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1600,1200",
                        "--virtual-time-budget=20000", f"--screenshot={out}", url],
                       check=True, capture_output=True, timeout=180)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    print(f"wrote {out} ({len(df)} runs compared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
