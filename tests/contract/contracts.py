"""Contract tests every implementation of a stage protocol inherits, as PyTerrier's
``TransformerTestCase`` (``pyterrier/testing.py``): a subclass overrides one factory
(``get_index``, ``get_retriever``, ``get_reranker``, ``get_chunker``, ``get_generator``) and
gets every check: batch shape, empty input, tie order, depth and determinism. A new index,
retriever, reranker, chunker or question generator gets them by a one-line subclass in its
own test file. Corpora are tiny and embedded by the hash embedder: the whole folder runs in
seconds.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from ragexp.errors import InvalidValue
from ragexp.generate.passages import Job, passages_of
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import Chunk, Document, ordered
from ragexp.text.tokens import TokenMatrix

# Two chunks with the same text tie under every scorer: a depth cut between them shows the
# tie rule (``records.ordered``: trec_eval's, ids descending).
TEXTS = {
    "c1": "The ledger disk is full when segments are never compacted.",
    "c2": "Snapshots are retained for thirty days by the leader.",
    "c3": "A full disk stops the broker from writing ledger segments.",
    "c4": "Retries back off exponentially before a job is dead-lettered.",
    "c5": "Dead-lettered jobs are kept for seven days, then deleted.",
    "c6": "Dead-lettered jobs are kept for seven days, then deleted.",
    "c7": "Lease renewal happens every ten seconds on each worker.",
    "c8": "The broker compacts ledger segments every night.",
}
CHUNKS = [Chunk(cid, f"doc{i % 3}.md", text) for i, (cid, text) in enumerate(TEXTS.items())]
QUERIES = {"q1": "ledger disk full", "q2": "how long are dead-lettered jobs kept",
           "q3": "snapshot retention", "q4": "broker segments"}
EMPTY = {"q0": ""}  # no term, the zero vector of the hash embedder

DOCS = [
    Document("guide.md", "Guide", "# Guide\n\nThe broker keeps ledger segments on disk. "
             "A full disk stops it from writing.\n\n## Retention\n\nSnapshots are retained "
             "for thirty days. Dead-lettered jobs are kept for seven days, then deleted. "
             "Operators can change both with the retention keys.\n"),
    Document("ops/lease.md", "Lease", "# Lease\n\nLease renewal happens every ten seconds on "
             "each worker. A worker that misses three renewals loses its lease.\n\n| key | "
             "default |\n|---|---|\n| lease.renew_s | 10 |\n"),
    Document("empty.md", "Empty", ""),
]


def resources(tmp_path, chunks=CHUNKS, **kw) -> Resources:
    """The run's resources over ``chunks``, embedded by the hash embedder (64 dimensions)."""
    return Resources(list(chunks), lambda: HashEmbedder(dim=64),
                     EmbeddingCache(str(tmp_path / "emb")), progress=False, **kw)


class IndexContract:
    """An ``Index`` (``index.base``): ``get_index()`` to override; ``search(searcher, queries,
    k) -> (ids, scores)`` reads its searcher (``(n, k)`` arrays, best first, -1 padding).
    ``exact``: tied rows both come back (flat search, BM25)."""

    exact = True

    def get_index(self):
        raise NotImplementedError

    def source(self):
        """What the index is built from: 12 unit vectors of 32 dimensions, rows 4 and 5 equal."""
        rng = np.random.default_rng(7)
        x = rng.standard_normal((12, 32)).astype(np.float32)
        x[5] = x[4]
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def queries(self):
        return self.source()[[0, 4, 9]] + 0.01

    def search(self, searcher, queries, k):
        scores, ids = searcher.search(queries, k)
        return ids, scores

    def built(self):
        index = self.get_index()
        return index, index.searcher(index.build(self.source()))

    def test_its_key_is_its_settings_and_its_source(self):
        index = self.get_index()
        assert index.key("chunks-a") == self.get_index().key("chunks-a")
        assert index.key("chunks-a") != index.key("chunks-b")
        assert index.source in ("vectors", "terms")

    def test_a_batch_comes_back_one_row_per_query_best_first(self):
        _, searcher = self.built()
        ids, scores = self.search(searcher, self.queries(), 3)
        assert ids.shape == scores.shape == (len(self.queries()), 3)
        for row_ids, row in zip(ids, scores):
            valid = row[row_ids >= 0]
            assert np.all(np.diff(valid) <= 1e-6)

    def test_k_is_honoured_and_fewer_come_back_when_fewer_exist(self):
        _, searcher = self.built()
        n = len(self.source())
        for k in (1, 2, n, n + 5):
            ids, _ = self.search(searcher, self.queries(), k)
            found = (ids >= 0).sum(axis=1)
            assert np.all(found <= min(k, n)) and ids.shape[1] <= k

    def test_an_empty_batch_searches_nothing(self):
        _, searcher = self.built()
        ids, scores = self.search(searcher, self.queries()[:0], 3)
        assert len(ids) == len(scores) == 0

    def test_tied_rows_come_back_together_with_equal_scores(self):
        """Which of two tied rows comes first is the index's own (``DenseRetriever`` cuts ties
        by id, ``index.cutoff``); that both come back, scored alike, is the contract."""
        if not self.exact:
            pytest.skip("an approximate index may visit one of two tied rows only")
        _, searcher = self.built()
        ids, scores = self.search(searcher, self.queries()[1:2], 2)  # rows 4 and 5 tie
        assert sorted(ids[0].tolist()) == [4, 5] and scores[0][0] == scores[0][1]

    def test_building_twice_or_keeping_it_on_disk_searches_the_same(self):
        index, searcher = self.built()
        again = index.searcher(index.build(self.source()))
        kept = index.searcher(pickle.loads(pickle.dumps(index.build(self.source()))))
        first = self.search(searcher, self.queries(), 4)
        for other in (again, kept):
            for a, b in zip(first, self.search(other, self.queries(), 4)):
                assert np.array_equal(a, b)


