"""HNSW settings against exact search on ``make bench-scale``'s vectors: which ``(M,
ef_construction, ef_search)`` meet its 1,000,000-passage targets (p50 one query <= flat's / 10,
recall@10 vs exact >= 0.95) with a build that fits this machine.

Per size, on the ``synth.py`` folder ``bench_scale`` uses (passages kept whole; hash embedder,
384-d, or with ``--embedder minilm`` the ``minilm`` option's learned vectors, ``vectors_of``):
the first ``--queries`` queries (of the folder's 1,000) searched exactly (``FlatIPIndex``),
with their relative contrast and score gap at the 10th neighbour (``contrast``), then one graph
per ``(M, ef_construction)`` and each ``ef_search`` on it: build seconds, p50 ms of one query
alone (``ann.search_latency_ms``), and recall@10 vs exact counting ties as ann-benchmarks does
(``ann.recall_vs_exact`` with scores). The build time is projected to 1,000,000 passages as
``t * (N log N) / (n log n)`` (an HNSW insert visits O(log n) layers and candidates; Malkov and
Yashunin 2018, section 4.2), from the largest size measured.

``--topics N`` reads the folder ``synth.py`` writes with N topics (``synth.TOPICS``' share
and topic vocabulary; ``make bench-scale`` uses ``--topics 1000``; 0, the default, is the
structureless folder), and ``--folder DIR`` any BEIR folder instead (such as
``tools.docstrings``' real paragraphs), whose first n passages make size n. Under the table
it prints, per size, the relative contrast of the queries searched and of the passages
themselves (``own_contrast``: what a graph is built over, whatever the queries).

``python -m tools.bench_hnsw [--sizes 10000,100000] [--graphs 16:100,32:200] [--ef 64,128,256]
[--embedder hash|minilm] [--topics N | --folder DIR]``
"""

from __future__ import annotations

import os

os.environ.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true")

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

TARGET_N = 1_000_000
DEPTH = 10
FOLDER_QUERIES = 1000  # bench_scale's --queries, so both read the same folders


EMBEDDERS = ("hash", "minilm")


def hash_embed(dim: int) -> Callable[[list[str], str], np.ndarray]:
    """``(texts, mode) -> (len(texts), dim)`` float32 for one or more texts:
    ``HashEmbedder(dim)``, in blocks of 50,000 texts (``make bench-scale``'s vectors)."""
    # defer heavy import
    from ragexp.index.embedders import HashEmbedder

    emb = HashEmbedder(dim=dim)
    return lambda texts, mode: np.concatenate(
        [emb.embed(texts[i:i + 50_000], mode) for i in range(0, len(texts), 50_000)])


def minilm_embed(cache_dir: Path) -> Callable[[list[str], str], np.ndarray]:
    """``(texts, mode) -> (len(texts), 384)`` float32: the ``minilm`` embedder option (offline
    all-MiniLM-L6-v2 int8) as a run builds it: the config composed with ``embedder=minilm``
    and ``cache_dir``, the embedder from ``build.embedder`` and the texts through the run's
    embedding cache (``build.embedding_cache``: ``cache_dir/embeddings``, so a repeat embeds
    nothing). The model loads at the first text to embed."""
    # defer heavy import
    from hydra import compose, initialize_config_dir

    from ragexp.config import build, schema
    from ragexp.data import shipped

    schema.register()
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        cfg = compose("config", overrides=["embedder=minilm", f"cache_dir={cache_dir}"])
    emb, cache = build.embedder(cfg), build.embedding_cache(cfg)
    return lambda texts, mode: cache.embed(emb, texts, mode, progress=False)


