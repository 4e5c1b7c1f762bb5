"""Write the handbook's ``structure`` questions and record them in the ``structure`` block of
``docs/questions.md`` (``make structure-questions``): the command, its summary line, the
questions per kind, and the first few of each kind with the start of their evidence.

The command is run in-process, as the page shows it, from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections import Counter
from pathlib import Path

from ragexp.cli.main import main as ragexp
from tools.readme import has_block, replace_block

OUT = "golden/structure/structure.jsonl"
COMMAND = ("questions", "generate", "--generator", "structure", "--n", "150", "--seed", "0",
           "--out", OUT, "source=structure", "progress=false")
PER_KIND = 4
QUOTE_CHARS = 70


def block(summary: str, records: list[dict]) -> str:
    """The block's markdown: the command and its summary, counts per kind, examples."""
    kinds = Counter(r["kind"] for r in records)
    lines = ["```text", f"$ ragexp {' '.join(COMMAND)}", summary, "```", "",
             "| kind | questions | examples (question: start of its evidence) |", "|---|---|---|"]
    for kind, n in sorted(kinds.items(), key=lambda kn: (-kn[1], kn[0])):
        shown = [r for r in records if r["kind"] == kind][:PER_KIND]
        examples = "<br>".join(
            f"{r['question']} ({r['evidence'][0]['doc']}: "
            f"{' '.join(r['evidence'][0]['quote'].replace('`', '').split())[:QUOTE_CHARS]}...)"
            for r in shown)
        lines.append(f"| {kind} | {n} | {examples.replace('|', '&#124;')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", default="docs/questions.md", help="page holding the block")
    args = parser.parse_args(argv)
    if not has_block(args.readme, "structure"):
        return 2
    Path(OUT).parent.mkdir(parents=True, exist_ok=True)
    Path(OUT).unlink(missing_ok=True)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = ragexp(list(COMMAND))
    if status != 0:
        print(captured.getvalue(), file=sys.stderr)
        return status
    summary = captured.getvalue().strip().splitlines()[-1]
    records = [json.loads(line) for line in Path(OUT).read_text(encoding="utf-8").splitlines()]
    replace_block(args.readme, "structure", block(summary, records))
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
