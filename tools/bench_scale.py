"""``make bench-scale``: time and peak memory of every stage on synthetic BEIR folders of growing
size, the growth exponent between sizes, and what a sweep of 8 query-time variants costs.

Per size (a child process each), on a folder from ``synth.py`` with topics (``synth.TOPICS``:
the neighbourhood structure of real paragraphs, docs/scale.md) and the hash embedder
(``--dim``), passages kept whole (``chunking=none``). Each part below runs in a fresh interpreter
of its own (``own_process``: multiprocessing's spawn), one after another, so the peak RSS it
samples (every 5 ms) is its own alone: never the heap an earlier part freed but the allocator
kept (the HNSW build's ~8 GB at 1,000,000 passages), nor what an earlier part still holds.

1. each stage alone, as the pipeline runs it, in one process: load (BEIR reader), chunk,
   tokenize, BM25 build, embed (empty embedding cache), dense index, search (hybrid RRF +
   lexical reranker, all queries in one batch), metrics, logging (MLflow: metrics,
   ``per_question.csv`` and the same table ``per_question.json``, one upload), with the peak
   RSS of the process while it ran (what the earlier stages hold included, as in a run);
2. the 8-variant sweep (reranker x ``fusion.k`` x abstain budget), each job through the Hydra
   entry point (``app.run_logged``: everything a job does, logging included), on empty caches
   with stage reuse, in a process where nothing ran before. Its first job is one run on empty
   caches: it builds every stage, exactly as a lone run does. The ratio is the whole sweep /
   that first job; that job's peak RSS above its process's start (ragexp imported, the
   tracking store open) is the run's memory, compared with the vectors plus the BM25 sparse
   matrices (target <= 2x at 1,000,000).

3. the ``index`` group on the same vectors (``index_rows``, in a process holding the vectors
   and the queries, written by part 1): ``flat`` against ``hnsw`` (one graph,
   ``HNSW_GRAPH``: ``M`` 32, ``ef_construction`` 100, built at 1,000,000 passages in about 4
   minutes on 2 quiet cores; searched at ``ef_search`` 512, 1024 and 2048): build
   seconds, bytes, p50 latency of one query alone (first 200 queries), recall@10 against exact
   search (ties counted), peak RSS while building; and blocked exact search
   (``index.block_size`` 65536, top 100) over a tenth of the queries and over all of them,
   each in a process of its own holding the vectors and the queries (``blocked_peak``): their
   absolute peak RSS while searching, the vectors held included, must agree within 10% (the
   peak above the start and the result's bytes, n_queries x 100 ids and scores, are shown
   beside it). Targets at 1,000,000: those two, and some HNSW setting with p50 <= flat p50 /
   10 and recall@10 >= 0.95 (on synthetic text without topics none reaches it:
   docs/scale.md, ``tools.bench_hnsw``).

4. logging at 100,000 questions: one run (dense retrieval, no reranker) over the 100,000-passage
   folder with 100,000 queries, timing the per-question logging inside it
   (``tracking.write_per_question``: the CSV artifact and the MLflow table, uploaded with the
   run's other artifacts), as a share of the run.

5. BM25 against bm25s at each size (``bench_bm25_scale.py``, in a process of its own that
   reads the passages again): tokenizing (target >= 1.0x from 100,000 passages), fitting, the
   index's bytes (target <= 1.1x at 1,000,000) and the peak RSS of fitting.

6. embedding (``bench_embedding.py``): MiniLM's passages/s through the cache and the time it
   projects for 1,000,000 passages (``--minilm-passages``); the import of 1,000,000 x 384
   precomputed vectors (``embedder=precomputed``, every check) against ``np.load`` of the same
   matrix (``--import-rows``; target within 2x).

Sizes run in ``--jobs`` parallel child processes (default 1); every ratio of times is measured
within one process and RSS is each process's own, so parallel sizes slow absolute times, not the
comparisons.

The growth exponent of a stage between sizes n1 < n2 is ``log(t2 / t1) / log(n2 / n1)`` (1 =
linear).

``python -m tools.bench_scale [--sizes 10000,100000,1000000] [--readme docs/benchmarks.md]``
(``make bench-scale``); exits 1 if a target fails, 2 if that page lacks its ``bench-scale``
markers. The block it writes names the command that measured it.
"""

from __future__ import annotations

import os

os.environ.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true",
                  TOKENIZERS_PARALLELISM="false")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