def vectors_of(n: int, queries: int, dim: int, work: Path, embedder: str = "hash",
               topics: int = 0, folder: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Passage (n, d) and query (queries, d) vectors of the ``synth.py`` folder
    ``synth.folder(work, n, queries)`` (``bench_scale``'s; with ``topics`` > 0, the one with
    that many topics and ``synth.TOPICS``' other settings), or of the first n passages and
    first ``queries`` queries of the BEIR ``folder``, embedded once and kept beside it:
    ``hash{dim}.npz`` (``hash_embed``, d = ``dim``) or ``minilm384.npz`` (``minilm_embed``
    with ``cache_dir`` ``work/cache``, d = 384; ``dim`` unused), named for n and ``queries``
    in a given ``folder``. Raises ``InvalidValue`` for an embedder not in ``EMBEDDERS`` or a
    ``folder`` with fewer than n passages or ``queries`` queries."""
    # defer heavy import
    from ragexp.data.datasets import BeirDataset
    from ragexp.errors import InvalidValue
    from ragexp.stages.chunking import WholeDocumentChunker
    from tools import synth

    if embedder not in EMBEDDERS:
        raise InvalidValue(f"embedder {embedder!r}: choose one of {', '.join(EMBEDDERS)}")
    if folder is None:
        data = synth.folder(work, n, queries, {**synth.TOPICS, "topics": topics} if topics
                            else None)
    else:
        data = Path(folder)
    name = f"hash{dim}" if embedder == "hash" else "minilm384"
    cached = data / (f"{name}.npz" if folder is None else f"{name}-{n}-{queries}.npz")
    if cached.is_file():
        held = np.load(cached)
        return held["passages"], held["queries"]
    embed = hash_embed(dim) if embedder == "hash" else minilm_embed(work / "cache")
    ds = BeirDataset(str(data))
    docs, asked = ds.documents()[:n], ds.queries()[:queries]
    if len(docs) < n or len(asked) < queries:
        raise InvalidValue(f"{data}: asked for {n:,} passages and {queries:,} queries, it holds "
                           f"{len(ds.documents()):,} and {len(ds.queries()):,}")
    chunks = WholeDocumentChunker().chunk(docs)
    passages = embed([c.text for c in chunks], "passage")
    qs = embed([q.text for q in asked], "query")
    np.savez(cached, passages=passages, queries=qs)
    return passages, qs


def contrast(vectors: np.ndarray, queries: np.ndarray, k: int = DEPTH) -> dict[str, float]:
    """How far a query's k-th neighbour stands out from the rest of the corpus, on passage
    vectors (n, d) and query vectors (q, d), n > k, distances Euclidean:

    - ``relative_contrast``: mean over queries of the mean distance to all n passages, over the
      mean over queries of the distance to the k-th nearest (He, Kumar and Chang, "On the
      difficulty of nearest neighbor search", ICML 2012, eq. 1, with the k-th neighbour for
      the nearest); near 1, every passage is about as far as every other and a graph search
      must compare many candidates to order the top k;
    - ``gap_median``: the median over queries of the k-th minus the (k+1)-th best inner
      product (cosine for unit vectors): how far apart the ranks a top-k search must separate
      lie.

    Raises ``InvalidValue`` unless 1 <= k < n."""
    # defer heavy import
    from ragexp.errors import InvalidValue

    if not 1 <= k < len(vectors):
        raise InvalidValue(f"contrast at k={k} needs 1 <= k < passages ({len(vectors)})")
    scores = queries @ vectors.T
    sq = (np.einsum("qd,qd->q", queries, queries)[:, None]
          + np.einsum("nd,nd->n", vectors, vectors)[None, :] - 2 * scores)
    dist = np.sqrt(np.maximum(sq, 0.0))
    kth = np.partition(dist, k - 1, axis=1)[:, k - 1]
    top = -np.partition(-scores, k, axis=1)[:, :k + 1]
    top.sort(axis=1)
    return {"relative_contrast": float(dist.mean(axis=1).mean() / kth.mean()),
            "gap_median": float(np.median(top[:, 1] - top[:, 0]))}


def own_contrast(vectors: np.ndarray, sample: int = 200, k: int = DEPTH,
                 seed: int = 5) -> dict[str, float]:
    """``contrast`` of ``sample`` passages (drawn with ``seed``) against all n passages (n, d)
    at their (k + 1)-th neighbour, the k-th besides themselves: how much neighbourhood structure
    the vectors a graph is built over hold, whatever the queries. Raises ``InvalidValue``
    unless k + 1 < n."""
    rows = np.random.default_rng(seed).choice(len(vectors), min(sample, len(vectors)),
                                              replace=False)
    return contrast(vectors, vectors[rows], k=k + 1)


def true_scores(vectors: np.ndarray, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(q, k) exact inner product of each query with each returned id (-inf for -1)."""
    safe = np.where(ids >= 0, ids, 0)
    scores = np.einsum("qd,qkd->qk", queries, vectors[safe])
    return np.where(ids >= 0, scores, -np.inf)


def measure(n: int, graphs: list[tuple[int, int]], efs: list[int], queries: int, dim: int,
            work: Path, embedder: str = "hash", topics: int = 0,
            folder: Path | None = None) -> list[dict]:
    """One row per (M, ef_construction, ef_search), and one for flat (with the ``contrast``
    of the queries searched and the passages' ``own_contrast``), at ``n`` passages of
    ``embedder``'s vectors (``vectors_of`` with ``topics`` and ``folder``)."""
    from ragexp.index import ann
    from ragexp.index.flat import FlatIPIndex

    asked = queries if folder is not None else min(FOLDER_QUERIES, n)
    vectors, qs = vectors_of(n, asked, dim, work, embedder, topics, folder)
    qs = qs[:queries]
    own = own_contrast(vectors)
    flat = FlatIPIndex(vectors)
    exact_scores, exact = flat.search(qs, DEPTH)
    flat_p50 = ann.search_latency_ms(flat, qs, DEPTH)["index.search_p50_ms"]
    rows = [{"n": n, "index": "flat", "p50_ms": flat_p50, "recall": 1.0,
             "queries": len(qs), **contrast(vectors, qs),
             "own_contrast": own["relative_contrast"]}]
    for m, efc in graphs:
        start = time.perf_counter()
        built = ann.HNSWSpec(M=m, ef_construction=efc).build(vectors)
        build_s = time.perf_counter() - start
        for ef in efs:
            searcher = ann.HNSWSpec(M=m, ef_construction=efc, ef_search=ef).searcher(built)
            p50 = ann.search_latency_ms(searcher, qs, DEPTH)["index.search_p50_ms"]
            _, found = searcher.search(qs, DEPTH)
            recall = ann.recall_vs_exact(found, exact, true_scores(vectors, qs, found),
                                         exact_scores)
            rows.append({"n": n, "index": "hnsw", "M": m, "ef_construction": efc,
                         "ef_search": ef, "build_s": build_s, "p50_ms": p50, "recall": recall,
                         "bytes": built.nbytes})
            print(f"  n={n:,} M={m} efC={efc} efS={ef}: build {build_s:.1f} s, p50 "
                  f"{p50:.3f} ms ({p50 / flat_p50:.3f}x flat), recall {recall:.3f}",
                  file=sys.stderr, flush=True)
        del built
    return rows


def projected_build_s(build_s: float, n: int, target: int = TARGET_N) -> float:
    """``build_s`` at ``n`` passages scaled by ``(N log N) / (n log n)`` to ``target``."""
    return build_s * target * math.log(target) / (n * math.log(n))


def render(rows: list[dict]) -> str:
    """The markdown table: one row per size and setting, with the projected 1M build."""
    lines = ["| passages | M | ef_construction | ef_search | build | build projected to 1M | "
             "p50 one query | p50 / flat's | recall@10 vs exact |",
             "|---|---|---|---|---|---|---|---|---|"]
    flat = {r["n"]: r["p50_ms"] for r in rows if r["index"] == "flat"}
    for r in rows:
        if r["index"] == "flat":
            lines.append(f"| {r['n']:,} | flat | | | | | {r['p50_ms']:.2f} ms | 1 | 1.000 |")
            continue
        lines.append(f"| {r['n']:,} | {r['M']} | {r['ef_construction']} | {r['ef_search']} | "
                     f"{r['build_s']:.1f} s | {projected_build_s(r['build_s'], r['n']) / 60:.0f}"
                     f" min | {r['p50_ms']:.3f} ms | {r['p50_ms'] / flat[r['n']]:.3f} | "
                     f"{r['recall']:.3f} |")
    notes = [f"{r['n']:,} passages, the {r['queries']} queries searched: relative contrast "
             f"(mean distance / distance to the {DEPTH}th neighbour) "
             f"{r['relative_contrast']:.3f}, median gap between the {DEPTH}th and "
             f"{DEPTH + 1}th scores {r['gap_median']:.4f}"
             + (f"; the passages' own relative contrast (200 of them against all, at their "
                f"{DEPTH}th neighbour besides themselves) {r['own_contrast']:.3f}"
                if "own_contrast" in r else "")
             for r in rows if r["index"] == "flat" and "relative_contrast" in r]
    return "\n".join(lines + ([""] + notes if notes else []))


def _pairs(text: str) -> list[tuple[int, int]]:
    try:
        return [tuple(int(x) for x in p.split(":")) for p in text.split(",")]  # type: ignore
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give M:ef_construction pairs, comma-"
                                         f"separated, such as 16:100,32:200") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_hnsw",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=_ints, default=[10_000, 100_000])
    parser.add_argument("--graphs", type=_pairs, default=_pairs("16:100,32:200"),
                        help="M:ef_construction pairs, one graph each")
    parser.add_argument("--ef", type=_ints, default=[64, 128, 256], help="ef_search values")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=384, help="hash embedder dimension")
    parser.add_argument("--embedder", choices=EMBEDDERS, default="hash",
                        help="hash: bench-scale's vectors; minilm: the minilm embedder option's "
                             "(offline MiniLM int8, embedded once into minilm384.npz)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--topics", type=int, default=0,
                        help="synth folders with this many topics (0: none; make bench-scale: "
                             "1000)")
    source.add_argument("--folder", type=Path, help="a BEIR folder to measure instead, such as "
                                                    "python -m tools.docstrings writes")
    parser.add_argument("--work", default=".cache/ragexp/bench-scale")
    args = parser.parse_args(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    # defer heavy import
    from ragexp.errors import RagexpError

    try:
        rows = [r for n in args.sizes
                for r in measure(n, args.graphs, args.ef, args.queries, args.dim, work,
                                 args.embedder, args.topics, args.folder)]
    except RagexpError as exc:  # a folder too small or unreadable, an unknown embedder
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
