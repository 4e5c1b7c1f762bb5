"""Which batching rule embeds fastest here: MiniLM's texts/s under candidate rules of
``FastEmbedEmbedder.batches`` (fixed batches, token budgets) against fastembed's own
``TextEmbedding.embed`` at a fixed batch size, on handbook passages and on SciFact-like
abstracts of 200-400 tokens (handbook sentences joined; the model reads 256), interleaved
round by round (ABBA), the best of the rounds kept.

``python -m tools.bench_batches [--passages N] [--abstracts N] [--rounds R]`` prints one line
per timing and a table of ratios to fastembed's batch; docs/benchmarks.md#batches holds what it
measured behind ``embedder.batch_tokens``'s default.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time

import numpy as np

# (batch_size, batch_tokens) of ragexp's embedder: fixed 8 texts, budgets of padded tokens
CANDIDATES = {"ours fixed 8": (8, None), "ours budget 1024": (64, 1024),
              "ours budget 2048": (64, 2048)}
REFERENCE_BATCH = 8  # fastembed's fastest fixed batch on this machine (issue #22)


def abstracts(pool: list[str], n: int, counter, seed: int = 13) -> list[str]:
    """``n`` texts of 200-400 of the model's tokens, sentences of ``pool`` drawn at random."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        target, parts = rng.randint(200, 400), []
        while counter.counts([" ".join(parts)])[0] < target:
            parts.append(rng.choice(pool))
        out.append(" ".join(parts))
    return out


def measure(emb, sets: dict[str, list[str]], rounds: int, candidates=CANDIDATES,
            reference: int = REFERENCE_BATCH) -> dict[str, dict[str, float]]:
    """``{set: {candidate: texts/s}}``, the best of ``rounds`` interleaved timings each; the
    embedder's batch settings are restored afterwards."""
    raw, saved = emb._model, (emb.batch_size, emb.batch_tokens)

    def ours(texts, size, tokens):
        emb.batch_size, emb.batch_tokens = size, tokens
        emb.embed(texts)

    out = {}
    try:
        for name, texts in sets.items():
            fns = {k: (lambda a=a, texts=texts: ours(texts, *a)) for k, a in candidates.items()}
            fns[f"fastembed {reference}"] = lambda texts=texts: np.stack(
                list(raw.embed(texts, batch_size=reference)))
            best = {k: float("inf") for k in fns}
            for r in range(rounds):
                for k in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                    start = time.perf_counter()
                    fns[k]()
                    seconds = time.perf_counter() - start
                    best[k] = min(best[k], seconds)
                    print(f"  {name} round {r} {k}: {len(texts) / seconds:.1f} texts/s",
                          flush=True)
            out[name] = {k: len(texts) / s for k, s in best.items()}
    finally:
        emb.batch_size, emb.batch_tokens = saved
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_batches",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=160)
    parser.add_argument("--abstracts", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    # defer heavy import
    from ragexp.data import shipped
    from ragexp.data.golden import load_corpus
    from ragexp.index.embedders import FastEmbedEmbedder
    from ragexp.text.analysis import normalize_ws, split_sentences
    from tools.bench import passages

    docs = load_corpus(shipped.path("handbook/corpus")).values()
    with tempfile.TemporaryDirectory(prefix="ragexp-batches-") as tmp:
        emb = FastEmbedEmbedder("minilm-int8", cache_dir=f"{tmp}/models")
        counter = emb.tokens()
        pool = sorted({s for d in docs for s in split_sentences(normalize_ws(d.text)[0])
                       if len(s.split()) >= 4})
        sets = {"handbook": passages(docs, args.passages),
                "abstracts": abstracts(pool, args.abstracts, counter)}
        for name, texts in sets.items():
            c = counter.counts(texts)
            print(f"{name}: {len(texts)} texts, tokens median {int(np.median(c))}, p10 "
                  f"{int(np.percentile(c, 10))}, p90 {int(np.percentile(c, 90))}")
        emb.embed(sets["handbook"][:16])  # onnxruntime's first batches are not throughput
        rates = measure(emb, sets, args.rounds)
    print("\n| texts | rule | texts/s | / fastembed batch 8 |\n|---|---|---|---|")
    for name, row in rates.items():
        ref = row[f"fastembed {REFERENCE_BATCH}"]
        for k, rate in row.items():
            print(f"| {name} | {k} | {rate:.1f} | {rate / ref:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
