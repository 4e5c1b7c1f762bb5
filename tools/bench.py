"""``make bench``: one table of ratios, ragexp's path against a reference measured side by side.

Absolute timings on a small shared machine drift by tens of percent from run to run, so every
row times ragexp and its reference in the same process, interleaved, on the same inputs, and the
verdict is on their ratio (both throughputs are printed so a slow machine is visible too):

1. passage embedding through ``EmbeddingCache.embed`` (fresh cache, so every text is a miss: key
   hashing, cache reads and atomic writes are the overhead) vs fastembed's own ``embed``;
2. dense search of a batch of queries, ``FlatIPIndex.search`` vs a default ``faiss.IndexFlatIP``;
3. BM25 retrieval for all queries at 100,000 documents vs ``bm25s`` on the same tokens;
4. a second run with the same embedder and chunking must embed nothing;
5. the packed embedding cache at 100,000 passages: reading every cached vector against
   ``np.load`` of the same matrix, and its disk use against the raw vectors (``bench_cache.py``);
6. MLflow Tracing of served answers, on against off (``bench_traces.py``);
7. ragexp's default embedding (its token budget per batch, through the cache) against the best
   texts/s any fastembed setting (batch size x data-parallel workers) reaches on this machine,
   naming that setting and ragexp's best of the same grid (target: the default >= 0.95);
   MiniLM's texts/s on a GPU beside the CPU row where onnxruntime has CUDA (a note says so where
   it has not);
8. wall times against a plain bm25s script over the handbook: one run, ``ragexp search`` and a
   warm 12-ablation sweep (also against its library-path compute) (``bench_wall.py``, #21);
9. BM25 against bm25s at 100,000 synthetic passages (``--bm25-passages``): tokenizing the
   corpus, fitting, index bytes and the peak RSS of fitting (``bench_bm25_scale.py``, #21);
10. the start-up of ``ragexp search``/``ask``: importing the serving engine against the same
    with the runner and pandas it imported before (``bench_imports.py``, #41).

``python -m tools.bench [--readme docs/benchmarks.md]`` (``make bench``); exits 1 if a target
fails, 2 if that page lacks its ``<!-- bench:start -->`` / ``<!-- bench:end -->`` markers (then
nothing is written). ``--only imports`` runs row 10 alone and writes nothing.
"""

from __future__ import annotations

import os

# Offline and quiet whatever the caller's environment says: nothing here may download.
os.environ.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true",
                  TOKENIZERS_PARALLELISM="false")

import argparse  # noqa: E402
import datetime  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import namedtuple  # noqa: E402
from pathlib import Path  # noqa: E402

import faiss  # noqa: E402
import numpy as np  # noqa: E402

from ragexp.data import shipped  # noqa: E402
from ragexp.data.golden import load_corpus, load_golden  # noqa: E402
from ragexp.index.bm25 import BM25Index  # noqa: E402
from ragexp.index.cache import EmbeddingCache  # noqa: E402
from ragexp.index.embedders import FastEmbedEmbedder, cuda_unavailable  # noqa: E402
from ragexp.index.flat import FlatIPIndex  # noqa: E402
from ragexp.index.resources import Resources  # noqa: E402
from ragexp.stages.chunking import MarkdownChunker  # noqa: E402
from ragexp.text.analysis import normalize_ws, split_sentences, tokenize  # noqa: E402
from tools.bench_bm25_scale import bench_rows as bm25_scale_rows  # noqa: E402
from tools.bench_cache import cache_rows  # noqa: E402
from tools.bench_imports import import_rows  # noqa: E402
from tools.bench_traces import trace_rows  # noqa: E402
from tools.bench_wall import wall_rows  # noqa: E402
from tools.readme import has_block, replace_block  # noqa: E402
from tools.timing import best_of  # noqa: E402

SEED = 13


# One table row; ok is None for an informational row without a target.
Row = namedtuple("Row", "name ours ref ratio target ok")


def compare(name: str, ours: float, ref: float, unit: str, target: float | None) -> Row:
    """A row for two throughputs (higher is better); ``target`` is the minimum ours/ref."""
    digits = 1 if min(ours, ref) < 100 else 0
    r = ours / ref
    return Row(name, f"{ours:.{digits}f} {unit}", f"{ref:.{digits}f} {unit}", f"{r:.2f}",
               "-" if target is None else f">= {target:g}", None if target is None else r >= target)


