"""BM25: every variant differential against bm25s (fed ragexp's tokens) on randomised corpora and
on the real corpus, the idf-of-zero example through the real pipeline, explain(), the tie rule,
and documents that hold a query term but score 0."""

from __future__ import annotations

import os

import bm25s
import ir_measures
import numpy as np
import pytest
from conftest import jsonl, write_tree

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset
from ragexp.index.bm25 import METHODS, BM25Index, BM25Params, idf
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import WholeDocumentChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever
from ragexp.text.analysis import tokenize

# Weights are stored as float32 and summed in float64: a score is within 2^-24 of its float64
# value relatively (each non-negative weight rounded once), checked here with a factor 2 margin.
F32 = 2.0 ** -23
VOCAB = [f"t{i:02d}" for i in range(12)]  # each analyses to itself (no stopword, stem = word)


def reference(docs: list[list[str]], method: str, k1=1.5, b=0.75, delta=0.5) -> bm25s.BM25:
    ref = bm25s.BM25(k1=k1, b=b, delta=delta, method=method, dtype="float64")
    ref.index(docs, show_progress=False)
    return ref


def ref_scores(ref: bm25s.BM25, query: list[str], n_docs: int) -> np.ndarray:
    known = [t for t in query if t in ref.vocab_dict and t]
    return ref.get_scores(known) if known else np.zeros(n_docs)


def random_case(seed: int):
    """A corpus with repeated terms (Zipf-like draws), some empty documents, and queries with
    repeated and unknown terms; random k1, b, delta."""
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, len(VOCAB) + 1)
    p /= p.sum()
    n_docs = int(rng.integers(3, 40))
    docs = [list(rng.choice(VOCAB, size=int(rng.integers(0, 15)), p=p)) for _ in range(n_docs)]
    docs[int(rng.integers(n_docs))] = []
    queries = [list(rng.choice(VOCAB + ["unseen"], size=int(rng.integers(1, 5))))
               for _ in range(8)]
    params = dict(k1=float(rng.uniform(0, 3)), b=float(rng.uniform(0, 1)),
                  delta=float(rng.uniform(0, 2)))
    return docs, queries, params


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(12))
def test_every_method_scores_equal_bm25s_on_random_corpora(method, seed):
    docs, queries, params = random_case(seed)
    ours = BM25Index(BM25Params(method=method, **params)).fit_terms(docs)
    ref = reference(docs, method, **params)
    texts = [" ".join(q) for q in queries]
    assert [tokenize(t) for t in texts] == queries
    got = ours.score(texts)
    want = np.stack([ref_scores(ref, q, len(docs)) for q in queries])
    np.testing.assert_allclose(got, want, rtol=F32, atol=1e-6)
    # best_scores: each query's best over every document, bm25s's too, in blocks of 1 to 3
    best = want.max(axis=1)
    for block in (8, 16 * len(docs), 10**9):  # 1 query, 2 queries, all at once per block
        np.testing.assert_allclose(ours.best_scores(texts, block_bytes=block), best,
                                   rtol=F32, atol=1e-6)
        # the sparse maximum is the dense one bit for bit, implicit zeros included
        np.testing.assert_array_equal(ours.best_scores(texts, block_bytes=block),
                                      got.max(axis=1))
    # top_k: exactly the documents holding a query term, best first, with bm25s's scores.
    idx, scores = ours.top_k(texts, 10)
    for row, q in enumerate(queries):
        holding = [d for d, terms in enumerate(docs) if set(q) & set(terms)]
        n = min(10, len(holding))
        assert (idx[row, n:] == -1).all() and np.isneginf(scores[row, n:]).all()
        assert set(idx[row, :n]) <= set(holding)
        expected = np.sort(want[row, holding])[::-1][:n]
        np.testing.assert_allclose(scores[row, :n], expected, rtol=F32, atol=1e-9)
        np.testing.assert_allclose(scores[row, :n], want[row, idx[row, :n]], rtol=F32, atol=1e-9)
        for (i1, s1), (i2, s2) in zip(zip(idx[row], scores[row]), zip(idx[row, 1:n],
                                                                       scores[row, 1:n])):
            assert s1 > s2 or (s1 == s2 and i1 < i2)


