"""Synthetic BEIR folders of any size, for measuring how ragexp scales.

Passages are bags of pseudo-words drawn from a Zipf law (the word of frequency rank r is drawn
with probability proportional to ``1 / r**s``, s = 1.1 by default, as word frequencies in
English text roughly are; Zipf 1949), so term statistics (a few very common words, a long tail
of rare ones) stress BM25 and the tokenizer as real text does. Words are built from syllables
so that ``text.tokenize`` keeps each as one distinct term. Each query is written from one
passage: a few of its rarer words (the ones that identify it) plus common words drawn from the
same law, and that passage is its one relevant document in ``qrels/test.tsv`` (grade 1).

With ``topics`` > 0 each passage also has a topic, as real text does: it draws a share
(``topic_share``) of its words from its topic's own vocabulary (``topic_vocab`` words of the
general one, chosen per topic, drawn by the same Zipf law within the topic) and the rest from
the general law, a one-topic-per-document mixture (the "mixture of unigrams" of Nigam et al.,
"Text classification from labeled and unlabeled documents using EM", Machine Learning 2000).
Without topics no group of passages shares words more than any other, so their vectors have
no neighbourhoods (docs/scale.md measures what that does to a graph index); ``TOPICS`` is the
setting whose hash vectors match the neighbourhood structure of real paragraphs (the relative
contrast measured in docs/scale.md), which ``make bench-scale`` uses.

``python -m tools.synth OUT --passages 100000 [--queries 1000] [--seed 13] [--topics 1000]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ragexp.text.analysis import tokenize

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables
# make bench-scale's topic structure: 1,000 topics, three words in four from the topic's own 700
# (docs/scale.md: hash vectors of these passages have the relative contrast of real paragraphs)
TOPICS = {"topics": 1000, "topic_share": 0.75, "topic_vocab": 700}
TOPIC_FLOOR = 100  # topic words are drawn from general ranks >= this: not the commonest words


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
             query_rare: int = 3, query_common: int = 2, topics: int = 0,
             topic_share: float = 0.75, topic_vocab: int = 700) -> Path:
    """Write ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` under ``out``.

    Passage lengths are Poisson(``mean_words``) (at least 5 words); each query takes the
    ``query_rare`` rarest words of a random passage plus ``query_common`` Zipf draws. With
    ``topics`` > 0, each passage draws its topic uniformly from ``topics`` and each of its
    words comes from that topic's ``topic_vocab`` words with probability ``topic_share``
    (module docstring); ``topics=0`` writes the same bytes as before topics existed.
    Raises ValueError on sizes below 1, more queries than passages, a ``topic_share``
    outside [0, 1] or a ``topic_vocab`` outside [1, vocab_size - TOPIC_FLOOR].
    """
    if passages < 1 or queries < 1 or queries > passages:
        raise ValueError(f"need 1 <= queries <= passages, got passages={passages}, "
                         f"queries={queries}")
    if topics < 0 or not 0.0 <= topic_share <= 1.0 or not (
            1 <= topic_vocab <= vocab_size - TOPIC_FLOOR):
        raise ValueError(f"need topics >= 0, 0 <= topic_share <= 1 and 1 <= topic_vocab <= "
                         f"{vocab_size - TOPIC_FLOOR}, got topics={topics}, topic_share="
                         f"{topic_share}, topic_vocab={topic_vocab}")
    rng = np.random.default_rng(seed)
    words = np.array(vocabulary(vocab_size), dtype=object)
    cdf = np.cumsum(zipf_probabilities(vocab_size, s))
    if topics:  # its own generator, so topics=0 draws exactly what it drew before
        trng = np.random.default_rng([seed, topics])
        topic_cdf = np.cumsum(zipf_probabilities(topic_vocab, s))
        topic_words = np.stack([trng.choice(np.arange(TOPIC_FLOOR, vocab_size), topic_vocab,
                                            replace=False) for _ in range(topics)])
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
            if topics:
                of_word = np.repeat(trng.integers(0, topics, n), lengths)
                within = np.minimum(np.searchsorted(topic_cdf, trng.random(len(ranks)),
                                                    side="right"), topic_vocab - 1)
                ranks = np.where(trng.random(len(ranks)) < topic_share,
                                 topic_words[of_word, within], ranks)
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


def folder(work: str | Path, passages: int, queries: int, topics: dict | None = None) -> Path:
    """The folder ``work/synth-{passages}-{queries}``, with ``-t{topics}-{topic_share}-
    {topic_vocab}`` appended when ``topics`` (``generate``'s three topic keywords, such as
    ``TOPICS``) names topics, generated with seed 13 unless its qrels exist: the one place the
    bench tools name their folders, so folders of different text never share a name."""
    topics = topics or {}
    name = f"synth-{passages}-{queries}"
    if topics.get("topics"):
        name += f"-t{topics['topics']}-{topics['topic_share']}-{topics['topic_vocab']}"
    root = Path(work) / name
    if not (root / "qrels" / "test.tsv").is_file():
        generate(root, passages, queries, **topics)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.synth", description=__doc__.split(
        "\n")[0])
    parser.add_argument("out")
    parser.add_argument("--passages", type=int, required=True)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--topics", type=int, default=0,
                        help=f"topics (0: none; make bench-scale uses {TOPICS['topics']})")
    parser.add_argument("--topic-share", type=float, default=TOPICS["topic_share"])
    parser.add_argument("--topic-vocab", type=int, default=TOPICS["topic_vocab"])
    args = parser.parse_args(argv)
    try:
        path = generate(args.out, args.passages, args.queries, args.seed, topics=args.topics,
                        topic_share=args.topic_share, topic_vocab=args.topic_vocab)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {args.passages:,} passages, {args.queries:,} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
