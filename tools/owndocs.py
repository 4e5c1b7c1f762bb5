"""Record the commands of ``docs/own-docs.md`` in its ``own-docs`` block (``make own-docs``): the
documented commands, run as written in a fresh temporary folder outside the repository, with
their output.

Each command string is what the page shows and what ``bash -c`` ran, in that folder. The
Hydra job log of a sweep is long; only ragexp's own lines are kept, and the block says how many
log lines were left out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.readme import has_block, replace_block

BIN = Path(sys.executable).parent  # ragexp and python of this environment
COMMANDS = (
    "ragexp init --example my-docs",
    "cd my-docs && python -m ragexp --config-dir conf -m '+ablation=glob(my_docs_*)'",
    "cd my-docs && ragexp compare --experiment ragexp-my_docs",
)
KEEP = ("run ", "sweep done", "  skipped", "  FAILED", "wrote ", "Next", "  ", "|")


def run(command: str, cwd: Path) -> str:
    """``$ command`` and its output (ragexp's lines; Hydra's INFO log lines counted, not shown).
    Raises ``RuntimeError`` with the output when the command fails: a page must not record a
    failure as if it were the documented behaviour."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)
    lines = (proc.stdout + proc.stderr).rstrip().splitlines()
    if proc.returncode != 0:
        raise RuntimeError(f"{command!r} failed ({proc.returncode}):\n" + "\n".join(lines[-40:]))
    kept = [ln for ln in lines if ln.startswith(KEEP)]
    omitted = len(lines) - len(kept)
    note = [f"[{omitted} lines of Hydra/MLflow log omitted]"] if omitted else []
    return "\n".join([f"$ {command}", *kept, *note])


def build() -> str:
    with tempfile.TemporaryDirectory(prefix="ragexp-own-") as tmp:
        steps = [run(c, Path(tmp)) for c in COMMANDS]
    return "\n".join(["```text", "\n\n".join(steps), "```"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.owndocs", description=__doc__)
    p.add_argument("--readme", help="write the output into this markdown file's own-docs block "
                   "(make own-docs: docs/own-docs.md)")
    args = p.parse_args(argv)
    if not has_block(args.readme, "own-docs"):
        return 2
    content = build()
    print(content)
    if args.readme:
        replace_block(args.readme, "own-docs", content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