@pytest.mark.parametrize("method", METHODS)
def test_explain_sums_to_the_score_for_every_method(method):
    docs, queries, params = random_case(99)
    index = BM25Index(BM25Params(method=method, **params)).fit_terms(docs)
    texts = [" ".join(q) for q in queries]
    scores = index.score(texts)
    for row, text in enumerate(texts):
        for d in range(index.n_docs):
            parts = index.explain(text, d)
            assert [t for t, _ in parts] == tokenize(text)
            assert sum(v for _, v in parts) == pytest.approx(scores[row, d], abs=1e-9)


@pytest.fixture(scope="module")
def handbook(chunks, golden):
    return [tokenize(c.text) for c in chunks], [q.text for q in golden]


@pytest.mark.parametrize("method", METHODS)
def test_handbook_scores_equal_bm25s(handbook, method):
    docs, questions = handbook
    ours = BM25Index(BM25Params(method=method)).fit_terms(docs).score(questions)
    ref = reference(docs, method)
    want = np.stack([ref_scores(ref, tokenize(q), len(docs)) for q in questions])
    np.testing.assert_allclose(ours, want, rtol=F32, atol=1e-6)
    assert (want > 0).sum(axis=1).min() > 0  # every question matches something


def test_lucene_idf_is_the_default_and_positive_for_every_df():
    assert BM25Index().params.method == "lucene"
    n = 4
    df = np.arange(1, n + 1)
    np.testing.assert_allclose(idf("lucene", df, n), np.log(1 + (n - df + 0.5) / (df + 0.5)))
    assert (idf("lucene", df, n) > 0).all()
    assert idf("robertson", 2, 4) == 0 and idf("robertson", 3, 4) == 0  # floored, not negative


def test_the_bm25_group_and_its_one_value_have_the_same_keys_and_defaults():
    """``build.bm25_params`` makes a ``BM25Params`` of the ``bm25`` config group."""
    from dataclasses import asdict

    from ragexp.config.schema import BM25Conf

    assert asdict(BM25Conf()) == asdict(BM25Params())


def _two_of_four(tmp_path):
    corpus = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(
        ["the quokka smiles at dawn", "ferries cross the strait", "a quokka lives on an island",
         "penguins huddle in winter"])]
    files = {"corpus.jsonl": jsonl(corpus),
             "queries.jsonl": jsonl([{"_id": "q1", "text": "quokka"}]),
             "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td0\t1\nq1\td2\t1\n"}
    return write_tree(tmp_path / "beir", files)


@pytest.mark.parametrize("method", METHODS)
def test_query_term_in_two_of_four_documents_retrieves_both(tmp_path, method):
    """The issue's example: Okapi idf ln((4 - 2 + 0.5) / (2 + 0.5)) = 0 used to drop both."""
    stages = Stages(WholeDocumentChunker(), lambda: HashEmbedder(), BM25Retriever, NoReranker(),
                    LexicalSignal(), cache=EmbeddingCache(str(tmp_path / "emb")),
                    bm25=BM25Params(method=method))
    result = run_experiment(BeirDataset(str(_two_of_four(tmp_path))), stages, progress=False)
    assert set(result.ranking["q1"]) == {"d0", "d2"}
    assert result.metrics["r_at_10"] == 1.0 and result.metrics["rr_at_10"] == 1.0
    qrels = [ir_measures.Qrel("q1", "d0", 1), ir_measures.Qrel("q1", "d2", 1)]
    run = [ir_measures.ScoredDoc("q1", d, s) for d, s in result.ranking["q1"].items()]
    ref = ir_measures.calc_aggregate([ir_measures.R @ 10, ir_measures.RR @ 10], qrels, run)
    assert ref[ir_measures.R @ 10] == 1.0 and ref[ir_measures.RR @ 10] == 1.0


@pytest.mark.parametrize("method", ["robertson", "atire"])
def test_documents_holding_a_term_are_kept_at_score_zero_behind_positive_ones(method):
    # "common" is in every document: robertson and atire both give it idf 0.
    index = BM25Index(BM25Params(method=method)).fit(
        ["common rare", "common", "common", "common other"])
    assert index.idf[index.vocab["common"]] == 0
    idx, scores = index.top_k(["common rare", "common"], 10)
    assert idx[0].tolist() == [0, 1, 2, 3] and scores[0, 0] > 0 and (scores[0, 1:] == 0).all()
    assert idx[1].tolist() == [0, 1, 2, 3] and (scores[1] == 0).all()
    assert index.top_k(["nothing"], 3).indices.tolist() == [[-1, -1, -1]]


