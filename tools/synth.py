"""Synthetic BEIR folders of any size, for measuring how ragexp scales.

Passages are bags of pseudo-words drawn from a Zipf law (the word of frequency rank r is drawn
with probability proportional to ``1 / r**s``, s = 1.1 by default, as word frequencies in
English text roughly are; Zipf 1949), so term statistics (a few very common words, a long tail
of rare ones) stress BM25 and the tokenizer as real text does. Words are built from syllables
so that ``text.tokenize`` keeps each as one distinct term. Each query is written from one
passage: a few of its rarer words (the ones that identify it) plus common words drawn from the
same law, and that passage is its one relevant document in ``qrels/test.tsv`` (grade 1).

``python -m tools.synth OUT --passages 100000 [--queries 1000] [--seed 13]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ragexp.text.analysis import tokenize

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables


def vocabulary(size: int) -> list[str]:
    """``size`` pseudo-words of 2+ syllables ("baka", "zuvepo"), in rank order, each of which
    ``text.tokenize`` keeps as one term of its own (words its stemmer would merge are skipped)."""
    words, terms, n = [], set(), len(SYLLABLES)
    i = n  # start at two syllables
    while len(words) < size:
        digits, x = [], i
        while x:
            digits.append(SYLLABLES[x % n])
            x //= n
        word = "".join(reversed(digits))
        analysed = tokenize(word)
        if len(analysed) == 1 and analysed[0] not in terms:
            terms.add(analysed[0])
            words.append(word)
        i += 1
    return words


def zipf_probabilities(size: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** s
    return p / p.sum()


def generate(out: str | Path, passages: int, queries: int = 1000, seed: int = 13,
             vocab_size: int = 200_000, s: float = 1.1, mean_words: int = 50,
             query_rare: int = 3, query_common: int = 2) -> Path:
    """Write ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` under ``out``.

    Passage lengths are Poisson(``mean_words``) (at least 5 words); each query takes the
    ``query_rare`` rarest words of a random passage plus ``query_common`` Zipf draws.
    Raises ValueError on sizes below 1 or more queries than passages.
    """
    if passages < 1 or queries < 1 or queries > passages:
        raise ValueError(f"need 1 <= queries <= passages, got passages={passages}, "
                         f"queries={queries}")
    rng = np.random.default_rng(seed)
    words = np.array(vocabulary(vocab_size), dtype=object)
    cdf = np.cumsum(zipf_probabilities(vocab_size, s))
    root = Path(out)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    targets = set(rng.choice(passages, size=queries, replace=False).tolist())
    query_rows, qrel_rows = [], []
    block = 50_000
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for start in range(0, passages, block):
            n = min(block, passages - start)
            lengths = np.maximum(rng.poisson(mean_words, n), 5)
            ranks = np.searchsorted(cdf, rng.random(lengths.sum()), side="right")
            ranks = np.minimum(ranks, vocab_size - 1)
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            lines = []
            for j in range(n):
                doc = start + j
                r = ranks[bounds[j]:bounds[j + 1]]
                lines.append(json.dumps({"_id": f"d{doc}", "title": "",
                                         "text": " ".join(words[r])}))
                if doc in targets:
                    rare = np.unique(r)[-query_rare:]
                    common = np.minimum(np.searchsorted(cdf, rng.random(query_common)),
                                        vocab_size - 1)
                    terms = list(words[rare]) + list(words[common])
                    rng.shuffle(terms)
                    qid = f"q{len(query_rows)}"
                    query_rows.append(json.dumps({"_id": qid, "text": " ".join(terms)}))
                    qrel_rows.append(f"{qid}\td{doc}\t1")
            fh.write("\n".join(lines) + "\n")
    (root / "queries.jsonl").write_text("\n".join(query_rows) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                             + "\n".join(qrel_rows) + "\n", encoding="utf-8")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.synth", description=__doc__.split(
        "\n")[0])
    parser.add_argument("out")
    parser.add_argument("--passages", type=int, required=True)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    try:
        path = generate(args.out, args.passages, args.queries, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {args.passages:,} passages, {args.queries:,} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
