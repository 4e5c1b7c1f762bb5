"""Exact dense index, the three retrievers on the real corpus (hash embeddings), rerankers."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.flat import FlatIPIndex
from ragexp.index.resources import Resources
from ragexp.records import Chunk, ordered
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.rerankers import (
    CrossEncoderReranker,
    LexicalReranker,
    NoReranker,
    shortest_window,
)
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part


def _unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------- FlatIPIndex

@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    return _unit(rng, 1500, 48), _unit(rng, 40, 48)


@pytest.mark.parametrize("blas", [True, False])
def test_flat_index_matches_brute_force(vectors, blas):
    base, queries = vectors
    scores, ids = FlatIPIndex(base).search(queries, 10, blas=blas)
    full = queries @ base.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), atol=1e-5)


def test_blas_and_scan_paths_agree_and_restore_the_threshold(vectors):
    base, queries = vectors
    index = FlatIPIndex(base)
    before = faiss.cvar.distance_compute_blas_threshold
    s1, i1 = index.search(queries, 25, blas=True)
    assert faiss.cvar.distance_compute_blas_threshold == before
    s2, i2 = index.search(queries, 25, blas=False)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, atol=1e-5)
    single = np.vstack([index.search(q[None], 25, blas=True)[1] for q in queries])
    np.testing.assert_array_equal(single, i1)


def test_flat_search_is_faiss_index_flat_ip_without_a_copy():
    """Same ids and scores as ``faiss.IndexFlatIP`` on both FAISS paths, over the caller's own
    matrix (an IndexFlatIP would hold a second copy of every vector)."""
    rng = np.random.default_rng(7)
    base, queries = _unit(rng, 20_000, 64), _unit(rng, 300, 64)
    ref = faiss.IndexFlatIP(64)
    ref.add(base)
    ours = FlatIPIndex(base)
    assert np.shares_memory(ours.vectors, base)
    for blas in (True, False):
        old = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = 1 if blas else 1 << 30
        try:
            expected = ref.search(queries, 50)
        finally:
            faiss.cvar.distance_compute_blas_threshold = old
        got = ours.search(queries, 50, blas=blas)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[0], expected[0])


def test_k_larger_than_the_index(vectors):
    base, queries = vectors
    scores, ids = FlatIPIndex(base[:5]).search(queries[:3], 10)
    assert ids.shape == (3, 5)
    assert sorted(ids[0].tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("bad", [
    np.ones((4, 8), dtype=np.float32),  # norm sqrt(8)
    np.zeros((0, 8), dtype=np.float32),
    np.ones(8, dtype=np.float32) / np.sqrt(8),  # 1-D
])
def test_flat_index_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        FlatIPIndex(bad)


# ---------------------------------------------------------------- retrievers on the corpus

@pytest.fixture(scope="module")
def resources(chunks, tmp_path_factory):
    return Resources(chunks, lambda: HashEmbedder(), progress=False,
                     cache=EmbeddingCache(str(tmp_path_factory.mktemp("emb"))))


@pytest.fixture(scope="module")
def queries(golden):
    return {q.qid: q.text for q in golden}


def test_dense_retriever_is_brute_force_cosine(resources, queries, chunks):
    out = DenseRetriever(resources).search(queries, 10)
    assert set(out) == set(queries)
    emb = HashEmbedder()
    passages = emb.embed([c.text for c in chunks])
    for qid, text in queries.items():
        assert len(out[qid]) == 10
        full = passages @ emb.embed([text])[0]
        tenth = np.sort(full)[::-1][9]
        for cid, score in out[qid].items():
            i = resources.position[cid]
            assert score == pytest.approx(full[i], abs=1e-5)
            assert full[i] >= tenth - 1e-5
        assert sum(full > tenth + 1e-5) <= 10


def test_bm25_retriever_returns_the_positive_top_k(resources, queries):
    out = BM25Retriever(resources).search(queries, 10)
    scores = resources.bm25.score(list(queries.values()))
    for row, qid in enumerate(queries):
        positive = int((scores[row] > 0).sum())
        assert len(out[qid]) == min(10, positive)
        assert all(s > 0 for s in out[qid].values())
        expected = np.sort(scores[row])[::-1][:len(out[qid])]
        np.testing.assert_allclose(sorted(out[qid].values(), reverse=True), expected)


@pytest.mark.parametrize("kwargs", [{}, {"dense": False}, {"bm25": False}, {"rrf_k": 0}])
def test_hybrid_retriever_returns_k(resources, queries, kwargs):
    parts = {"dense": Part(DenseRetriever, 30) if kwargs.get("dense", True) else None,
             "bm25": Part(BM25Retriever, 30) if kwargs.get("bm25", True) else None}
    out = HybridRetriever(resources, parts, RRF(kwargs.get("rrf_k", 60))).search(queries, 10)
    assert set(out) == set(queries)
    positive = (resources.bm25.score(list(queries.values())) > 0).sum(axis=1)
    for qid, n_positive in zip(queries, positive):
        # BM25 alone only returns chunks that share a term with the query.
        assert len(out[qid]) == (10 if kwargs.get("dense", True) else min(10, n_positive))
        assert all(cid in resources.position for cid in out[qid])


def test_bm25_retriever_in_query_blocks_equals_one_block(resources, queries):
    whole = BM25Retriever(resources).search(queries, 10)
    blocked = BM25Retriever(resources)
    blocked.block = 3  # 108 queries in 36 blocks
    assert blocked.search(queries, 10) == whole


def test_retrievers_handle_no_queries(resources):
    assert DenseRetriever(resources).search({}, 10) == {}
    assert BM25Retriever(resources).search({}, 10) == {}


def test_empty_chunk_list_is_refused():
    with pytest.raises(ValueError, match="no chunks"):
        Resources([], lambda: HashEmbedder())


# ---------------------------------------------------------------- rerankers

@pytest.mark.parametrize("positions,expected", [
    ({}, 0),
    ({"a": [5]}, 0),
    ({"a": [0, 10], "b": [3, 12]}, 2),  # 10..12
    ({"a": [0, 20], "b": [10], "c": [25, 12]}, 10),  # 10..20
    ({"a": [3], "b": [7], "c": [4]}, 4),
    ({"a": [0, 1, 2, 50], "b": [49]}, 1),
])
def test_shortest_window(positions, expected):
    assert shortest_window(positions) == expected


@pytest.fixture()
def small(tmp_path):
    texts = ["gamma delta", "alpha beta together", "alpha something something something beta",
             "filler one", "filler two", "alpha beta", "filler three", "filler four"]
    chunks = [Chunk(f"c{i}", "d", t) for i, t in enumerate(texts)]
    res = Resources(chunks, lambda: HashEmbedder(), EmbeddingCache(str(tmp_path)), progress=False)
    # First-stage order c0, c1, ..., c7.
    return res, {"q": {f"c{i}": float(8 - i) for i in range(8)}}


def test_lexical_reranker_reorders_only_the_head(small):
    res, ranking = small
    out = LexicalReranker(top_n=3).rerank({"q": "alpha beta"}, ranking, res.passages)
    # Head: c1 (both terms adjacent) > c2 (both, 4 apart) > c0 (none). The tail keeps its
    # order although c5 would score best of all.
    assert ordered(out["q"]) == ["c1", "c2", "c0", "c3", "c4", "c5", "c6", "c7"]


def test_lexical_score_by_hand(small):
    res, _ = small
    rr = LexicalReranker(top_n=3, proximity_weight=0.2)
    assert rr.score("alpha beta", "alpha beta together", res.bm25) == pytest.approx(1 + 0.2 * 1)
    assert rr.score("alpha beta", "alpha x x x beta", res.bm25) == pytest.approx(1 + 0.2 * 2 / 5)
    idf_a, idf_b = res.bm25.term_idf("alpha"), res.bm25.term_idf("gamma")
    assert rr.score("alpha gamma", "only alpha here", res.bm25) == pytest.approx(
        idf_a / (idf_a + idf_b))
    assert rr.score("the of", "alpha", res.bm25) == 0.0


def test_lexical_reranker_keeps_first_stage_order_among_ties(small):
    res, ranking = small
    out = LexicalReranker(top_n=8).rerank({"q": "zzz"}, ranking, res.passages)  # nothing matches
    assert ordered(out["q"]) == ordered(ranking["q"])


def test_lexical_reranker_rejects_top_n_below_one():
    with pytest.raises(ValueError, match="top_n"):
        LexicalReranker(top_n=0)


def test_no_reranker_is_identity(small):
    res, ranking = small
    assert NoReranker().rerank({"q": "x"}, ranking, res.passages) is ranking


def test_cross_encoder_needs_a_model_path(tmp_path):
    with pytest.raises(ValueError, match="needs reranker.model_path=DIR") as err:
        CrossEncoderReranker()
    assert "reranker=lexical" in str(err.value)
    with pytest.raises(ValueError, match="has no model.onnx"):
        CrossEncoderReranker(model_path=str(tmp_path))


# ---------------------------------------------------------------- ties at the k-th score

def _trec_top_k(scores: dict[str, float], k: int) -> dict[str, float]:
    """Independent reference: trec_eval's order (score descending, id descending) cut at k."""
    return {c: scores[c] for c in sorted(scores, key=lambda c: (-scores[c], _neg(c)))[:k]}