def test_tokenizer_keeps_identifiers_whole_and_by_parts_in_bm25():
    docs = ["the broker logs BD-2110 when the ledger is full",
            "the broker logs BD-2111 when the ledger is sealed",
            "nothing to see here at all"]
    index = BM25Index().fit(docs)
    whole = index.score(["BD-2110"])[0]
    part = index.score(["2110"])[0]
    assert np.argmax(whole) == 0 and np.argmax(part) == 0
    assert part[1] == 0 and part[2] == 0
    assert whole[0] > whole[1] > 0  # doc 1 shares only "bd"
    assert whole[2] == 0


def test_unknown_query_terms_score_nothing_and_count_as_rarest():
    index = BM25Index().fit(["alpha beta", "gamma delta", "epsilon"])
    assert not index.score(["zeta eta"]).any()
    assert index.term_idf("zeta") == pytest.approx(index.idf.max())
    assert index.top_k(["zeta"], 2).indices.tolist() == [[-1, -1]]


@pytest.mark.parametrize("method", METHODS)
def test_duplicate_query_terms_count_twice(method):
    index = BM25Index(BM25Params(method=method)).fit(
        ["alpha beta", "gamma delta", "epsilon"])
    once, twice = index.score(["alpha", "alpha alpha"])
    np.testing.assert_allclose(twice, 2 * once)


@pytest.mark.parametrize("method", METHODS)
def test_score_bound_is_the_supremum_of_the_score(method):
    # One document repeats the term ever more: its score climbs to the bound but stays below.
    docs = [["tok"] * n + ["pad"] for n in (1, 10, 10_000)] + [["other"]] * 5
    index = BM25Index(BM25Params(method=method)).fit_terms(docs)
    bound = index.score_bound(["tok"])
    scores = index.score(["tok"])[0]
    assert scores[0] < scores[1] < scores[2] < bound
    assert scores[2] == pytest.approx(bound, rel=1e-2)


def test_corpus_without_any_term_fits_and_retrieves_nothing():
    index = BM25Index().fit(["", "the of and", "..."])
    assert index.top_k(["anything"], 5).indices.tolist() == [[-1, -1, -1]]
    assert not index.score(["anything"]).any()
    assert index.term_idf("anything") > 0


def test_bad_method_and_empty_corpus_raise():
    with pytest.raises(ValueError, match="bm25.method='okapi'.*lucene, robertson"):
        BM25Index(BM25Params(method="okapi"))
    with pytest.raises(ValueError):
        BM25Index().fit([])


@pytest.mark.parametrize("n,step", [(60, 3), (90, 3), (40, 4), (100, 5)])
def test_top_k_breaks_ties_by_lower_document_index(n, step):
    # Every step-th document ties on "apple"; the rest hold no query term.
    index = BM25Index().fit(["apple pie" if i % step == 0 else "pear" for i in range(n)])
    tied = list(range(0, n, step))
    wrong = []
    for k in range(1, len(tied) + 3):
        idx, scores = index.top_k(["apple"], k)
        kept = idx[0][idx[0] >= 0].tolist()
        if kept != tied[:k] or not (scores[0][: len(kept)] > 0).all():
            wrong.append(k)
    assert not wrong


