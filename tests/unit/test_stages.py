"""Stage reuse across jobs: what a query-time change reuses, what a chunking or BM25 change
rebuilds, identical results with and without the store, disk reuse across processes, one build
when two processes miss at once, and stale or unreadable stage files."""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from conftest import CORPUS, GOLDEN

import ragexp.index.stagestore as stagestore
from ragexp.config.build import Stages
from ragexp.data.datasets import MarkdownDataset
from ragexp.index.bm25 import BM25Params
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.stagestore import StageStore, stage_key
from ragexp.run.pipeline import LATENCY_SAMPLE, run_experiment
from ragexp.session import Session
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.rerankers import LexicalReranker, NoReranker
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part
from ragexp.text.tokens import TokenMatrix

VOLATILE = ("time.", "stage", "cache.")


@dataclass(frozen=True)
class CountingChunker(MarkdownChunker):
    calls: list = field(default_factory=list, compare=False, hash=False, repr=False)

    def chunk(self, docs):
        self.calls.append(1)
        return super().chunk(docs)


@dataclass
class CountingEmbedder(HashEmbedder):
    texts: list = field(default_factory=list, repr=False)

    def embed(self, texts, mode="passage"):
        if mode == "passage":
            self.texts.extend(texts)
        return super().embed(texts, mode)


@pytest.fixture(scope="module")
def dataset():
    return MarkdownDataset(str(CORPUS), str(GOLDEN))


def _run(dataset, tmp_path, store, chunker=None, reranker=None, rrf_k=60.0, budget=0.125,
         k1=1.5, embedder=None, latency_sample=LATENCY_SAMPLE):
    embedder = embedder or CountingEmbedder(dim=64)
    return run_experiment(
        dataset, Stages(chunker or CountingChunker(), lambda: embedder,
                        lambda res: HybridRetriever(res, {
                            "dense": Part(DenseRetriever, 50), "bm25": Part(BM25Retriever, 50)},
                            RRF(rrf_k)),
                        reranker or LexicalReranker(top_n=20), LexicalSignal(),
                        cache=EmbeddingCache(str(tmp_path / "emb")), bm25=BM25Params(k1=k1)),
        budget=budget, progress=False, store=store, latency_sample=latency_sample)


def _measured(metrics):
    return {k: v for k, v in metrics.items() if not k.startswith(VOLATILE)}


QUERY_TIME = [("memory", dict(reranker=NoReranker())), ("disk", dict(rrf_k=20.0)),
              ("disk", dict(budget=0.25))]


@pytest.mark.parametrize(("where", "change"), QUERY_TIME, ids=["reranker", "rrf_k", "budget"])
def test_query_time_change_rebuilds_nothing(dataset, tmp_path, change, where):
    root = str(tmp_path / "stages")
    first = _run(dataset, tmp_path, StageStore(root))
    assert first.metrics["stages.built"] == 8 and first.metrics["stages.reused"] == 0
    assert first.metrics["time.query_replayed"] == 0
    if where == "disk":
        Session.start()  # as a new process would: nothing in memory, everything on disk
    chunker, emb = CountingChunker(), CountingEmbedder(dim=64)
    store = StageStore(root)
    second = _run(dataset, tmp_path, store, chunker=chunker, embedder=emb, **change)
    assert chunker.calls == [] and emb.texts == []  # nothing chunked, no passage embedded
    in_memory = "memory" if where == "memory" else "built"  # kept in memory only
    expected = {"chunks": where, "tokens": where, "bm25": where, "vectors": where,
                "dense_index": in_memory, "dense_search": in_memory, "bm25_search": in_memory,
                "bm25_best": in_memory}
    assert store.events == expected
    assert second.metrics["stages.built"] == (4 if where == "disk" else 0)
    # latency: every query's first stage replayed from memory, or searched again when nothing
    # is in memory (a new process)
    n_latency = min(LATENCY_SAMPLE, len(dataset.queries()))
    assert second.metrics["time.query_replayed"] == (n_latency if where == "memory" else 0)
    # ... and the run measures exactly what a run without the store measures
    Session.start()
    alone = _run(dataset, tmp_path, StageStore(enabled=False), **change)
    assert _measured(second.metrics) == _measured(alone.metrics)
    pd.testing.assert_frame_equal(second.per_question, alone.per_question)


