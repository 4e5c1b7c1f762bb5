"""BM25: differential against rank_bm25.BM25Okapi on the real corpus, the tokenizer's handling
of identifiers, explain(), and top_k's tie rule."""

from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from ragexp.bm25 import BM25Index
from ragexp.text import content_words, tokenize


@pytest.fixture(scope="module")
def indexes(chunks):
    texts = [c.text for c in chunks]
    return BM25Index().fit(texts), BM25Okapi([tokenize(t) for t in texts])


@pytest.fixture(scope="module")
def score_matrices(indexes, golden):
    ours, ref = indexes
    questions = [q.text for q in golden]
    return ours.score(questions), np.array([ref.get_scores(tokenize(t)) for t in questions])


def test_scores_equal_rank_bm25_for_every_golden_question(score_matrices, golden):
    ours, ref = score_matrices
    assert ours.shape == (len(golden), ref.shape[1])
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-9)
    assert (ref > 0).sum(axis=1).min() > 0  # every question matches something


def test_top_10_equals_rank_bm25_up_to_exact_ties(indexes, score_matrices, golden):
    index, _ = indexes
    _, ref = score_matrices
    idx, scores = index.top_k([q.text for q in golden], 10)
    assert idx.shape == (len(golden), 10)
    for row in range(len(golden)):
        expected = np.sort(ref[row])[::-1][:10]
        np.testing.assert_allclose(scores[row], expected, rtol=1e-9, atol=1e-12)
        tenth = expected[-1]
        # Every document strictly above the 10th score is in our top 10 ...
        above = set(np.flatnonzero(ref[row] > tenth + 1e-9))
        assert above <= set(idx[row].tolist())
        # ... and the rest of our top 10 ties with the 10th exactly.
        for i in set(idx[row].tolist()) - above:
            assert ref[row, i] == pytest.approx(tenth, abs=1e-9)
        assert list(scores[row]) == sorted(scores[row], reverse=True)


def test_explain_contributions_sum_to_the_score(indexes, score_matrices, golden):
    index, _ = indexes
    ours, _ = score_matrices
    rng = np.random.default_rng(0)
    for row, q in enumerate(golden):
        for d in [int(np.argmax(ours[row])), *rng.integers(0, index.n_docs, size=3).tolist()]:
            parts = index.explain(q.text, d)
            assert [t for t, _ in parts] == tokenize(q.text)
            assert sum(v for _, v in parts) == pytest.approx(ours[row, d], abs=1e-9)


def test_tokenizer_keeps_identifiers_whole_and_by_parts():
    terms = tokenize("Error BD-2110 in brindle.toml, see max_payload_bytes.")
    for t in ("bd-2110", "bd", "2110", "brindle.toml", "brindl", "toml", "max_payload_bytes",
              "max", "payload", "byte", "error"):
        assert t in terms, t
    assert "max_payload_bytes." not in terms  # a sentence-final dot is not part of a token
    assert tokenize("The and of") == []  # stopwords only
    assert content_words("BD-2110 errors") == {"bd", "2110", "error"}


def test_identifier_matches_whole_and_by_parts():
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


def test_unknown_query_terms_score_nothing():
    index = BM25Index().fit(["alpha beta", "gamma delta", "epsilon"])
    assert not index.score(["zeta eta"]).any()
    assert index.term_idf("zeta") == pytest.approx(index.idf.max())


def test_duplicate_query_terms_count_twice():
    index = BM25Index().fit(["alpha beta", "gamma delta", "epsilon"])
    once, twice = index.score(["alpha", "alpha alpha"])[:, 0]
    assert twice == pytest.approx(2 * once)


def test_empty_corpus_raises():
    with pytest.raises(ValueError):
        BM25Index().fit([])


@pytest.mark.parametrize("n,step", [(60, 3), (90, 3), (40, 4), (100, 5)])
def test_top_k_breaks_ties_by_lower_document_index(n, step):
    # Every step-th document ties on "apple" (a minority, so its idf is positive); the rest miss.
    index = BM25Index().fit(["apple pie" if i % step == 0 else "pear" for i in range(n)])
    tied = list(range(0, n, step))
    wrong = []
    for k in range(1, len(tied)):
        idx, scores = index.top_k(["apple"], k)
        assert (scores > 0).all()
        if idx[0].tolist() != tied[:k]:
            wrong.append(k)
    assert not wrong