class TermIndexContract(IndexContract):
    """An ``Index`` built from the chunks' terms (BM25): queries are texts."""

    def source(self):
        """The chunks' terms (``Resources.terms``): ``TEXTS`` (c5 and c6, rows 4 and 5, equal)
        and four more."""
        return TokenMatrix.build(list(TEXTS.values()) + [
            "ledger ledger broker", "quorum of the cluster", "worker pools", "payload limits"])

    def queries(self):
        return ["dead-lettered jobs kept", "ledger disk", "quorum"]

    def search(self, searcher, queries, k):
        return searcher.top_k(list(queries), k)

    def test_tied_rows_come_back_together_with_equal_scores(self):
        """BM25 orders ties by lower row (``bm25.TopK``)."""
        _, searcher = self.built()
        ids, scores = self.search(searcher, ["dead-lettered jobs kept"], 2)  # c5, c6: rows 4, 5
        assert ids[0].tolist() == [4, 5] and scores[0][0] == scores[0][1]


class RetrieverContract:
    """A ``Retriever`` (``stages.retrievers``): ``get_retriever(resources)`` to override.
    ``exact``: the depth cut goes through ties as ``records.ordered`` orders them (every
    retriever but one over an approximate index)."""

    exact = True

    def get_retriever(self, resources):
        raise NotImplementedError

    @pytest.fixture
    def retriever(self, tmp_path):
        return self.get_retriever(resources(tmp_path))

    def test_a_batch_ranks_each_query_as_alone(self, retriever):
        together = retriever.search(QUERIES, 3)
        assert set(together) == set(QUERIES)
        for qid, text in QUERIES.items():  # a batch's matrix product may round otherwise
            alone = retriever.search({qid: text}, 3)[qid]
            assert ordered(together[qid]) == ordered(alone)
            assert together[qid] == pytest.approx(alone, rel=1e-5)
        known = {c.chunk_id for c in CHUNKS}
        assert all(set(r) <= known and all(isinstance(s, float) for s in r.values())
                   for r in together.values())

    def test_no_query_and_an_empty_query_rank_nothing(self, retriever):
        assert retriever.search({}, 3) == {}
        assert retriever.search(EMPTY, 3).get("q0", {}) == {}

    def test_k_is_honoured_through_ties_and_fewer_come_back_when_fewer_exist(self, retriever):
        deepest = retriever.search(QUERIES, len(CHUNKS) + 5)
        assert all(len(r) <= len(CHUNKS) for r in deepest.values())
        for k in range(1, len(CHUNKS) + 2):
            cut = retriever.search(QUERIES, k)
            for qid, scores in cut.items():
                assert len(scores) == min(k, len(deepest[qid]))
                if self.exact:
                    assert ordered(scores) == ordered(deepest[qid])[:k]

    def test_a_depth_below_one_is_refused(self, retriever):
        with pytest.raises(InvalidValue):
            retriever.search(QUERIES, 0)

    def test_the_same_search_ranks_the_same(self, retriever, tmp_path):
        first = retriever.search(QUERIES, 4)
        assert retriever.search(QUERIES, 4) == first
        assert self.get_retriever(resources(tmp_path / "again")).search(QUERIES, 4) == first