@pytest.mark.parametrize("method", ["lucene", "robertson"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_top_k_equals_a_full_sort_on_a_larger_corpus(method, k):
    """Large enough for every path of top_k: few postings (sorted), many (dense vector, strided
    sample bound), and a cut at score 0 (robertson's common terms)."""
    rng = np.random.default_rng(k)
    p = 1 / np.arange(1, len(VOCAB) + 1) ** 0.5
    docs = [list(rng.choice(VOCAB, size=int(rng.integers(0, 8)), p=p / p.sum()))
            for _ in range(6000)]
    docs += [["rare"]] * 3
    index = BM25Index(BM25Params(method=method)).fit_terms(docs)
    queries = [["t00"], ["t00", "t01", "t01"], ["t11"], ["rare"], ["rare", "t00"], ["t05", "t09"]]
    texts = [" ".join(q) for q in queries]
    idx, scores = index.top_k(texts, k)
    full = index.score(texts)
    for row, q in enumerate(queries):
        holding = np.array([d for d, terms in enumerate(docs) if set(q) & set(terms)])
        order = holding[np.lexsort((holding, -full[row, holding]))][:k]
        assert idx[row, :len(order)].tolist() == order.tolist()
        assert (idx[row, len(order):] == -1).all()
        np.testing.assert_allclose(scores[row, :len(order)], full[row, order], atol=1e-9)


@pytest.mark.slow
def test_coverage_is_the_same_bits_in_every_process():
    """``coverage`` sums idf over a set of terms; a set's order depends on the process's string
    hash seed, so summing in set order gave values one ulp apart between a sweep's job and a
    rerun (seen on the abstain signal). Two processes with different seeds must agree bit for
    bit."""
    import subprocess
    import sys

    code = ("from ragexp.index.bm25 import BM25Index\n"
            "docs = [f'w{i} w{i+1} w{i*7 % 13} common' for i in range(200)]\n"
            "b = BM25Index().fit(docs)\n"
            "qs = [{f'w{i}' for i in range(j, j + 9)} | {'common', 'absent'} for j in range(40)]\n"
            "print([b.coverage(q, {f'w{j}' for j in range(0, 60, 3)}).hex() for q in qs])\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
            for seed in ("1", "2", "3", "4")}
    assert len(outs) == 1 and "0x" in next(iter(outs))


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_fit_from_arrays_gives_the_weights_of_the_definition_bit_for_bit(method):
    """``fit_terms`` (array operations over the token matrix) against the formula applied one
    document and one distinct term at a time, on a Zipf-like corpus with empty documents: the
    same vocabulary order and the same float64 weights, to the bit."""
    from ragexp.index.bm25 import idf, tfc
    from ragexp.text.tokens import TokenMatrix

    rng = np.random.default_rng(11)
    vocab = [f"t{i}" for i in range(400)]
    p = 1 / np.arange(1, 401) ** 1.1
    docs = [list(rng.choice(vocab, size=int(rng.integers(0, 80)), p=p / p.sum()))
            for _ in range(600)] + [[]]
    fitted = BM25Index(BM25Params(k1=1.2, b=0.7, method=method, delta=0.5)).fit_terms(
        TokenMatrix.build(docs, analyse=lambda terms: terms))
    order: dict[str, int] = {}
    for d in docs:
        for t in d:
            order.setdefault(t, len(order))
    assert fitted.vocab == order
    n, lengths = len(docs), np.array([len(d) for d in docs], dtype=np.float64)
    df = np.zeros(len(order))
    for d in docs:
        for t in set(d):
            df[order[t]] += 1
    term_idf = idf(method, df, n)
    absent = (term_idf * tfc(method, 0.0, 1.0, 1.2, 0.5) if method in ("bm25l", "bm25+")
              else np.zeros(len(order)))
    avgdl = lengths.mean()
    dense = fitted.weights.toarray()
    expected = np.zeros_like(dense)
    for i, d in enumerate(docs):
        norm = 1 - 0.7 + 0.7 * lengths[i] / avgdl
        counts: dict[str, int] = {}
        for t in d:
            counts[t] = counts.get(t, 0) + 1
        for t, tf in counts.items():
            j = order[t]
            expected[i, j] = (term_idf[j] * tfc(method, np.float64(tf), np.float64(norm), 1.2, 0.5)
                              - absent[j])
    assert dense.dtype == np.float32  # each weight the float64 formula rounded once
    assert np.array_equal(dense, expected)
    assert fitted.weights.nnz == sum(len(set(d)) for d in docs)


def assert_rankings_equal_float64_except_near_ties(index: BM25Index, ref: bm25s.BM25,
                                                   queries: list[str], k: int = 100) -> int:
    """``index.top_k`` (float32 weights) against the float64 scores of bm25s on the same
    tokens: every pair the float32 ranking orders otherwise than float64 scores do, and every
    document it leaves out above its last, is a near-tie (relative gap < ``FLOAT32_TIE``).
    Returns how many ranks differ from the float64 ranking (ties by lower index)."""
    from ragexp.index.bm25 import FLOAT32_TIE

    idx, _ = index.top_k(queries, k)
    differ = 0
    for row, text in enumerate(queries):
        s = ref_scores(ref, tokenize(text), index.n_docs)
        held = _holding(index, text)
        want = held[np.lexsort((held, -s[held]))][:k]
        got = idx[row][idx[row] >= 0]
        assert len(got) == len(want)
        differ += int((got != want).sum())
        ranked = s[got]
        # a document ranked above another never scores below it by more than a near-tie
        worst = np.maximum.accumulate(ranked[::-1])[::-1]  # best score at or below each rank
        assert (worst - ranked <= FLOAT32_TIE * np.maximum(worst, 1e-300)).all(), text
        left = np.setdiff1d(held, got)
        if len(left) and len(got):
            assert s[left].max() - ranked.min() <= FLOAT32_TIE * s[left].max(), text
    return differ


def _holding(index: BM25Index, text: str) -> np.ndarray:
    """Documents holding at least one of the text's known terms."""
    tids = [index.vocab[t] for t in tokenize(text) if t in index.vocab]
    return np.unique(index._by_term[tids].indices) if tids else np.zeros(0, np.int64)


@pytest.mark.parametrize("method", METHODS)
def test_float32_rankings_equal_float64_except_near_ties_on_the_handbook(handbook, method):
    docs, questions = handbook
    index = BM25Index(BM25Params(method=method)).fit_terms(docs)
    assert index.weights.dtype == np.float32
    assert_rankings_equal_float64_except_near_ties(index, reference(docs, method), questions)


@pytest.mark.slow
def test_float32_rankings_equal_float64_except_near_ties_on_20k_synthetic_passages(tmp_path):
    import json

    from tools import synth

    folder = synth.generate(tmp_path / "s", 20_000, 300, seed=7)
    texts = [json.loads(line)["text"] for line in (folder / "corpus.jsonl").open()]
    queries = [json.loads(line)["text"] for line in (folder / "queries.jsonl").open()]
    docs = [tokenize(t) for t in texts]
    index = BM25Index().fit_terms(docs)
    differ = assert_rankings_equal_float64_except_near_ties(index, reference(docs, "lucene"),
                                                            queries)
    assert differ < 0.001 * 100 * len(queries)  # near-ties are rare: under 0.1% of ranks


def test_a_pickled_index_writes_its_postings_once_and_ranks_the_same(handbook):
    """The stage store pickles the index: ``_by_term`` is a view of ``weights`` and must not be
    written twice (it was: the pickle was twice the postings), and a loaded index must rank
    exactly as the fitted one."""
    import pickle

    from tools.bench_scale import sparse_bytes

    docs, questions = handbook
    index = BM25Index().fit_terms(docs)
    data = pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL)
    rest = len(pickle.dumps((index.vocab, index.idf, index.absent, index.doc_len, index.params),
                            protocol=pickle.HIGHEST_PROTOCOL))
    assert len(data) <= sparse_bytes(index) + rest + 4096
    loaded = pickle.loads(data)
    assert np.shares_memory(loaded._by_term.data, loaded.weights.data)
    for a, b in zip(loaded.top_k(questions, 20), index.top_k(questions, 20)):
        assert np.array_equal(a, b)
    assert np.array_equal(loaded.score(questions[:5]), index.score(questions[:5]))


def test_the_near_tie_check_catches_a_ranking_that_is_not_a_near_tie(handbook, monkeypatch):
    """The check above is not vacuous: the float32 ranking with its two best documents swapped
    (scores far apart on the handbook) fails it."""
    from ragexp.index.bm25 import TopK

    docs, questions = handbook
    index = BM25Index().fit_terms(docs)
    fitted = index.top_k

    def swapped(queries, k):
        idx, scores = fitted(queries, k)
        idx = idx.copy()
        idx[:, [0, 1]] = idx[:, [1, 0]]
        return TopK(idx, scores)

    monkeypatch.setattr(index, "top_k", swapped)
    with pytest.raises(AssertionError):
        assert_rankings_equal_float64_except_near_ties(index, reference(docs, "lucene"),
                                                       questions)


@pytest.mark.parametrize("method", METHODS)
def test_best_scores_of_queries_matching_nothing_or_everything(method):
    """A query of unknown words holds no posting (its best is the absent terms' score alone,
    as over the dense matrix); one whose term every document holds has no implicit zero to
    count."""
    docs = [["lease", "broker"], ["lease"], ["lease", "partition", "broker"]]
    ours = BM25Index(BM25Params(method=method)).fit_terms(docs)
    texts = ["zzz qqq", "lease", "broker zzz", "lease partition"]
    dense = ours.score(texts).max(axis=1)
    for block in (8, 10**9):
        np.testing.assert_array_equal(ours.best_scores(texts, block_bytes=block), dense)