def test_changes_rebuild_what_they_determine(dataset, tmp_path):
    root = str(tmp_path / "stages")
    _run(dataset, tmp_path, StageStore(root))
    store = StageStore(root)
    _run(dataset, tmp_path, store, k1=1.2)  # BM25 parameters: only BM25
    assert store.events == {"chunks": "memory", "tokens": "memory", "bm25": "built",
                            "vectors": "memory", "dense_index": "memory",
                            "dense_search": "memory", "bm25_search": "built",
                            "bm25_best": "built"}
    store = StageStore(root)
    emb = CountingEmbedder(dim=64)
    chunker = CountingChunker(max_words=80)
    _run(dataset, tmp_path, store, chunker=chunker, embedder=emb, k1=1.2)
    assert set(store.events.values()) == {"built"} and chunker.calls == [1]
    # the embedding cache below the stages still serves texts both chunkings share
    old = {c.text for c in MarkdownChunker().chunk(dataset.documents())}
    new = {c.text for c in MarkdownChunker(max_words=80).chunk(dataset.documents())}
    assert sorted(emb.texts) == sorted(new - old) and new & old


def test_latency_first_stage_is_searched_once_and_replayed_with_its_time(dataset, tmp_path):
    """``SearchReplay.searched_alone``: the first job searches (and times) each latency query;
    a later job on the same index gets the same ranking and the first job's measured seconds."""
    from ragexp.index.resources import Resources

    chunks = MarkdownChunker().chunk(dataset.documents())
    calls = []

    def slow_search(tag):
        def search():
            calls.append(tag)
            time.sleep(0.05)
            return {"q": {chunks[0].chunk_id: 1.0}}
        return search

    store = StageStore(str(tmp_path / "stages"))
    jobs = [Resources(chunks, lambda: CountingEmbedder(dim=64), stages=store, chunks_key="c")
            for _ in range(2)]
    got = [job.replay.searched_alone("bm25_search", {"q": "text"}, 10, slow_search(i),
                                     job.key(job.bm25_params))
           for i, job in enumerate(jobs)]
    assert calls == [0] and got[0] == got[1] == {"q": {chunks[0].chunk_id: 1.0}}
    assert jobs[0].replay.replayed == 0 and jobs[0].replay.replayed_s == 0.0
    assert jobs[1].replay.replayed == 1 and jobs[1].replay.replayed_s >= 0.05
    # another query, or another index (BM25 parameters), is searched afresh
    jobs[1].replay.searched_alone("bm25_search", {"q": "other text"}, 10, slow_search(2),
                                  jobs[1].key(jobs[1].bm25_params))
    other = Resources(chunks, lambda: CountingEmbedder(dim=64), stages=store, chunks_key="c",
                      bm25_params=BM25Params(k1=1.2))
    other.replay.searched_alone("bm25_search", {"q": "text"}, 10, slow_search(3),
                                other.key(other.bm25_params))
    assert calls == [0, 2, 3] and other.replay.replayed == 0
    # without a store (a lone run, serving) every call searches
    alone = Resources(chunks, lambda: CountingEmbedder(dim=64), chunks_key="c")
    for _ in range(2):
        alone.replay.searched_alone("bm25_search", {"q": "text"}, 10, slow_search(4),
                                    alone.key(alone.bm25_params))
    assert calls == [0, 2, 3, 4, 4] and alone.replay.replayed == 0


@dataclass
class SlowQueryEmbedder(HashEmbedder):
    """Records every query batch it embeds and takes 50 ms for each."""

    queries: list = field(default_factory=list, repr=False)

    def embed(self, texts, mode="passage"):
        if mode == "query":
            self.queries.append(list(texts))
            time.sleep(0.05)
        return super().embed(texts, mode)