STAGES = ["load", "chunk", "tokenize", "bm25", "embed", "dense_index", "search", "metrics",
          "logging"]
VARIANTS = [[f"reranker={r}", f"fusion.k={k}", f"abstain.budget={b}"]
            for r in ("none", "lexical") for k in (20, 60) for b in (0.1, 0.2)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Samples this process's RSS every 5 ms on a thread; ``window()`` gives a block's peak."""

    def __init__(self):
        self.peak, self._stop = rss_bytes(), False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.005)

    @contextmanager
    def window(self, out: dict, name: str):
        self.peak = rss_bytes()
        start = time.perf_counter()
        yield
        out[name] = {"s": time.perf_counter() - start, "peak": max(self.peak, rss_bytes())}

    def stop(self):
        self._stop = True


def sparse_bytes(obj) -> int:
    """Bytes of the scipy sparse matrices held directly by ``obj`` (the BM25 index), each
    buffer counted once: ``weights`` and its transpose ``_by_term`` share theirs."""
    from scipy import sparse

    buffers = {}
    for value in vars(obj).values():
        if sparse.issparse(value):
            for a in ("data", "indices", "indptr"):
                array = getattr(value, a, None)
                if array is not None:
                    base = array if array.base is None else array.base
                    buffers[id(base)] = base.nbytes
    return sum(buffers.values())


def own_process(fn, *args):
    """``fn(*args)`` in a fresh interpreter (multiprocessing's spawn, never fork: a forked child
    would start with this process's heap), so the peak RSS it samples is its own measurement's
    alone, not heap an earlier measurement freed and the allocator kept. Returns ``(fn's value,
    the child's pid)``; an exception in the child is raised here, a child killed (out of
    memory) raises ``BrokenProcessPool``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_with_pid, fn, *args).result()


def _with_pid(fn, *args):
    return fn(*args), os.getpid()


BLOCK_SIZE = 65536  # passages per block of the blocked exact search rows


def one_size(n: int, queries: int, dim: int, work: Path) -> dict:
    """Measure one size, each part in a process of its own (``own_process``): the stages
    (``stages``, which also writes the passage and query vectors the index parts read), the
    index rows (``index_rows``), blocked exact search over a tenth of the queries and over all
    of them (``blocked_peak``, one process each), BM25 against bm25s (``against_bm25s``) and
    the 8-variant sweep (``sweep``). Returns the JSON-able record; ``record["pids"]`` names the
    process of each part."""
    from tools import synth

    data = synth.folder(work, n, queries, synth.TOPICS)
    pids = {}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        vectors, asked = Path(tmp) / "vectors.npy", Path(tmp) / "queries.npy"
        record, pids["stages"] = own_process(stages, n, data, dim, work, vectors, asked)
        indexes, pids["indexes"] = own_process(index_rows, vectors, asked)
        for label, rows in (("tenth", max(1, record["queries"] // 10)),
                            ("all", record["queries"])):
            indexes[f"blocked_{label}"], pids[f"blocked_{label}"] = own_process(
                blocked_peak, vectors, asked, rows)
    record["indexes"] = indexes
    record["bm25s"], pids["bm25s"] = own_process(against_bm25s, data)
    swept, pids["sweep"] = own_process(sweep, n, data, dim, work, VARIANTS)
    return {**record, **swept, "pids": pids}


def stages(n: int, data: Path, dim: int, work: Path, vectors_out: Path,
           queries_out: Path) -> dict:
    """Each stage alone on the ``n`` passages of ``data``, in pipeline order, in this process
    (``own_process``: nothing else ran in it): seconds and peak RSS of each, the RSS before
    them (``base``, the interpreter with ragexp imported) and the bytes of the vectors plus the
    BM25 matrices. Writes the passage
    vectors (n, dim) and the query vectors (q, dim), float32, to ``vectors_out`` and
    ``queries_out`` for the index parts."""
    import numpy as np

    from ragexp.data import docrank
    from ragexp.data.datasets import BeirDataset
    from ragexp.evaluation import metrics
    from ragexp.index.cache import EmbeddingCache
    from ragexp.index.embedders import HashEmbedder
    from ragexp.index.resources import Resources, dense_index
    from ragexp.stages.chunking import WholeDocumentChunker
    from ragexp.stages.fusion.rank import RRF
    from ragexp.stages.ranking import rank
    from ragexp.stages.rerankers import LexicalReranker
    from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part

    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / f'mlflow-{n}.db'}"
    from ragexp.tracking import store as tracking
    tracking.ensure_experiment("bench-scale-logging")  # creating the database is not logging
    sampler, st = PeakRSS(), {}
    base = rss_bytes()
    with sampler.window(st, "load"):
        ds = BeirDataset(str(data))
        docs, qs = ds.documents(), ds.queries()
    with sampler.window(st, "chunk"):
        chunks = WholeDocumentChunker().chunk(docs)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        res = Resources(chunks, lambda: HashEmbedder(dim=dim), EmbeddingCache(f"{tmp}/emb"),
                        progress=False)
        with sampler.window(st, "tokenize"):
            res.terms
        with sampler.window(st, "bm25"):
            bm25 = res.bm25
        with sampler.window(st, "embed"):
            vectors = res.passage_vectors()
        with sampler.window(st, "dense_index"):
            dense_index(res)
        texts = {q.qid: q.text for q in qs}
        with sampler.window(st, "search"):
            hybrid = HybridRetriever(res, {"dense": Part(DenseRetriever),
                                           "bm25": Part(BM25Retriever)}, RRF())
            ranking = rank(hybrid, LexicalReranker(), res, texts, 10)
        with sampler.window(st, "metrics"):
            judged = docrank.collapse_to_documents(ranking, {c.chunk_id: c.doc_id for c in chunks})
            scores = metrics.per_query(judged, ds.qrels(chunks))
            overall = metrics.aggregate(scores, qs)
        table = _table(qs, scores)
        with sampler.window(st, "logging"):
            _log(table, overall)
    sampler.stop()
    np.save(vectors_out, vectors)
    np.save(queries_out, HashEmbedder(dim=dim).embed(list(texts.values()), "query"))
    return {"n": n, "queries": len(qs), "dim": dim, "stages": st, "base": base,
            "peak": max(v["peak"] for v in st.values()),
            "vectors_bm25": vectors.nbytes + sparse_bytes(bm25)}


def against_bm25s(data: Path) -> dict:
    """BM25 against bm25s (``bench_bm25_scale.measure``) on the passages of ``data``, read as
    the stages read them, in this process (``own_process``)."""
    from ragexp.data.datasets import BeirDataset
    from ragexp.stages.chunking import WholeDocumentChunker
    from tools import bench_bm25_scale as bm25_scale

    chunks = WholeDocumentChunker().chunk(BeirDataset(str(data)).documents())
    return bm25_scale.measure([c.text for c in chunks])


# 1,000,000 passages in 3.7 min on 2 quiet cores; the text with topics reaches recall@10 0.969 at
# ef_search 2048 (0.070x flat's p50), M 16 ef_construction 40 0.818 (docs/scale.md: bench_hnsw)
HNSW_GRAPH = {"M": 32, "ef_construction": 100}
HNSW_EF_SEARCH = (512, 1024, 2048)  # searched on the one graph


def index_rows(vectors_file: Path, queries_file: Path, sample: int = 200) -> dict:
    """``flat`` and ``hnsw`` over the vectors (n, d) and queries (q, d) saved in
    ``vectors_file`` and ``queries_file``, in this process (``own_process``: it holds those
    and what it builds, nothing of the stages): build s, bytes, p50 ms of each of the first
    ``sample`` queries alone, recall@10 vs exact (ties at the 10th place counted as
    ann-benchmarks does: ``ann.recall_vs_exact`` with scores), peak RSS while building (the
    vectors held included). HNSW is one graph (``HNSW_GRAPH``) searched at each of
    ``HNSW_EF_SEARCH`` (``"hnsw"``: one row each)."""
    import numpy as np

    from ragexp.index import ann
    from ragexp.index.flat import FlatIPIndex
    from tools.bench_hnsw import true_scores

    vectors, queries = np.load(vectors_file), np.load(queries_file)
    sampler, out = PeakRSS(), {"hnsw": []}
    exact_scores, exact = FlatIPIndex(vectors).search(queries, 10)
    for spec in (ann.FlatSpec(), ann.HNSWSpec(**HNSW_GRAPH)):
        st: dict = {}
        with sampler.window(st, "build"):
            start = time.perf_counter()
            built = spec.build(vectors)
            build_s = time.perf_counter() - start
        built_row = {"build_s": build_s, "bytes": float(built.nbytes),
                     "peak": st["build"]["peak"]}
        for ef in HNSW_EF_SEARCH if spec.name == "hnsw" else (None,):
            searcher = (spec.searcher(built) if ef is None else
                        ann.HNSWSpec(**HNSW_GRAPH, ef_search=ef).searcher(built))
            latency = ann.search_latency_ms(searcher, queries[:sample], 10)
            _, found = searcher.search(queries, 10)
            row = {**built_row, "p50_ms": latency["index.search_p50_ms"],
                   "recall": ann.recall_vs_exact(found, exact,
                                                 true_scores(vectors, queries, found),
                                                 exact_scores)}
            if ef is None:
                out[spec.name] = row
            else:
                out["hnsw"].append({**row, **HNSW_GRAPH, "ef_search": ef})
        del built, searcher
        gc.collect()
    sampler.stop()
    return out


def blocked_peak(vectors_file: Path, queries_file: Path, rows: int, k: int = 100,
                 block_size: int = BLOCK_SIZE) -> dict:
    """Blocked exact search (``FlatIPIndex(block_size=...)``) of the first ``rows`` queries of
    ``queries_file`` over the vectors of ``vectors_file``, top ``k``, in this process
    (``own_process``: it holds the vectors and the queries, nothing else): the absolute peak
    RSS while searching (``peak``, bytes: the vectors held included, as a run's search stage
    holds them), that peak above the RSS at the search's start (``above``) and the bytes of
    the result, ids int64 and scores float32 (``result``: rows x k x 12; output, not the
    score block)."""
    import numpy as np

    from ragexp.index.flat import FlatIPIndex

    vectors, queries = np.load(vectors_file), np.load(queries_file)[:rows]
    blocked = FlatIPIndex(vectors, block_size=block_size)
    sampler, st = PeakRSS(), {}
    start = rss_bytes()
    with sampler.window(st, "search"):
        scores, ids = blocked.search(queries, k)
    sampler.stop()
    return {"queries": rows, "peak": st["search"]["peak"], "above": st["search"]["peak"] - start,
            "result": scores.nbytes + ids.nbytes}


def render_indexes(records: list[dict]) -> tuple[list[str], list[str]]:
    """Lines of the index table (one row per size and index setting, with its p50 as a share
    of flat's), and the FAIL lines of its targets at 1,000,000 passages: some HNSW setting with
    p50 <= flat p50 / 10 and recall@10 >= 0.95; the absolute peak RSS of blocked search (the
    vectors held included) with all the queries within 10% of that with a tenth of them,
    ``|peak_all - peak_tenth| / peak_tenth <= 0.10``."""
    mib = 1 << 20
    lines = ["| passages | index | build | bytes | p50 one query | p50 / flat's | "
             "recall@10 vs exact | peak RSS while building |", "|---|---|---|---|---|---|---|---|"]
    failed = []
    for r in (r for r in records if "indexes" in r):
        ix = r["indexes"]
        flat_p50 = ix["flat"]["p50_ms"]
        settings = [("flat", ix["flat"])] + [
            (f"hnsw M={h['M']} ef_construction={h['ef_construction']} ef_search="
             f"{h['ef_search']}", h) for h in ix["hnsw"]]
        for name, row in settings:
            lines.append(f"| {r['n']:,} | {name} | {row['build_s']:.2f} s | "
                         f"{row['bytes'] / mib:,.0f} MiB | {row['p50_ms']:.2f} ms | "
                         f"{row['p50_ms'] / flat_p50:.3f} | {row['recall']:.3f} | "
                         f"{row['peak'] / mib:,.0f} MiB |")
        tenth, every = ix["blocked_tenth"], ix["blocked_all"]
        spread = abs(every["peak"] - tenth["peak"]) / tenth["peak"]
        lines.append(f"| {r['n']:,} | flat, block_size {BLOCK_SIZE} | | | | | | peak RSS while "
                     f"searching, each in its own process: " + ", ".join(
                         f"{b['queries']:,} queries {b['peak'] / mib:,.0f} MiB "
                         f"(+{b['above'] / mib:,.0f} MiB above its start; results "
                         f"{b['result'] / mib:,.1f} MiB)" for b in (tenth, every)) + " |")
        if r["n"] >= 1_000_000:
            met = [h for h in ix["hnsw"] if h["p50_ms"] <= 0.1 * flat_p50
                   and h["recall"] >= 0.95]
            if not met:
                shown = "; ".join(f"ef_search={h['ef_search']}: p50 "
                                  f"{h['p50_ms'] / flat_p50:.3f}x, recall {h['recall']:.3f}"
                                  for h in ix["hnsw"])
                failed.append(f"HNSW at {r['n']:,}: no setting has p50 <= 0.1x flat's with "
                              f"recall@10 >= 0.95 ({shown})")
            if spread > 0.10:
                failed.append(f"blocked search peak RSS at {r['n']:,}: "
                              f"{every['peak'] / mib:,.0f} MiB with {every['queries']:,} "
                              f"queries against {tenth['peak'] / mib:,.0f} MiB with "
                              f"{tenth['queries']:,}, {spread:.0%} apart (target <= 10%)")
    return lines, failed


def _table(qs, scores):
    import pandas as pd

    return pd.DataFrame([{"id": q.qid, "kind": q.kind, **scores.get(q.qid, {})} for q in qs])


def _log(table, overall: dict) -> None:
    """What a run logs for its per-question table, as ``app.run_logged`` does it
    (``runs.TrackedRun.log``): the metrics and the table's tag in batches
    (``tracking.log_batch``), ``per_question.csv`` and the MLflow table ``per_question.json``
    among the artifacts (``tracking.write_per_question``), uploaded in one ``log_artifacts``.
    The run's other artifacts (config, TREC files, abstain curve) are not part of this
    stage."""
    from ragexp.tracking import store as tracking

    c = tracking.client()
    run_id = c.create_run(tracking.ensure_experiment("bench-scale-logging")).info.run_id
    with tempfile.TemporaryDirectory() as tmp:
        tracking.log_batch(run_id, metrics={k: float(v) for k, v in overall.items()},
                           tags=tracking.TABLE_TAGS)
        tracking.write_per_question(table, Path(tmp))
        c.log_artifacts(run_id, tmp)
    c.set_terminated(run_id, "FINISHED")


def _job(data: Path, dim: int, cache: Path, overrides: list[str]) -> float:
    """One job as the Hydra entry point runs it (``app.run_logged``); its wall time."""
    from hydra import compose

    from ragexp.run.app import run_logged

    # split=dev: the half of the queries the recorded numbers were measured on (BEIR's default
    # is now its split whole, split=auto)
    cfg = compose("config", overrides=[
        "dataset=beir", f"dataset.path={data}", "chunking=none", "embedder=hash",
        f"embedder.dim={dim}", "retriever=hybrid", f"cache_dir={cache}", "progress=false",
        "force=true", "split=dev", f"experiment=bench-scale-{data.name}", *overrides])
    start = time.perf_counter()
    out = run_logged(cfg)
    assert out["status"] == "FINISHED", out
    return time.perf_counter() - start


def sweep(n: int, data: Path, dim: int, work: Path, variants: list[list[str]]) -> dict:
    """The sweep of ``variants`` (overrides per job) over the ``n`` passages of ``data`` on
    empty caches, with stage reuse, in this process (``own_process``: nothing ran in it
    before). Its first job is one run on empty caches: its seconds, the RSS before it
    (``run_base``: the interpreter with ragexp's entry point imported and the tracking store
    open, as the stages' ``base``) and its peak RSS (``run_peak``), that run's alone."""
    from hydra import initialize_config_dir

    from ragexp.run.app import CONF_DIR

    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / f'mlflow-{n}.db'}"
    from ragexp.tracking import store as tracking
    tracking.ensure_experiment(f"bench-scale-{data.name}")  # opening the store is not the run
    first = {}
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"), \
            tempfile.TemporaryDirectory(dir=work) as tmp:
        run_base, sampler = rss_bytes(), PeakRSS()
        with sampler.window(first, "run"):
            each = [_job(data, dim, Path(tmp) / "sweep", variants[0])]
        sampler.stop()
        each += [_job(data, dim, Path(tmp) / "sweep", v) for v in variants[1:]]
    return {"one_run_s": each[0], "sweep_s": sum(each), "sweep_each_s": each,
            "run_base": run_base, "run_peak": first["run"]["peak"]}


def logging_share(n: int, queries: int, dim: int, work: Path) -> dict:
    """A ``queries``-question run; the time its per-question logging took, inside it."""
    from hydra import initialize_config_dir

    from ragexp.run.app import CONF_DIR
    from ragexp.tracking import store as tracking
    from tools import synth

    data = synth.folder(work, n, queries, synth.TOPICS)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / f'mlflow-log-{n}.db'}"
    tracking.ensure_experiment(f"bench-scale-{data.name}")
    spent: dict[str, float] = {}

    def timed(name):
        inner = getattr(tracking, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            inner(*args, **kwargs)
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
        return wrapper

    names = ("write_per_question",)
    for name in names:
        setattr(tracking, name, timed(name))
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"), \
            tempfile.TemporaryDirectory(dir=work) as tmp:
        run = _job(data, dim, Path(tmp), ["retriever=dense", "reranker=none"])
    if set(spent) != set(names):  # the run logged its table some other way: nothing measured
        raise RuntimeError(f"the run never called {sorted(set(names) - set(spent))}: the "
                           f"per-question logging was not measured")
    return {"n": n, "queries": queries, "run_s": run, "log_s": sum(spent.values()), **spent}


def render(records: list[dict], logged: dict | None = None) -> tuple[str, list[str]]:
    """The markdown table, notes and the failed targets."""
    mib = 1 << 20
    sizes = [r["n"] for r in records]
    head = "| stage | " + " | ".join(f"{n:,} passages" for n in sizes) + " | growth exponent |"
    lines = [head, "|---" * (len(sizes) + 2) + "|"]
    for stage in STAGES:
        cells = [f"{r['stages'][stage]['s']:.2f} s, {r['stages'][stage]['peak'] / mib:,.0f} MiB"
                 for r in records]
        exps = [math.log(b["stages"][stage]["s"] / a["stages"][stage]["s"]) /
                math.log(b["n"] / a["n"]) for a, b in zip(records, records[1:])
                if a["stages"][stage]["s"] > 0.005]
        lines.append(f"| {stage} | " + " | ".join(cells) + " | "
                     + (", ".join(f"{e:.2f}" for e in exps) or "-") + " |")
    failed, notes = [], []
    for r in records:
        ratio = r["sweep_s"] / r["one_run_s"]
        run_above = r["run_peak"] - r["run_base"]
        peak_over = run_above / r["vectors_bm25"]
        notes.append(
            f"{r['n']:,} passages, {r['queries']:,} queries, hash embedder {r['dim']}-d: one run "
            f"(the sweep's first job, on empty caches, logging included) {r['one_run_s']:.1f} s; "
            f"8-variant sweep "
            f"{r['sweep_s']:.1f} s = {ratio:.2f}x one run (target <= 2 at 1,000,000); peak RSS "
            f"of that first run (a process of its own) {r['run_peak'] / mib:,.0f} MiB, "
            f"{run_above / mib:,.0f} MiB above that process's start = {peak_over:.2f}x vectors "
            f"+ BM25 matrix ({r['vectors_bm25'] / mib:,.0f} MiB; target <= 2 at 1,000,000); "
            f"the stages measured one by one (another process) peaked at "
            f"{r['peak'] / mib:,.0f} MiB, {(r['peak'] - r['base']) / mib:,.0f} MiB above its "
            f"start")
        if r["n"] >= 1_000_000 and ratio > 2:
            failed.append(f"sweep ratio at {r['n']:,}: {ratio:.2f}")
        if r["n"] >= 1_000_000 and peak_over > 2:
            failed.append(f"peak memory of one run at {r['n']:,}: {peak_over:.2f}x vectors + "
                          f"BM25")
    if not any(r["n"] >= 1_000_000 for r in records):
        failed.append("no corpus of 1,000,000 passages measured: the sweep and memory targets "
                      "are unchecked")
    big = max(records, key=lambda r: r["n"], default=None)
    if big:
        notes.insert(0, f"largest corpus measured: {big['n']:,} passages; one run on empty "
                     f"caches took {big['one_run_s']:.0f} s and peaked at "
                     f"{big['run_peak'] / mib:,.0f} MiB RSS")
    if logged:
        share = logged["log_s"] / logged["run_s"]
        notes.append(f"a {logged['queries']:,}-question run ({logged['n']:,} passages, dense, "
                     f"no reranker) took {logged['run_s']:.1f} s; logging its per-question table "
                     f"(one CSV artifact + one MLflow table) took {logged['log_s']:.1f} s = "
                     f"{share:.1%} of it (target < 10%)")
        if share >= 0.10:
            failed.append(f"per-question logging share: {share:.1%}")
    return "\n".join(lines), notes + [f"FAIL: {f}" for f in failed]


def _sizes(text: str) -> list[int]:
    """``--sizes``: positive integers, comma-separated; argparse reports anything else."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive "
                                         f"passage counts, such as 10000,100000")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=_sizes, default=_sizes("10000,100000,1000000"),
                        help="passages per synthetic folder, comma-separated")
    parser.add_argument("--queries", type=int, default=1000, help="queries per size")
    parser.add_argument("--log-questions", type=int, default=100_000,
                        help="questions of the logging run (0: skip it)")
    parser.add_argument("--dim", type=int, default=384,
                        help="hash embedder dimension (384: that of the shipped MiniLM and BGE "
                             "models, so vectors weigh what a real run's do)")
    parser.add_argument("--work", default=".cache/ragexp/bench-scale",
                        help="synthetic folders (kept for reuse) and throwaway stores")
    parser.add_argument("--jobs", type=int, default=1,
                        help="sizes measured at once, each in its own process (more than 1 "
                             "slows each: their absolute times then include contention)")
    parser.add_argument("--readme", help="replace the bench-scale block of this markdown file "
                        "(make bench-scale: docs/benchmarks.md)")
    parser.add_argument("--minilm-passages", type=int, default=200,
                        help="passages MiniLM embeds for its passages/s row (0: skip it; 200 "
                             "take about a minute on 2 busy cores)")
    parser.add_argument("--import-rows", type=int, default=1_000_000,
                        help="rows of the precomputed-import row, 384-d (0: skip it)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-queries", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--log-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.one:
        measure = logging_share if args.log_only else one_size
        print(json.dumps(measure(args.one, args.one_queries, args.dim, work)))
        return 0
    from tools.readme import has_block
    if not has_block(args.readme, "bench-scale"):
        return 2
    sizes = args.sizes
    jobs = [(n, min(args.queries, n), False) for n in sizes]
    if args.log_questions:
        n = min([s for s in sizes if s >= args.log_questions] or [args.log_questions])
        jobs.append((n, args.log_questions, True))
    def measure(job):
        n, q, log_only = job
        what = "a logging run" if log_only else "stages and sweep"
        print(f"measuring {n:,} passages, {q:,} queries: {what} ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, "-m", "tools.bench_scale", "--one", str(n),
                              "--one-queries", str(q), "--dim", str(args.dim),
                              "--work", str(work)] + (["--log-only"] if log_only else []),
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{n:,} passages, {q:,} queries: {what} failed (exit code {out.returncode})\n"
                  + out.stderr[-3000:], file=sys.stderr)
            return None
        print(f"done {n:,} passages, {q:,} queries: {what}", file=sys.stderr, flush=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(measure, jobs))
    # A size that failed (killed, out of memory) is a FAIL line; the others are still reported.
    lost = [f"{n:,} passages, {q:,} queries ({'logging run' if log_only else 'stages and sweep'})"
            f" did not finish" for r, (n, q, log_only) in zip(results, jobs) if r is None]
    records = [r for r, (_, _, log_only) in zip(results, jobs) if r and not log_only]
    logged = next((r for r, (_, _, log_only) in zip(results, jobs) if r and log_only), None)
    table, notes = render(records, logged)
    index_lines, index_failed = render_indexes(records)
    from tools.bench_bm25_scale import scale_table
    bm25_table, bm25_failed = scale_table(records)
    notes += [f"FAIL: {x}" for x in lost + index_failed + bm25_failed]
    from tools.bench_embedding import notes as embedding_notes
    embedded, missed = embedding_notes(args.minilm_passages, args.import_rows, work)
    notes += embedded + [f"FAIL: {x}" for x in missed]
    text = (table + "\n\n" + "\n".join(index_lines) + "\n\n" + bm25_table + "\n\n"
            + "\n".join(f"- {n}" for n in notes))
    print(text)
    if args.readme:
        from tools.bench import machine_facts
        from tools.readme import replace_block
        command = shlex.join(["python", "-m", "tools.bench_scale", *(argv or sys.argv[1:])])
        replace_block(args.readme, "bench-scale", f"Measured with `{command}` on "
                      f"{datetime.date.today().isoformat()}. {machine_facts()}.\n\n{text}")
    return 1 if any(n.startswith("FAIL") for n in notes) else 0


if __name__ == "__main__":
    sys.exit(main())
