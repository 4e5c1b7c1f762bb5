"""Regenerate the handbook's generated questions and what docs/questions.md says of them
(``make questions``): ``golden/generated/known_item.jsonl`` (400 ``known_item`` questions, seed
0, the generator's defaults) with its run line (block ``generated``), and what the collection
model's noise costs (block ``noise``): the same 400 written with ``generator.lam=0.1``, the old
default, and the share of questions of each that hold a term not in their passage.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

from ragexp.cli.main import main as ragexp
from ragexp.data.golden import load_corpus
from ragexp.generate.known_item import terms
from tools.readme import has_block, replace_block

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = "golden/generated/known_item.jsonl"
GENERATE = ["questions", "generate", "--generator", "known_item", "--n", "400", "--seed", "0"]
NOISE = "generator.lam=0.1"


def generate(out: Path, *overrides: str) -> str:
    """Write ``out`` afresh with ``GENERATE`` and the overrides; return the run's line. Raises
    ``RuntimeError`` when the command fails."""
    out.unlink(missing_ok=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = ragexp([*GENERATE, "--out", str(out), *overrides, "progress=false"])
    if status != 0:
        raise RuntimeError(f"questions generate {' '.join(overrides)} failed ({status})")
    return printed.getvalue().strip().splitlines()[-1].replace(f"{ROOT}/", "")


def off_passage(path: Path, docs: dict) -> tuple[int, int]:
    """(questions of ``path`` holding a term that is not a term of their passage, questions)."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    off = 0
    for rec in records:
        p = rec["passage"]
        own = set(terms(docs[p["doc"]].text[p["start"]:p["end"]]))
        off += any(t not in own for t in rec["question"].split())
    return off, len(records)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.generated_questions", description=__doc__)
    p.add_argument("--readme", help="write the run line and the noise table into this markdown "
                   "file's generated and noise blocks (make questions: docs/questions.md)")
    args = p.parse_args(argv)
    if not (has_block(args.readme, "generated") and has_block(args.readme, "noise")):
        return 2
    shipped = ROOT / SHIPPED
    shipped.parent.mkdir(parents=True, exist_ok=True)
    line = generate(shipped)
    docs = load_corpus(ROOT / "corpus")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragexp-noise-") as tmp:
        noisy = Path(tmp) / "known_item.jsonl"
        noisy_line = generate(noisy, NOISE)
        for lam, path, said in (("0.1 (the default before)", noisy, noisy_line),
                                ("0.0 (the default)", shipped, line)):
            off, n = off_passage(path, docs)
            rows.append(f"| {lam} | {n} | {off} | {100 * off / n:.1f} % |")
    command = f"ragexp {' '.join(GENERATE)} --out {SHIPPED}"
    generated = "\n".join(["```text", f"$ {command}", line, "```"])
    noise = "\n".join(["| `generator.lam` | questions | with a term not in their passage | share |",
                       "|---|---|---|---|", *rows, "",
                       f"(`{command} {NOISE}` for the first row, into another file; the "
                       f"shipped file for the second; a term is one of `known_item.terms` of "
                       f"the question's passage.)"])
    print(generated, noise, sep="\n\n")
    if args.readme:
        replace_block(args.readme, "generated", generated)
        replace_block(args.readme, "noise", noise)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
