"""Embedding rows of ``make bench-scale``: MiniLM's passages/s on this machine with the time it
projects for 1,000,000 passages, and the import of precomputed vectors (``embedder=precomputed``:
load and every check) against ``np.load`` of the same matrix.

``python -m tools.bench_embedding [--minilm-passages N] [--import-rows N]`` prints the notes
alone (smaller sizes for a check); ``tools.bench_scale`` adds them to its block.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tools.timing import best_of

IMPORT_TARGET = 2.0  # precomputed import / np.load, at most


def minilm_rate(n: int, work: Path) -> tuple[float, int]:
    """``(passages/s, passages)``: ``n`` distinct handbook passages (``bench.passages``)
    through ``EmbeddingCache.embed`` on an empty cache (a fresh folder under ``work``, removed
    after: a cache kept in ``work`` made a second ``make bench-scale`` time cache hits, 48,562
    "passages/s") with MiniLM at its defaults. Raises ``AssertionError`` unless the cache
    embedded every passage."""
    from ragexp.data import shipped
    from ragexp.data.golden import load_corpus
    from ragexp.index.cache import EmbeddingCache
    from ragexp.index.embedders import FastEmbedEmbedder
    from tools.bench import passages

    texts = passages(load_corpus(shipped.path("handbook/corpus")).values(), n)
    emb = FastEmbedEmbedder("minilm-int8", cache_dir=str(work / "models"))
    emb.embed(texts[:8])  # warm up onnxruntime
    with tempfile.TemporaryDirectory(dir=work, prefix="minilm-cache-") as root:
        cache = EmbeddingCache(root=root)
        start = time.perf_counter()
        cache.embed(emb, texts, "passage", progress=False)
        seconds = time.perf_counter() - start
    assert cache.misses == len(texts) and cache.hits == 0, (cache.misses, cache.hits)
    return len(texts) / seconds, len(texts)


def import_ratio(rows: int, work: Path, dim: int = 384) -> dict[str, float]:
    """Seconds of ``np.load`` of a (rows, dim) float32 unit-row matrix and of building
    ``PrecomputedEmbedder`` on it (ids read, every check, the memo cleared before each), best
    of 5 each, interleaved; both read the same file, warm in the page cache. Both allocate
    the matrix afresh each time, whose page faults vary by 2-5x from one call to the next on
    this machine's virtual machine: hence 5, not 3."""
    from ragexp.index import precomputed

    folder = work / f"precomputed-{rows}x{dim}"
    if not (folder / "passages.npy").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(7)
        x = rng.standard_normal((rows, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        np.save(folder / "passages.npy", x)
        (folder / "passages.txt").write_text("".join(f"doc{i}\n" for i in range(rows)))
        np.save(folder / "queries.npy", x[:10])
        (folder / "queries.txt").write_text("".join(f"q{i}\n" for i in range(10)))
        del x

    def ours():
        precomputed._read.cache_clear()
        precomputed.PrecomputedEmbedder(str(folder))

    t = best_of({"np.load": lambda: np.load(folder / "passages.npy"), "precomputed": ours},
                repeats=5)
    precomputed._read.cache_clear()
    return {"rows": rows, "dim": dim, **t}


def notes(minilm_passages: int, import_rows: int, work: Path) -> tuple[list[str], list[str]]:
    """``(notes, failed targets)`` of both measurements."""
    out, failed = [], []
    if minilm_passages:
        rate, n = minilm_rate(minilm_passages, work)
        out.append(f"MiniLM (int8, CPU, fastembed defaults) through the cache: {rate:.0f} "
                   f"passages/s on {n:,} handbook passages; 1,000,000 passages of that length "
                   f"would take {1e6 / rate / 3600:.1f} h on this machine. GPU not measured: "
                   f"none here (embedder.device=cuda, docs/embedding.md)")
    if import_rows:
        t = import_ratio(import_rows, work)
        ratio = t["precomputed"] / t["np.load"]
        out.append(f"precomputed import of {t['rows']:,} x {t['dim']} float32 (ids, every "
                   f"check): {t['precomputed'] * 1e3:,.0f} ms vs np.load of the same matrix "
                   f"{t['np.load'] * 1e3:,.0f} ms = {ratio:.2f}x (target <= {IMPORT_TARGET:g} "
                   f"at 1,000,000 rows; smaller matrices pay the fixed costs more)")
        if ratio > IMPORT_TARGET and t["rows"] >= 1_000_000:
            failed.append(f"precomputed import at {t['rows']:,} rows: {ratio:.2f}x np.load")
    return out, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_embedding",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--minilm-passages", type=int, default=1000)
    parser.add_argument("--import-rows", type=int, default=1_000_000)
    parser.add_argument("--work", default=None, help="folder for the matrices (default: temp)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-embed-") as tmp:
        lines, failed = notes(args.minilm_passages, args.import_rows, Path(args.work or tmp))
    print("\n".join(f"- {n}" for n in lines + [f"FAIL: {f}" for f in failed]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