def _neg(cid: str) -> tuple:
    return tuple(-ord(ch) for ch in cid) + (1,)  # id descending; a prefix after its extensions


@pytest.mark.parametrize("seed", range(6))
def test_top_k_by_id_cuts_ties_as_trec_eval_orders_them(seed):
    from ragexp.index.cutoff import top_k_by_id

    rng = np.random.default_rng(seed)
    n, rows = 60, 8
    scores = rng.integers(0, 4, size=(rows, n)).astype(np.float32)  # many ties everywhere
    scores[:, rng.integers(0, n, 5)] = -np.inf  # unmatched items: padding, as BM25 pads
    keys = [f"doc{rng.integers(0, 10 ** 6):06d}-{i}" for i in range(n)]

    def search(r, depth):  # an exact index cutting ties by the lower position, as FAISS
        order = np.argsort(-scores[r], axis=1, kind="stable")[:, :depth]
        s = np.take_along_axis(scores[r], order, axis=1)
        return s, np.where(np.isfinite(s), order, -1)

    for k in (1, 3, 7, 20, 59, 60, 80):
        got = top_k_by_id(search, rows, k, n, lambda i: keys[i])
        for row, (ids, s) in enumerate(got):
            full = {keys[i]: float(scores[row, i]) for i in range(n) if np.isfinite(scores[row, i])}
            assert {keys[i]: float(v) for i, v in zip(ids, s)} == _trec_top_k(full, k)


