"""``make screenshot``: the MLflow UI comparing the latest ablation runs, rendered by headless
Chromium into a PNG for the README.

Starts ``mlflow ui`` on a free loopback port in its own process group (MLflow 3 starts job
workers beside the server, so it is stopped by group), opens the compare-runs page, and waits
for the single-page app to render with Chromium's virtual-time budget.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

from ragexp import tracking
from ragexp.background import background_server
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
    mlflow_ui = lambda port: [sys.executable, "-m", "mlflow", "ui",  # noqa: E731
                              "--backend-store-uri", tracking.tracking_uri(),
                              "--host", "127.0.0.1", "--port", str(port)]
    with background_server(mlflow_ui, env={"MLFLOW_DISABLE_TELEMETRY": "true"}) as port:
        query = urllib.parse.urlencode({"runs": json.dumps(list(df["run_id"])),
                                        "experiments": json.dumps([exp_id])})
        url = f"http://127.0.0.1:{port}/#/compare-runs?{query}"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1600,1200",
                        "--virtual-time-budget=20000", f"--screenshot={out}", url],
                       check=True, capture_output=True, timeout=180)
    print(f"wrote {out} ({len(df)} runs compared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