class RerankerContract:
    """A ``Reranker`` (``stages.rerankers``): ``get_reranker()`` to override. It reorders each
    query's head (``top_n``), never adds or drops an item, and keeps the tail's order."""

    def get_reranker(self):
        raise NotImplementedError

    @pytest.fixture
    def res(self, tmp_path):
        return resources(tmp_path)

    @pytest.fixture
    def first_stage(self, res):
        from ragexp.stages.retrievers import BM25Retriever

        return BM25Retriever(res).search(QUERIES, len(CHUNKS))

    def test_each_query_keeps_its_items_and_its_tail_order(self, res, first_stage):
        reranker = self.get_reranker()
        assert isinstance(reranker.top_n, int) and reranker.top_n >= 0
        out = reranker.rerank(QUERIES, first_stage, res.passages)
        assert set(out) == set(first_stage)
        for qid, scores in first_stage.items():
            assert set(out[qid]) == set(scores)
            assert ordered(out[qid])[reranker.top_n:] == ordered(scores)[reranker.top_n:]

    def test_nothing_to_rerank_and_an_empty_query_are_taken(self, res, first_stage):
        reranker = self.get_reranker()
        assert reranker.rerank({}, {}, res.passages) == {}
        assert reranker.rerank(QUERIES, {q: {} for q in QUERIES},
                               res.passages) == {q: {} for q in QUERIES}
        empty = reranker.rerank(EMPTY, {"q0": first_stage["q1"]}, res.passages)
        assert set(empty["q0"]) == set(first_stage["q1"])

    def test_the_same_ranking_reranks_the_same(self, res, first_stage):
        reranker = self.get_reranker()
        assert reranker.rerank(QUERIES, first_stage, res.passages) == \
            self.get_reranker().rerank(QUERIES, first_stage, res.passages)


class ChunkerContract:
    """A ``Chunker`` (``stages.chunking``): ``get_chunker(tmp_path)`` to override. A batch of
    documents chunks as each document alone; ids are unique; each chunk's spans lie in its
    document."""

    def get_chunker(self, tmp_path):
        raise NotImplementedError

    def test_a_batch_chunks_as_each_document_alone(self, tmp_path):
        chunker = self.get_chunker(tmp_path)
        together = chunker.chunk(DOCS)
        assert together == [c for d in DOCS for c in chunker.chunk([d])]
        assert {d.doc_id for d in DOCS if d.text.strip()} <= {c.doc_id for c in together} \
            <= {d.doc_id for d in DOCS}

    def test_ids_are_unique_and_spans_lie_in_their_document(self, tmp_path):
        chunks = self.get_chunker(tmp_path).chunk(DOCS)
        assert len({c.chunk_id for c in chunks}) == len(chunks)
        length = {d.doc_id: len(d.text) for d in DOCS}
        for c in chunks:
            assert c.text.strip()
            assert all(0 <= a <= b <= length[c.doc_id] for a, b in c.spans)

    def test_no_document_chunks_to_nothing_and_an_empty_one_to_no_text_of_its_own(self,
                                                                                  tmp_path):
        """An empty document yields no chunk, or one of its title alone (``chunking=none``
        keeps every document): no span of text."""
        chunker = self.get_chunker(tmp_path)
        assert chunker.chunk([]) == []
        assert all(a == b for c in chunker.chunk([DOCS[-1]]) for a, b in c.spans)

    def test_the_same_documents_chunk_the_same(self, tmp_path):
        assert self.get_chunker(tmp_path).chunk(DOCS) == \
            self.get_chunker(tmp_path / "again").chunk(DOCS)


class GeneratorContract:
    """A question ``Generator`` (``generate.generation``): ``get_generator()`` to override. One
    record or drop reason per job, a batch written as each job alone, the same seed the same
    questions."""

    seed = 3

    def get_generator(self):
        raise NotImplementedError

    def docs(self):
        return DOCS[:2]

    def jobs(self, generator) -> list[Job]:
        passages = passages_of(self.docs())
        generator.prepare(self.docs(), passages)
        return [Job(p, 0, generator.kinds[i % len(generator.kinds)], i)
                for i, p in enumerate(passages)]

    def test_one_record_or_reason_per_job_and_a_batch_as_each_job_alone(self):
        generator = self.get_generator()
        jobs = self.jobs(generator)
        assert jobs and generator.write([], self.seed) == []
        out = generator.write(jobs, self.seed)
        assert len(out) == len(jobs)
        assert out == [generator.write([job], self.seed)[0] for job in jobs]
        records = [r for r in out if isinstance(r, dict)]
        assert records and all(r["question"].strip() for r in records)

    def test_the_same_seed_writes_the_same_questions(self):
        generator, again = self.get_generator(), self.get_generator()
        assert generator.write(self.jobs(generator), self.seed) == \
            again.write(self.jobs(again), self.seed)
