"""BM25 at scale against bm25s (#21 item 6): tokenizing a corpus, fitting the index, and the
index's memory, on one synthetic folder (``synth.py``), all in one process.

1. tokenizing: ``TokenMatrix.build`` over every passage (as ``Resources.terms`` calls it, with
   the analyser's memos emptied first: a fresh process) against ``bm25s.tokenize`` with the
   same stopwords and the same Snowball stemmer (py_rust_stemmers ``stem_words``), the least
   CPU time of two runs each in ABBA order (both run on one thread; a shared machine's load
   inflates wall time at random); target ours >= 1.0x bm25s in passages per CPU second;
2. fitting: ``BM25Index.fit_terms`` on our tokens against ``bm25s.BM25.index`` on its own
   (one run each), and the peak RSS above the start of each fit (sampled every 5 ms);
3. memory: the fitted index's sparse matrices (``bench_scale.sparse_bytes``: weights and
   postings, shared buffers counted once) against bm25s's ``scores`` arrays; target <= 1.1x.
   On synthetic text both analysers yield the same terms, so both hold the same postings (the
   row says so); our pickled size (what the stage store writes) is reported beside it.

``python -m tools.bench_bm25_scale --passages 100000`` prints the rows; ``make bench`` runs it at
100,000 passages, ``make bench-scale`` at each of its sizes.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import tempfile
import time
from pathlib import Path

TOKENIZE_TARGET = 1.0  # ours / bm25s, passages per second, at 100,000 passages and more
MEMORY_TARGET = 1.1  # ours / bm25s, index bytes, at 1,000,000 passages


def _cold_analyser() -> None:
    """Empty every memo of the analyser, as in a fresh process."""
    from ragexp.text import analysis

    analysis._ascii_word_terms.cache_clear()
    analysis._general_word_terms.cache_clear()
    analysis.stem.cache_clear()
    analysis._part_terms.cache_clear()


def measure(texts: list[str], sampler=None, repeats: int = 2) -> dict:
    """Seconds, bytes and peak RSS (bytes above each fit's start) of both engines on
    ``texts``; ``sampler`` a running ``bench_scale.PeakRSS`` (one is started if None);
    tokenizing ``repeats`` times each, ABBA."""
    import bm25s
    import numpy as np
    from py_rust_stemmers import SnowballStemmer

    from ragexp.index.bm25 import BM25Index
    from ragexp.text.analysis import STOPWORDS
    from ragexp.text.tokens import TokenMatrix
    from tools.bench_scale import PeakRSS, rss_bytes, sparse_bytes

    own = sampler is None
    sampler = sampler or PeakRSS()
    stopwords, stemmer = sorted(STOPWORDS), SnowballStemmer("english")
    made: dict = {}

    def ours():
        made.pop("ours", None)
        _cold_analyser()
        made["ours"] = TokenMatrix.build(texts)

    def ref():
        made.pop("ref", None)
        made["ref"] = bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer.stem_words,
                                     show_progress=False)

    seconds = _cpu_best({"ours": ours, "ref": ref}, repeats=repeats)
    out = {"n": len(texts), "tokenize_s": seconds}
    fitted, fit_s, fit_peak = {}, {}, {}
    for name, fit in (("ours", lambda: BM25Index().fit_terms(made["ours"])),
                      ("ref", lambda: _bm25s_index(bm25s, made["ref"]))):
        gc.collect()
        start, st = rss_bytes(), {}
        with sampler.window(st, name):
            fitted[name] = fit()
        fit_s[name], fit_peak[name] = st[name]["s"], st[name]["peak"] - start
    ref_arrays = [a for a in fitted["ref"].scores.values() if isinstance(a, np.ndarray)]
    out.update(fit_s=fit_s, fit_peak=fit_peak,
               bytes={"ours": sparse_bytes(fitted["ours"]),
                      "ref": sum(a.nbytes for a in ref_arrays)},
               postings={"ours": int(fitted["ours"].weights.nnz),
                         "ref": int(len(fitted["ref"].scores["data"]))},
               pickled=len(pickle.dumps(fitted["ours"], protocol=pickle.HIGHEST_PROTOCOL)))
    if own:
        sampler.stop()
    return out


def _cpu_best(fns: dict, repeats: int) -> dict[str, float]:
    """Least CPU seconds of this process (``time.process_time``) of each callable, interleaved
    ABBA: both tokenizers run on one thread, so CPU time is their cost without the waits that
    other processes on a shared machine add to wall time."""
    best = {name: float("inf") for name in fns}
    for r in range(repeats):
        for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
            gc.collect()
            start = time.process_time()
            fns[name]()
            best[name] = min(best[name], time.process_time() - start)
    return best


def _bm25s_index(bm25s, tokenized):
    index = bm25s.BM25()
    index.index(tokenized, show_progress=False)
    return index


def rows(m: dict, Row) -> list:
    """``make bench`` rows (``tools.bench.Row``) of one ``measure`` record: tokenizing and
    fitting speed (targets >= 1.0x bm25s from 100,000 passages), index bytes (<= 1.1x bm25s,
    the target at 1,000,000 passages) and the peak RSS of fitting (no target)."""
    mib, n = 1 << 20, m["n"]
    tok = {k: n / v for k, v in m["tokenize_s"].items()}
    fit = {k: n / v for k, v in m["fit_s"].items()}
    b, peak = m["bytes"], m["fit_peak"]
    same = ("same postings" if m["postings"]["ours"] == m["postings"]["ref"] else
            f"postings {m['postings']['ours']:,} vs {m['postings']['ref']:,}")
    r_tok, r_fit, r_mem = tok["ours"] / tok["ref"], fit["ours"] / fit["ref"], b["ours"] / b["ref"]
    big = n >= 100_000
    return [
        Row(f"tokenize {n:,} passages: TokenMatrix.build vs bm25s.tokenize (same stopwords, "
            f"Snowball stemmer)", f"{tok['ours']:,.0f} passages/CPU s",
            f"{tok['ref']:,.0f} passages/CPU s", f"{r_tok:.2f}", f">= {TOKENIZE_TARGET:g}",
            r_tok >= TOKENIZE_TARGET if big else None),
        Row(f"fit BM25 on {n:,} passages: BM25Index.fit_terms vs bm25s.BM25.index",
            f"{fit['ours']:,.0f} passages/s", f"{fit['ref']:,.0f} passages/s", f"{r_fit:.2f}",
            ">= 1", r_fit >= 1 if big else None),
        Row(f"BM25 index memory at {n:,} passages: sparse matrices vs bm25s scores arrays "
            f"({same}; ours pickled: {m['pickled'] / mib:,.0f} MiB)",
            f"{b['ours'] / mib:,.1f} MiB", f"{b['ref'] / mib:,.1f} MiB", f"{r_mem:.2f}",
            f"<= {MEMORY_TARGET:g}", r_mem <= MEMORY_TARGET if n >= 1_000_000 else None),
        Row(f"peak RSS above the start while fitting BM25 on {n:,} passages",
            f"{peak['ours'] / mib:,.0f} MiB", f"{peak['ref'] / mib:,.0f} MiB",
            f"{peak['ours'] / max(peak['ref'], 1):.2f}", "-", None),
    ]


def scale_table(records: list[dict]) -> tuple[str, list[str]]:
    """``make bench-scale``'s table of these rows for every size measured (``record["bm25s"]``)
    and the names of the rows that failed their target."""
    from tools.bench import Row, render

    table = [row for r in records if "bm25s" in r for row in rows(r["bm25s"], Row)]
    return render(table), [row.name for row in table if row.ok is False]


def texts_of(folder: Path) -> list[str]:
    """The passages of a synthetic BEIR folder as the pipeline chunks them
    (``chunking=none``)."""
    from ragexp.data.datasets import BeirDataset
    from ragexp.stages.chunking import WholeDocumentChunker

    return [c.text for c in WholeDocumentChunker().chunk(BeirDataset(str(folder)).documents())]


def bench_rows(passages: int, Row, work: Path | None = None) -> list:
    """Generate a ``passages``-passage folder (under ``work``, or a temporary folder) and
    return its ``rows``."""
    from tools import synth

    with tempfile.TemporaryDirectory(prefix="ragexp-bm25-") as tmp:
        folder = synth.folder(Path(work or tmp), passages, min(1000, passages))
        return rows(measure(texts_of(folder)), Row)


def main(argv: list[str] | None = None) -> int:
    from tools.bench import Row, render

    parser = argparse.ArgumentParser(prog="python -m tools.bench_bm25_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--work", help="keep the synthetic folder here for reuse")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    table = bench_rows(args.passages, Row, Path(args.work) if args.work else None)
    print(render(table) + f"\n\n({time.perf_counter() - start:.0f} s)")
    return 1 if any(r.ok is False for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())