def test_retrievers_cut_tied_passages_at_k_as_trec_eval_orders_them(tmp_path):
    # Three identical passages tie for every query: RR@1 read 1.0 at k=1 (the index kept the
    # lowest position, 'a') and 0.5 at k=10 ('c' first, as trec_eval orders ties by id).
    texts = {"a": "the red fruit apple", "b": "the red fruit apple", "c": "the red fruit apple",
             "x": "yellow banana", "y": "green kiwi"}
    chunks = [Chunk(cid, cid, t) for cid, t in texts.items()]
    res = Resources(chunks, lambda: HashEmbedder(), EmbeddingCache(str(tmp_path)),
                    progress=False)
    queries = {"q1": "red apple", "q2": "green kiwi"}
    for retriever in (DenseRetriever(res), BM25Retriever(res)):
        deep = retriever.search(queries, 10)
        assert ordered(deep["q1"])[:3] == ["c", "b", "a"]
        for k in (1, 2, 3, 4):
            cut = retriever.search(queries, k)
            assert {q: ordered(r) for q, r in cut.items()} == \
                {q: ordered(r)[:k] for q, r in deep.items()}, (retriever.name, k)


# ---------------------------------------------------------------- why a ranking is empty

@pytest.fixture()
def brokers(tmp_path):
    texts = ["The broker runs schedules every minute.", "Workers retry failed jobs twice.",
             "Queues hold jobs until a worker is free."]
    chunks = [Chunk(f"c{i}", "d", t) for i, t in enumerate(texts)]
    return Resources(chunks, lambda: HashEmbedder(dim=64), EmbeddingCache(str(tmp_path)),
                     progress=False)