def blas_libs() -> dict[str, dict]:
    """BLAS libraries loaded (numpy's and faiss's own OpenBLAS) by owner, via threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    return {next((o for o in ("numpy", "faiss", "scipy") if o in i["filepath"]), i["prefix"]): i
            for i in threadpool_info() if i["user_api"] == "blas"}


def machine_facts() -> str:
    """Cores, BLAS kernels and threads explain most differences between machines' ratios."""
    blas = ", ".join(f"{o} {i['internal_api']} {i.get('architecture', '?')} x{i['num_threads']}"
                     for o, i in blas_libs().items()) or "threadpoolctl not installed"
    return (f"Machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable); "
            f"BLAS: {blas}; faiss {faiss.__version__}")


def passages(docs, n: int) -> list[str]:
    """``n`` distinct real passages: the handbook chunked several ways (window, overlap,
    headings on/off), so every text is a realistic chunk yet none repeats (each is a miss)."""
    texts: set[str] = set()
    for words, overlap, headings in [(120, 20, True), (80, 10, True), (200, 30, True),
                                     (60, 0, False), (150, 25, False), (40, 0, True)]:
        texts.update(c.text for c in MarkdownChunker(words, overlap, headings).chunk(docs))
    return random.Random(SEED).sample(sorted(texts), min(n, len(texts)))


def bench_embed(emb: FastEmbedEmbedder, texts: list[str], warm: list[str], tmp: Path) -> Row:
    """Pipeline vs the very TextEmbedding object it wraps, same batch size, one fastembed batch
    at a time: each path runs every batch twice in ABBA order (ours on a fresh empty cache each
    time, so every text misses) and keeps its faster time. Other processes' load comes in bursts
    of seconds on this kind of machine and only ever adds time, so the minimum filters it out."""
    raw, bs, caches = emb._model, emb.batch_size, []

    def ours(block):
        caches.append(EmbeddingCache(root=str(tmp / f"embed{len(caches)}")))
        caches[-1].embed(emb, block, "passage", progress=False)

    def ref(block):
        np.stack(list(raw.embed(block, batch_size=bs)))

    ours(warm)
    ref(warm)
    t = {"ours": 0.0, "ref": 0.0}
    for start in range(0, len(texts), bs):
        block = texts[start:start + bs]
        for name, best in best_of({"ours": lambda: ours(block), "ref": lambda: ref(block)},
                                  repeats=2, warmup=False).items():
            t[name] += best
    assert sum(c.misses for c in caches[1:]) == 2 * len(texts) and not any(c.hits for c in caches)
    return compare(f"passage embedding, {len(texts)} passages: EmbeddingCache.embed (empty "
                   f"cache) vs fastembed TextEmbedding.embed, batch {bs}", len(texts) / t["ours"],
                   len(texts) / t["ref"], "texts/s", 0.9)


SETTINGS = [(bs, par) for bs in (4, 8, 16, 32, 64) for par in (None, 2)]  # batch, workers


def bench_embed_settings(emb: FastEmbedEmbedder, texts: list[str], tmp: Path,
                         settings=SETTINGS) -> Row:
    """ragexp's default embedding (``emb`` as built, through ``EmbeddingCache.embed`` on a
    fresh cache: every text a miss) against the best texts/s any of ``settings``
    (embedder.batch_size, embedder.parallel) reaches with fastembed's own
    ``TextEmbedding.embed(batch_size=, parallel=)`` on all ``texts`` at once. The grid runs each
    setting through both paths (two timings per path, ABBA, the faster kept), naming ragexp's
    best too; then the default and fastembed's best setting are timed again side by side (three
    each, ABBA), and the row's ratio is of those, so both sides have as many tries. Data-parallel
    workers load the model at every call, which is counted: it is what a run pays."""
    raw, runs = emb._model, []
    default = emb.batch_size, emb.batch_tokens, emb.parallel

    def ours(bs, tokens, par):
        emb.batch_size, emb.batch_tokens, emb.parallel = bs, tokens, par
        runs.append(EmbeddingCache(root=str(tmp / f"grid{len(runs)}")))
        runs[-1].embed(emb, texts, "passage", progress=False)

    def ref(bs, par):
        np.stack(list(raw.embed(texts, batch_size=bs, parallel=par)))

    best = {"ours": (0.0, None), "ref": (0.0, None)}
    try:
        for bs, par in settings:
            timed = best_of({"ours": lambda: ours(bs, None, par), "ref": lambda: ref(bs, par)},
                            repeats=2, warmup=False)
            for name, seconds in timed.items():
                if len(texts) / seconds > best[name][0]:
                    best[name] = (len(texts) / seconds, (bs, par))
        top = best["ref"][1]
        final = best_of({"default": lambda: ours(*default), "ref": lambda: ref(*top)},
                        repeats=3, warmup=False)
    finally:
        emb.batch_size, emb.batch_tokens, emb.parallel = default
    assert all(c.misses == len(texts) and not c.hits for c in runs)

    def said(setting):
        return f"batch {setting[0]}, parallel {setting[1] or 1}"

    rule = (f"at most {default[1]} tokens and {default[0]} texts a batch" if default[1]
            else f"batch {default[0]}")
    return compare(f"embedding at ragexp's default ({rule}, parallel {default[2] or 1}) vs "
                   f"fastembed's best of {len(settings)} settings (batch x workers: "
                   f"{said(top)}), {len(texts)} passages; ragexp's best of the same grid: "
                   f"{said(best['ours'][1])}, {best['ours'][0]:.1f} texts/s",
                   len(texts) / final["default"], len(texts) / final["ref"], "texts/s", 0.95)