def test_latency_query_embedding_is_made_once_and_replayed_on_any_index(dataset, tmp_path):
    """``Resources.query_vectors(cached=False)``: a later job with the same embedder gets the
    first job's vectors and measured seconds whatever index it searches (another chunking
    here), and a search kept by ``searched_alone`` keeps the replayed embedding in its time."""
    from ragexp.index.resources import Resources

    store = StageStore(str(tmp_path / "stages"))
    emb = SlowQueryEmbedder(dim=64)
    small = MarkdownChunker(max_words=60).chunk(dataset.documents())
    large = MarkdownChunker(max_words=250).chunk(dataset.documents())
    first = Resources(small, lambda: emb, stages=store, chunks_key="small")
    second = Resources(large, lambda: emb, stages=store, chunks_key="large")
    want = HashEmbedder(dim=64).embed(["refund policy"], "query")
    got = [first.query_vectors(["refund policy"], cached=False),
           second.query_vectors(["refund policy"], cached=False)]
    assert emb.queries == [["refund policy"]]  # embedded once, by the first job
    for vectors in got:
        np.testing.assert_array_equal(vectors, want)
    assert first.replay.replayed == 0 and first.replay.replayed_s == 0.0
    assert second.replay.replayed == 1 and second.replay.replayed_s >= 0.05
    # a new search whose embedding was replayed keeps the embedding's seconds for its own replay
    second.replay.replayed_s = 0.0

    def search():
        second.query_vectors(["refund policy"], cached=False)
        return {"q": {}}

    second.replay.searched_alone("dense_search", {"q": "refund policy"}, 10, search, "large")
    third = Resources(large, lambda: emb, stages=store, chunks_key="large")
    third.replay.searched_alone("dense_search", {"q": "refund policy"}, 10, search, "large")
    assert third.replay.replayed == 1 and third.replay.replayed_s >= 0.05
    # a hybrid part's view (an embedder of its own) counts its replays on the run's resources
    view = third.with_embedder(lambda: emb)
    view.query_vectors(["refund policy"], cached=False)
    assert view.replay is third.replay and third.replay.replayed == 2
    assert emb.queries == [["refund policy"]]
    # another embedder, other texts, or no store (a lone run, serving): embedded afresh
    other = SlowQueryEmbedder(dim=32)
    Resources(small, lambda: other, stages=store).query_vectors(["refund policy"], cached=False)
    first.query_vectors(["other text"], cached=False)
    alone = Resources(small, lambda: emb)
    alone.query_vectors(["refund policy"], cached=False)
    assert other.queries == [["refund policy"]] and alone.replay.replayed == 0
    assert emb.queries == [["refund policy"], ["other text"], ["refund policy"]]


@dataclass
class LoadsAtFirstUse(HashEmbedder):
    """Takes ``LOAD_S`` at its first call, as a model does that loads when it first embeds
    (``FastEmbedEmbedder`` whose vectors all came from the cache: its first latency query)."""

    calls: list = field(default_factory=list, repr=False)

    def embed(self, texts, mode="passage"):
        if not self.calls:
            time.sleep(LOAD_S)
        self.calls.append(mode)
        return super().embed(texts, mode)


LOAD_S = 0.5


def test_latency_leaves_out_a_model_loading_at_its_first_query(dataset, tmp_path):
    """The latency sample times its questions after one untimed query
    (``SearchReplay.warm_up``): a model that loads at its first query (every vector from the
    cache) counts neither in this run's p95, of 5 questions, where one load was the p95 (0.4 s over 5 ms), nor in the p95 of
    a later job of the sweep that replays this one's first stage. The warm-up is neither kept
    nor replayed: the later job replays exactly the 5 timed questions."""
    _run(dataset, tmp_path, StageStore(enabled=False), embedder=LoadsAtFirstUse(dim=64))
    store = StageStore(str(tmp_path / "stages"))
    first_model = LoadsAtFirstUse(dim=64)
    first = _run(dataset, tmp_path, store, embedder=first_model, latency_sample=5)
    assert "passage" not in first_model.calls  # every vector came from the cache
    later = _run(dataset, tmp_path, store, embedder=LoadsAtFirstUse(dim=64), latency_sample=5,
                 reranker=NoReranker())
    for run in (first, later):
        assert 0 < run.metrics["time.query_p50_ms"] <= run.metrics["time.query_p95_ms"]
        assert run.metrics["time.query_p95_ms"] < LOAD_S * 1000 / 4
    assert first.metrics["time.query_replayed"] == 0
    assert later.metrics["time.query_replayed"] == 5


def test_results_identical_with_and_without_the_store(dataset, tmp_path):
    runs = {}
    for label, store in [("off", StageStore(enabled=False)), ("cold", StageStore(str(tmp_path))),
                         ("warm", StageStore(str(tmp_path)))]:
        runs[label] = _run(dataset, tmp_path, store)
    for label in ("cold", "warm"):
        assert _measured(runs[label].metrics) == _measured(runs["off"].metrics)
        pd.testing.assert_frame_equal(runs[label].per_question, runs["off"].per_question)
        assert runs[label].ranking == runs["off"].ranking


