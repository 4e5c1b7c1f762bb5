"""``make bench-scale``: time and peak memory of every stage on synthetic BEIR folders of growing
size, the growth exponent between sizes, and what a sweep of 8 query-time variants costs.

Per size (a child process each, so peak memory is that size's alone), on a folder from
``synth.py`` with the hash embedder (``--dim``), passages kept whole (``chunking=none``):

1. each stage alone, as the pipeline runs it: load (BEIR reader), chunk, tokenize, BM25 build,
   embed (empty embedding cache), dense index, search (hybrid RRF + lexical reranker, all
   queries in one batch), metrics, logging (MLflow: metrics, ``per_question.csv`` and the same
   table ``per_question.json``, one upload), with the peak RSS of the process while it ran (sampled);
2. the 8-variant sweep (reranker x ``fusion.k`` x abstain budget), each job through the Hydra
   entry point (``app.run_logged``: everything a job does, logging included), on empty caches
   with stage reuse. Its first job is one run on empty caches: it builds every stage, exactly
   as a lone run does. The ratio is the whole sweep / that first job.

3. the ``index`` group on the same vectors (``index_rows``): ``flat`` against ``hnsw`` (one
   graph, ``HNSW_GRAPH``: ``M`` 16, ``ef_construction`` 40, the most a 1,000,000-passage build
   affords in about 10 minutes on 2 cores; searched at ``ef_search`` 128, 512 and 2048): build
   seconds, bytes, p50 latency of one query alone (first 200 queries), recall@10 against exact
   search (ties counted), peak RSS while building; and blocked exact search (``index.block_size``) over a tenth of the queries
   and over all of them, whose peak RSS above the start must agree within 10%. Targets at
   1,000,000: some HNSW setting with p50 <= flat p50 / 10 and recall@10 >= 0.95 (on hash
   vectors none reaches it: docs/scale.md, ``tools.bench_hnsw``).

4. logging at 100,000 questions: one run (dense retrieval, no reranker) over the 100,000-passage
   folder with 100,000 queries, timing the per-question logging inside it
   (``tracking.write_per_question``: the CSV artifact and the MLflow table, uploaded with the
   run's other artifacts), as a share of the run.

5. BM25 against bm25s at each size (``bench_bm25_scale.py``): tokenizing (target >= 1.0x
   from 100,000 passages), fitting, the index's bytes (target <= 1.1x at 1,000,000) and the
   peak RSS of fitting.

6. embedding (``bench_embedding.py``): MiniLM's passages/s through the cache and the time it
   projects for 1,000,000 passages (``--minilm-passages``); the import of 1,000,000 x 384
   precomputed vectors (``embedder=precomputed``, every check) against ``np.load`` of the same
   matrix (``--import-rows``; target within 2x).

Sizes run in ``--jobs`` parallel child processes (default 1); every ratio is measured within one
process, so parallel sizes slow absolute times, not the comparisons.

The growth exponent of a stage between sizes n1 < n2 is ``log(t2 / t1) / log(n2 / n1)`` (1 =
linear). Peak memory is compared with the vectors plus the BM25 sparse matrices.

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


def one_size(n: int, queries: int, dim: int, work: Path) -> dict:
    """Measure one size in this process; returns the JSON-able record."""
    from ragexp.data import docrank
    from ragexp.data.datasets import BeirDataset
    from ragexp.evaluation import metrics
    from ragexp.index.cache import EmbeddingCache
    from ragexp.index.embedders import HashEmbedder
    from ragexp.index.resources import Resources
    from ragexp.run.pipeline import rank
    from ragexp.stages.chunking import WholeDocumentChunker
    from ragexp.stages.fusion.rank import RRF
    from ragexp.stages.rerankers import LexicalReranker
    from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part
    from tools import bench_bm25_scale as bm25_scale
    from tools import synth

    data = work / f"synth-{n}-{queries}"
    if not (data / "qrels" / "test.tsv").is_file():
        synth.generate(data, n, queries)
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
            res.dense_index()
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
        indexes = index_rows(vectors, HashEmbedder(dim=dim).embed(list(texts.values()), "query"),
                             sampler)
        against_bm25s = bm25_scale.measure([c.text for c in chunks], sampler)
    need = vectors.nbytes + sparse_bytes(bm25)
    record = {"n": n, "queries": len(qs), "dim": dim, "stages": st, "base": base,
              "peak": max(v["peak"] for v in st.values()), "vectors_bm25": need,
              "indexes": indexes, "bm25s": against_bm25s}
    sampler.stop()
    # The sweep below starts from nothing: what this measurement held must not count there.
    del res, vectors, bm25, ranking, judged, chunks, docs, ds, qs, texts, scores, overall, table
    gc.collect()
    record.update(_sweep(data, dim, work))
    return record


HNSW_GRAPH = {"M": 16, "ef_construction": 40}  # 1,000,000 passages in 9-12 min on 2 busy cores
HNSW_EF_SEARCH = (128, 512, 2048)  # searched on the one graph (docs/scale.md: bench_hnsw)


def index_rows(vectors, queries, sampler, sample: int = 200,
               block_size: int = 65536) -> dict:
    """``flat`` and ``hnsw`` over the same ``vectors`` (n, d) and ``queries`` (q, d): build s,
    bytes, p50 ms of each of the first ``sample`` queries alone, recall@10 vs exact (ties at
    the 10th place counted as ann-benchmarks does: ``ann.recall_vs_exact`` with scores), peak
    RSS while building. HNSW is one graph (``HNSW_GRAPH``) searched at each of
    ``HNSW_EF_SEARCH`` (``"hnsw"``: one row each). Then the peak RSS (above the start) of a
    blocked exact search over a tenth of the queries and over all of them."""
    from ragexp.index import ann
    from ragexp.index.flat import FlatIPIndex
    from tools.bench_hnsw import true_scores

    out: dict = {"hnsw": []}
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
    blocked = FlatIPIndex(vectors, block_size=block_size)
    for label, rows in (("tenth", max(1, len(queries) // 10)), ("all", len(queries))):
        st = {}
        start = rss_bytes()
        with sampler.window(st, label):
            blocked.search(queries[:rows], 100)
        out[f"blocked_{label}"] = {"queries": rows, "above": st[label]["peak"] - start}
    return out


def render_indexes(records: list[dict]) -> tuple[list[str], list[str]]:
    """Lines of the index table (one row per size and index setting, with its p50 as a share
    of flat's), and the FAIL lines of its targets at 1,000,000 passages (some HNSW setting with
    p50 <= flat p50 / 10 and recall@10 >= 0.95; blocked search peak within 10% whatever the
    number of queries)."""
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
        spread = abs(every["above"] - tenth["above"]) / max(tenth["above"], 1)
        lines.append(f"| {r['n']:,} | flat, block_size 65536 | | | | | | "
                     f"{tenth['queries']:,} queries: +{tenth['above'] / mib:,.0f} MiB, "
                     f"{every['queries']:,}: +{every['above'] / mib:,.0f} MiB |")
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
                failed.append(f"blocked search peak at {r['n']:,} grows {spread:.0%} from "
                              f"{tenth['queries']:,} to {every['queries']:,} queries (target "
                              f"<= 10%)")
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


def _sweep(data: Path, dim: int, work: Path) -> dict:
    """8 query-time variants on empty caches (the sweep with stage reuse); its first job is one
    run on empty caches."""
    from hydra import initialize_config_dir

    from ragexp.data import beir
    from ragexp.index.stagestore import forget_memory
    from ragexp.run.app import CONF_DIR

    forget_memory()
    beir._LAST_CORPUS.clear()  # the stage measurement above read the corpus: start cold
    sampler, first = PeakRSS(), {}
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"), \
            tempfile.TemporaryDirectory(dir=work) as tmp:
        with sampler.window(first, "run"):
            each = [_job(data, dim, Path(tmp) / "sweep", VARIANTS[0])]
        sampler.stop()
        each += [_job(data, dim, Path(tmp) / "sweep", v) for v in VARIANTS[1:]]
    forget_memory()
    return {"one_run_s": each[0], "sweep_s": sum(each), "sweep_each_s": each,
            "run_peak": first["run"]["peak"]}


def logging_share(n: int, queries: int, dim: int, work: Path) -> dict:
    """A ``queries``-question run; the time its per-question logging took, inside it."""
    from hydra import initialize_config_dir

    from ragexp.run.app import CONF_DIR
    from ragexp.tracking import store as tracking
    from tools import synth

    data = work / f"synth-{n}-{queries}"
    if not (data / "qrels" / "test.tsv").is_file():
        synth.generate(data, n, queries)
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
        peak = max(r["peak"], r.get("run_peak", 0))
        peak_over = (peak - r["base"]) / r["vectors_bm25"]
        notes.append(
            f"{r['n']:,} passages, {r['queries']:,} queries, hash embedder {r['dim']}-d: one run "
            f"(the sweep's first job, on empty caches, logging included) {r['one_run_s']:.1f} s; "
            f"8-variant sweep "
            f"{r['sweep_s']:.1f} s = {ratio:.2f}x one run (target <= 2 at 1,000,000); peak RSS "
            f"(stages or the whole first run) {peak / mib:,.0f} MiB, "
            f"{(peak - r['base']) / mib:,.0f} MiB above the "
            f"interpreter = {peak_over:.2f}x vectors + BM25 matrix "
            f"({r['vectors_bm25'] / mib:,.0f} MiB; target <= 2 at 1,000,000)")
        if r["n"] >= 1_000_000 and ratio > 2:
            failed.append(f"sweep ratio at {r['n']:,}: {ratio:.2f}")
        if r["n"] >= 1_000_000 and peak_over > 2:
            failed.append(f"peak memory at {r['n']:,}: {peak_over:.2f}x")
    if not any(r["n"] >= 1_000_000 for r in records):
        failed.append("no corpus of 1,000,000 passages measured: the sweep and memory targets "
                      "are unchecked")
    big = max(records, key=lambda r: r["n"], default=None)
    if big:
        notes.insert(0, f"largest corpus measured: {big['n']:,} passages; one run on empty "
                     f"caches took {big['one_run_s']:.0f} s and peaked at "
                     f"{max(big['peak'], big.get('run_peak', 0)) / mib:,.0f} MiB RSS")
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