def gpu_note(texts: list[str], tmp: Path, cpu: Row) -> str:
    """MiniLM's texts/s on the GPU (``embedder.device=cuda``) through the cache beside the CPU
    row, or why it was not measured (no CUDA provider here)."""
    why = cuda_unavailable()
    if why:
        return f"MiniLM on a GPU: not measured on this machine ({why.split(': install')[0]})"
    emb = FastEmbedEmbedder("minilm-int8", cache_dir=f"{tmp}/models", device="cuda")
    emb.embed(texts[:8])  # CUDA start-up is not throughput
    seconds = best_of({"gpu": lambda: EmbeddingCache(root=str(tmp / f"gpu{time.time_ns()}"))
                       .embed(emb, texts, "passage", progress=False)}, repeats=2, warmup=False)
    return (f"MiniLM on the GPU (embedder.device=cuda, batch {emb.batch_size}) through the "
            f"cache: {len(texts) / seconds['gpu']:.0f} texts/s, beside the CPU's {cpu.ours}")


def bench_dense(n_queries: int, n_vectors: int = 10_000, dim: int = 384) -> tuple[Row, str]:
    """Our batched search vs faiss left at its defaults (per-query scan for nq*d < 128,000)."""
    rng = np.random.default_rng(SEED)
    x, q = (rng.standard_normal((n, dim), dtype=np.float32) for n in (n_vectors, n_queries))
    x, q = (a / np.linalg.norm(a, axis=1, keepdims=True) for a in (x, q))
    ours, ref = FlatIPIndex(x), faiss.IndexFlatIP(dim)
    ref.add(x)
    t = best_of({"ours": lambda: ours.search(q, 10), "ref": lambda: ref.search(q, 10),
                 "scan": lambda: ours.search(q, 10, blas=False)}, repeats=25)
    same = float((ours.search(q, 10)[1] == ref.search(q, 10)[1]).mean())
    qps = {k: n_queries / v for k, v in t.items()}
    arch = blas_libs().get("faiss", {}).get("architecture")
    row = compare(f"dense search, {n_queries} queries x {n_vectors:,} x {dim}-d: FlatIPIndex.search"
                  f" vs faiss.IndexFlatIP.search (defaults)", qps["ours"], qps["ref"], "q/s", 0.8)
    note = (f"dense: BLAS path (threshold lowered) {qps['ours']:.0f} q/s vs per-query scan "
            f"(blas=False) {qps['scan']:.0f} q/s = {qps['ours'] / qps['scan']:.2f}x; nq*d = "
            f"{n_queries * dim:,} vs faiss default threshold "
            f"{faiss.cvar.distance_compute_blas_threshold:,}; faiss's OpenBLAS kernel: "
            f"{arch or '?'}; top-10 ids agree on {same:.1%}")
    return row, note


def bench_bm25(docs, queries: list[str], n_docs: int = 100_000) -> Row:
    """BM25 at ``n_docs`` pseudo-documents of 2-6 handbook sentences each (fixed seed), so term
    statistics are the handbook's. Both engines get the same ragexp tokens (a document's tokens
    are its sentences' tokens, each sentence analysed once: terms never span a space) and the
    same variant and parameters (lucene, k1, b); ours analyses the query texts itself, bm25s is
    handed their tokens."""
    import bm25s

    pool = sorted({s for d in docs for s in split_sentences(normalize_ws(d.text)[0])
                   if len(s.split()) >= 4})
    terms = {s: tokenize(s) for s in pool}
    rng, picked, tokens = random.Random(SEED), set(), []
    while len(tokens) < n_docs:
        sample = tuple(rng.sample(pool, rng.randint(2, 6)))
        if sample not in picked:
            picked.add(sample)
            tokens.append([t for s in sample for t in terms[s]])
    ours = BM25Index().fit_terms(tokens)
    ref = bm25s.BM25(k1=ours.params.k1, b=ours.params.b, method=ours.params.method)
    ref.index(tokens, show_progress=False)
    q_tokens, k = [tokenize(q) for q in queries], 10

    def reference():
        return ref.retrieve(q_tokens, k=k, show_progress=False).documents

    t = best_of({"ours": lambda: ours.top_k(queries, k), "bm25s": reference}, repeats=5)
    mine, theirs = ours.top_k(queries, k).indices, reference()
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(mine, theirs)])
    qps = {name: len(queries) / v for name, v in t.items()}
    return compare(f"BM25, {len(queries)} queries x {n_docs:,} docs: BM25Index.top_k vs bm25s "
                   f"retrieve, same tokens (top-10 overlap {overlap:.0%})", qps["ours"],
                   qps["bm25s"], "q/s", 1.0)