def test_key_holds_the_code_fingerprint(monkeypatch):
    before = stage_key("chunks", {"corpus_hash": "x"})
    stagestore.code_fingerprint.cache_clear()
    monkeypatch.setattr(stagestore, "code_fingerprint", lambda: "edited-code")
    assert stage_key("chunks", {"corpus_hash": "x"}) != before
    assert stage_key("chunks", {"corpus_hash": "y"}) != stage_key("chunks", {"corpus_hash": "x"})


def _build_once(root: str, barrier, log: str) -> None:
    def build():
        with open(log, "a") as fh:
            fh.write("built\n")
        import time
        time.sleep(0.5)
        return np.arange(12.0).reshape(3, 4)

    barrier.wait()
    value = StageStore(root).get("vectors", "k1", build)
    assert np.array_equal(value, np.arange(12.0).reshape(3, 4))


@pytest.mark.slow
def test_two_processes_missing_the_same_stage_build_it_once(tmp_path):
    ctx = mp.get_context("spawn")
    barrier, log = ctx.Barrier(3), tmp_path / "log"
    procs = [ctx.Process(target=_build_once, args=(str(tmp_path / "s"), barrier, str(log)))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert log.read_text() == "built\n"
    assert not list((tmp_path / "s").rglob("*.part"))


def test_unreadable_stage_file_is_rebuilt(tmp_path):
    store = StageStore(str(tmp_path))
    store.get("bm25", "k", lambda: {"a": 1})
    (tmp_path / "bm25" / "k.pkl").write_bytes(b"\x80\x05truncated")
    Session.start()
    again = StageStore(str(tmp_path))
    assert again.get("bm25", "k", lambda: {"a": 2}) == {"a": 2}
    assert again.events == {"bm25": "built"}


def test_unwritable_store_builds_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = StageStore(str(blocker / "stages"))
    with pytest.warns(RuntimeWarning, match="cannot be written") as record:
        assert store.get("chunks", "a", lambda: [1]) == [1]
        assert store.get("tokens", "b", lambda: [2]) == [2]
    assert len(record) == 1 and str(blocker / "stages") in str(record[0].message)


def test_token_matrix_reads_back_each_chunks_terms():
    texts = ["Leases expire after 30 s", "", "the broker, the broker!", "BD-2110 ünïcode"]
    from ragexp.text.analysis import tokenize
    tm = TokenMatrix.build(texts)
    assert len(tm) == 4 and [tm[i] for i in range(4)] == [tokenize(t) for t in texts]
    assert tm[-1] == tokenize(texts[-1]) and tm[1:3] == [tokenize(t) for t in texts[1:3]]
    assert tm.ids.dtype == np.int32 and len(set(tm.vocab)) == len(tm.vocab)
    with pytest.raises(IndexError):
        tm[4]


@pytest.mark.parametrize("retriever", ["dense", "bm25"])
def test_first_stage_rankings_are_reused_only_for_the_same_queries_and_depth(
        dataset, tmp_path, retriever):
    from ragexp.index.resources import Resources
    from ragexp.stages.retrievers import BM25Retriever, DenseRetriever

    chunks = MarkdownChunker().chunk(dataset.documents())
    make = {"dense": DenseRetriever, "bm25": BM25Retriever}[retriever]

    def fresh(store):
        res = Resources(chunks, lambda: HashEmbedder(dim=64),
                        EmbeddingCache(str(tmp_path / "emb")), progress=False, stages=store,
                        chunks_key="handbook")
        return make(res)

    kept, plain = fresh(StageStore(root=None)), fresh(StageStore(enabled=False))
    q1, q2 = {"a": "dead letter retention"}, {"a": "snapshot schedule"}
    first = kept.search(q1, 10)
    first["a"].clear()  # a caller changing its ranking does not change the kept one
    assert kept.search(q1, 10) == plain.search(q1, 10) and plain.search(q1, 10)["a"]
    assert kept.search(q2, 10) == plain.search(q2, 10) != plain.search(q1, 10)
    assert kept.search(q1, 3) == plain.search(q1, 3) and len(plain.search(q1, 3)["a"]) == 3
    assert kept.search(q1, 10, cached=False) == plain.search(q1, 10)
