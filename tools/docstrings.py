"""A BEIR folder of real English paragraphs found on any machine with ragexp installed: the
docstrings of the Python packages in the running interpreter's ``site-packages`` and of its
standard library, split at blank lines, whitespace collapsed, paragraphs of fewer than 8 words
and repeats (the same text twice) left out, in a seeded random order. Each query is a window of
``query_words`` consecutive words of a random paragraph, which is its one relevant document.

It exists to measure what real text gives a vector index that ``tools.synth``'s pseudo-words
may not: docs/scale.md compares the relative contrast of hash vectors of these paragraphs with
synthetic passages' and calibrates ``synth.TOPICS`` on it. The text is what this interpreter
holds, so the folder is the same on machines with the same packages installed (``make
install`` pins none of their versions: the folder records how many files and paragraphs it
read in ``source.json``).

``python -m tools.docstrings OUT [--queries 1000] [--seed 13]``
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import sysconfig
import warnings
from pathlib import Path

import numpy as np

MIN_WORDS = 8


def source_files() -> list[Path]:
    """Every ``.py`` file under this interpreter's ``purelib`` and ``stdlib`` paths, sorted."""
    roots = {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib")}
    return sorted({f for root in roots for f in root.rglob("*.py")})


def paragraphs(files: list[Path]) -> list[str]:
    """The distinct docstring paragraphs (``MIN_WORDS`` words or more) of ``files``, in file
    order; files that do not parse as Python are skipped."""
    seen, out = set(), []
    for f in files:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            for para in re.split(r"\n\s*\n", doc or ""):
                words = para.split()
                if len(words) < MIN_WORDS:
                    continue
                text = " ".join(words)
                digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
                if digest not in seen:
                    seen.add(digest)
                    out.append(text)
    return out


def write(out: str | Path, queries: int = 1000, seed: int = 13, query_words: int = 8) -> Path:
    """Write ``corpus.jsonl`` (ids ``p0``, ``p1``, ... in the shuffled order), ``queries.jsonl``,
    ``qrels/test.tsv`` and ``source.json`` under ``out``. Raises ValueError when fewer
    paragraphs than ``queries`` are found."""
    files = source_files()
    texts = paragraphs(files)
    if len(texts) < queries:
        raise ValueError(f"found {len(texts)} paragraphs, fewer than the {queries} queries asked")
    rng = np.random.default_rng(seed)
    texts = [texts[i] for i in rng.permutation(len(texts))]
    root = Path(out)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"p{i}", "title": "", "text": t}) + "\n"
        for i, t in enumerate(texts)), encoding="utf-8")
    rows, qrels = [], []
    for qi, di in enumerate(rng.choice(len(texts), queries, replace=False).tolist()):
        words = texts[di].split()
        start = int(rng.integers(0, max(1, len(words) - query_words + 1)))
        rows.append(json.dumps({"_id": f"q{qi}", "text": " ".join(
            words[start:start + query_words])}) + "\n")
        qrels.append(f"q{qi}\tp{di}\t1\n")
    (root / "queries.jsonl").write_text("".join(rows), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(qrels),
                                             encoding="utf-8")
    (root / "source.json").write_text(json.dumps(
        {"files": len(files), "paragraphs": len(texts), "python": sys.version.split()[0],
         "seed": seed}) + "\n", encoding="utf-8")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docstrings",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    try:
        root = write(args.out, args.queries, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    held = json.loads((root / "source.json").read_text())
    print(f"wrote {root}: {held['paragraphs']:,} paragraphs from {held['files']:,} files, "
          f"{args.queries:,} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