def bench_rerun(emb: FastEmbedEmbedder, chunks, tmp: Path) -> Row:
    """Two runs' Resources over one cache root; a wrapper counts texts really sent to the model."""

    class Counting:  # the embedder as Resources sees it
        identity, texts = emb.identity, 0

        def embed(self, texts, mode):
            self.texts += len(texts)
            return emb.embed(texts, mode)

    seen = []
    for _ in range(2):
        counter, cache = Counting(), EmbeddingCache(root=str(tmp / "rerun"))
        vectors = Resources(chunks, lambda: counter, cache=cache, progress=False).passage_vectors()
        seen.append((cache.misses, counter.texts, vectors))
    (m1, e1, v1), (m2, e2, v2) = seen
    return Row(f"second run, same embedder + chunking ({len(chunks)} handbook chunks): passages "
               "embedded", f"run 2: {m2} misses, {e2} embedded",
               f"run 1: {m1} misses, {e1} embedded", f"{m2}/{m1}", "run 2 = 0",
               m2 == 0 and e2 == 0 and np.array_equal(v1, v2))


def render(rows: list[Row]) -> str:
    lines = ["| benchmark | ragexp | reference | ratio | target | pass |", "|---" * 6 + "|"]
    for r in rows:
        verdict = "-" if r.ok is None else ("yes" if r.ok else "**FAIL**")
        lines.append(f"| {r.name} | {r.ours} | {r.ref} | {r.ratio} | {r.target} | {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", help="replace the bench block of this markdown file "
                        "(make bench: docs/benchmarks.md)")
    parser.add_argument("--corpus", default=shipped.path("handbook/corpus"))
    parser.add_argument("--golden", default=shipped.path("handbook/golden"),
                        help="its questions are the queries")
    parser.add_argument("--passages", type=int, default=512, help="texts for the embedding row")
    parser.add_argument("--cache-passages", type=int, default=100_000,
                        help="vectors in the packed-cache read/disk rows")
    parser.add_argument("--bm25-passages", type=int, default=100_000,
                        help="synthetic passages of the BM25-against-bm25s rows")
    parser.add_argument("--only", choices=("imports",),
                        help="run only this row (imports: row 10) and write nothing")
    args = parser.parse_args(argv)
    if args.only == "imports":
        rows = import_rows(Row)
        print(render(rows))
        return 1 if any(r.ok is False for r in rows) else 0
    if not has_block(args.readme, "bench"):
        return 2
    docs = load_corpus(args.corpus)
    questions = [q.text for q in load_golden(args.golden, docs)]
    header = machine_facts()
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-") as tmp:  # caches, model links
        emb = FastEmbedEmbedder("minilm-int8", cache_dir=f"{tmp}/models")
        texts = passages(docs.values(), args.passages)
        rows = [bench_embed(emb, texts, questions[:16], Path(tmp)),
                bench_embed_settings(emb, texts, Path(tmp))]
        gpu = gpu_note(texts, Path(tmp), rows[0])
        dense, note = bench_dense(len(questions))
        rows += [dense, bench_bm25(docs.values(), questions),
                 bench_rerun(emb, MarkdownChunker().chunk(docs.values()), Path(tmp))]
    rows += bm25_scale_rows(args.bm25_passages, Row)
    rows += cache_rows(args.cache_passages)[0]
    traced, trace_notes = trace_rows(questions, Row)
    rows += traced
    rows += wall_rows(Row)
    rows += import_rows(Row)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    notes = [note, gpu, *trace_notes, f"peak memory (RSS, whole bench): {peak:.0f} MiB"]
    table = render(rows)
    print("\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes))
    failed = [r.name for r in rows if r.ok is False]
    for name in failed:
        print(f"FAIL: {name}", file=sys.stderr)
    if args.readme:
        replace_block(args.readme, "bench", f"Measured with `make bench` on "
                      f"{datetime.date.today().isoformat()}. {header}.\n\n{table}\n\n"
                      + "\n".join(f"- {n}" for n in notes))
        print(f"\nwrote the bench block of {args.readme}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