def test_bm25_says_which_terms_no_passage_holds_or_that_the_query_has_none(brokers):
    """BM25 ranks exactly the chunks sharing an analysed term: "running brokers" meets "runs"
    and "broker" by stemming; 死信 is in no chunk (its terms: the characters and their bigram,
    as ``tokenize`` documents for CJK); "the of and?" is stopwords and punctuation only."""
    bm25 = BM25Retriever(brokers)
    found = bm25.search({"stem": "running brokers", "cjk": "死信", "stop": "the of and?"}, 5)
    assert list(found["stem"]) == ["c0"] and found["cjk"] == {} and found["stop"] == {}
    assert bm25.why_none("死信") == (
        "no passage shares a term with the query: none holds any of its terms after analysis "
        "(lowercased, stopwords dropped, English words stemmed): 死, 死信, 信")
    many = " ".join(f"zq{i}x" for i in range(10))  # ten unknown terms: eight named, then a count
    assert bm25.why_none(many).endswith(": " + ", ".join(f"zq{i}x" for i in range(8))
                                        + ", ... and 2 more")
    assert bm25.why_none("the of and?") == (
        "the analyser leaves the query no term (it drops stopwords, punctuation and symbols), "
        "and BM25 ranks only passages that share a term with it")


def test_dense_ranks_without_shared_terms_and_says_a_zero_vector_ranks_none(brokers):
    """Dense retrieval does not match terms: 死信 shares none with the corpus and still ranks
    every chunk. Only a query the hash embedder turns into the zero vector ranks none, and the
    reason says so, not that no passage shares a term."""
    dense = DenseRetriever(brokers)
    found = dense.search({"cjk": "死信", "stop": "the of and?"}, 5)
    assert len(found["cjk"]) == 3 and found["stop"] == {}
    why = dense.why_none("the of and?")
    assert why.startswith("the hash embedder turns the query into the zero vector (the "
                          "analyser leaves it no term")
    assert "shares a term" not in why


def test_hybrid_ranks_none_only_when_every_part_does_and_gives_each_reason(brokers):
    parts = {"dense": Part(DenseRetriever, 10), "bm25": Part(BM25Retriever, 10)}
    hybrid = HybridRetriever(brokers, parts, RRF(60))
    found = hybrid.search({"cjk": "死信", "stop": "the of and?"}, 5)
    assert len(found["cjk"]) == 3 and found["stop"] == {}  # the dense part ranks 死信
    why = hybrid.why_none("the of and?")
    assert why == (f"no part of the hybrid retriever ranks a passage (dense: "
                   f"{DenseRetriever(brokers).why_none('the of and?')}; bm25: "
                   f"{BM25Retriever(brokers).why_none('the of and?')})")


def test_an_approximate_index_that_visits_no_vector_says_which_setting_to_raise(brokers):
    """FAISS pads an approximate search's rows with -1 when the lists or graph nodes it visits
    hold fewer than k vectors; a row of -1 only is an empty ranking, for a nonzero query
    vector: the reason names the index and its query-time setting, not a missing term."""
    from ragexp.index.ann import HNSWSpec

    approx = Resources(brokers.chunks, lambda: HashEmbedder(dim=64), brokers.cache,
                       progress=False, index_spec=HNSWSpec(M=4, ef_construction=8, ef_search=16))
    dense = DenseRetriever(approx)

    class VisitsNothing:
        def search(self, queries, k):
            return np.full((len(queries), k), -np.inf), np.full((len(queries), k), -1)

    dense.index = VisitsNothing()
    assert dense.search({"q": "broker"}, 3) == {"q": {}}
    assert dense.why_none("broker") == (
        "the approximate hnsw index found no passage vector in the part of it a query visits "
        "(index.ef_search=16); raise that to search more of it")


def test_a_retriever_of_ones_own_without_a_reason_gets_a_plain_one():
    from ragexp.stages.retrievers import why_none

    class Mine:
        name = "mine"

    assert why_none(Mine(), "q") == "retriever mine ranked no passage for it"
