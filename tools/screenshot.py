"""``make screenshot``: the docs' pictures, rendered by headless Chromium into PNGs under ``docs/``.

- ``python -m tools.screenshot OUT``: the MLflow UI comparing the latest ablation runs. Starts
  ``mlflow ui`` on a free loopback port in its own process group (MLflow 3 starts job workers
  beside the server, so it is stopped by group), opens the compare-runs page, and waits for the
  single-page app to render with Chromium's virtual-time budget.
- ``python -m tools.screenshot --page OUT``: the page ``ragexp serve`` shows at ``/``, answering
  a handbook question. Starts the real ``ragexp serve`` (the champion model, or ``--run``) on a free
  loopback port, types the question and presses Ask in Chromium under Selenium (``browser.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

from ragexp.cli.tables import ablation_runs
from ragexp.tracking import store as tracking
from tools import browser
from tools.background import background_server

QUESTION = "How long are dead-lettered jobs kept?"


def serve_page(out: Path, question: str, run: str | None) -> None:
    """Screenshot of ``ragexp serve``'s page at ``/`` after asking ``question``."""
    from ragexp.serving.engine import ServingError, champion_run_id

    try:
        if not run:
            champion_run_id()  # say why before starting a server that would exit
    except ServingError as exc:
        raise SystemExit(str(exc)) from None
    serve = lambda port: [sys.executable, "-m", "ragexp.cli.main", "serve",  # noqa: E731
                          "--port", str(port), *(["--run", run] if run else [])]
    with background_server(serve) as port:
        browser.screenshot_answer(f"http://127.0.0.1:{port}/", question, out)
    print(f"wrote {out} (ragexp serve's page answering {question!r})")


def mlflow_compare(out: Path, overrides: tuple[str, ...] = ()) -> None:
    """Screenshot of the MLflow UI comparing the ablation runs of the handbook experiment
    (``overrides``: those the sweep added to every ablation)."""
    chromium = browser.chromium()
    df = ablation_runs("ragexp-handbook", overrides)
    exp_id = tracking.ensure_experiment("ragexp-handbook")
    mlflow_ui = lambda port: [sys.executable, "-m", "mlflow", "ui",  # noqa: E731
                              "--backend-store-uri", tracking.tracking_uri(),
                              "--host", "127.0.0.1", "--port", str(port)]
    with background_server(mlflow_ui, env={"MLFLOW_DISABLE_TELEMETRY": "true"}) as port:
        query = urllib.parse.urlencode({"runs": json.dumps(list(df["run_id"])),
                                        "experiments": json.dumps([exp_id])})
        url = f"http://127.0.0.1:{port}/#/compare-runs?{query}"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1600,1200",
                        "--virtual-time-budget=20000", f"--screenshot={out}", url],
                       check=True, capture_output=True, timeout=180)
    print(f"wrote {out} ({len(df)} runs compared)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.screenshot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default="docs/mlflow-ui.png", help="PNG to write")
    p.add_argument("--page", action="store_true", help="the serving page, not the MLflow UI")
    p.add_argument("--question", default=QUESTION, help="question asked on the page")
    p.add_argument("--run", help="serve this run (id or unique prefix), not the champion")
    p.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="the overrides the sweep added to every ablation (make sweep's)")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        if args.page:
            serve_page(out, args.question, args.run)
        else:
            mlflow_compare(out, tuple(args.overrides))
    except browser.BrowserMissing as exc:
        raise SystemExit(str(exc)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
