"""Okapi BM25 over a sparse document-term matrix (scipy), scored for all queries at once.

For query terms ``q_1..q_n`` (duplicates counted, as rank_bm25 does) and document ``D``::

    score(D, Q) = sum_i idf(q_i) * f(q_i, D) * (k1 + 1) / (f(q_i, D) + k1 * (1 - b + b * |D| / avgdl))
    idf(t)      = ln(N - n(t) + 0.5) - ln(n(t) + 0.5), floored at epsilon * mean(idf) when negative

(Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009; the idf
floor is rank_bm25's ``BM25Okapi``, kept so the two agree score for score.) The per-document
term weights are computed once at index time, so a batch of queries is one sparse product
instead of rank_bm25's Python loop over every document per query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from ragexp.text import tokenize


@dataclass
class BM25Index:
    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25
    vocab: dict[str, int] = field(default_factory=dict, repr=False)

    def fit(self, texts: list[str]) -> "BM25Index":
        return self.fit_terms([tokenize(t) for t in texts])

    def fit_terms(self, docs: list[list[str]]) -> "BM25Index":
        """Fit on documents already analysed with ``text.tokenize``."""
        if not docs:
            raise ValueError("BM25 needs at least one document")
        rows, cols, vals = [], [], []
        doc_len = np.zeros(len(docs), dtype=np.float64)
        for d, terms in enumerate(docs):
            counts: dict[int, int] = {}
            doc_len[d] = len(terms)
            for t in terms:
                tid = self.vocab.setdefault(t, len(self.vocab))
                counts[tid] = counts.get(tid, 0) + 1
            rows.extend([d] * len(counts))
            cols.extend(counts)
            vals.extend(counts.values())
        n_docs, n_terms = len(docs), len(self.vocab)
        tf = sparse.csr_matrix((np.asarray(vals, dtype=np.float64), (rows, cols)),
                               shape=(n_docs, n_terms))
        df = np.bincount(cols, minlength=n_terms).astype(np.float64)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        floor = self.epsilon * idf.mean()
        self.idf = np.where(idf < 0, floor, idf)
        self.avgdl = doc_len.mean() if doc_len.mean() > 0 else 1.0
        self.doc_len = doc_len
        norm = self.k1 * (1 - self.b + self.b * doc_len / self.avgdl)
        tf = tf.tocoo()
        weights = self.idf[tf.col] * tf.data * (self.k1 + 1) / (tf.data + norm[tf.row])
        self.weights = sparse.csc_matrix((weights, (tf.row, tf.col)), shape=(n_docs, n_terms))
        self.n_docs = n_docs
        return self

    def query_matrix(self, queries: list[str]) -> sparse.csr_matrix:
        """(n_queries, n_terms) counts of known query terms; unknown terms score nothing."""
        rows, cols = [], []
        for q, text in enumerate(queries):
            for t in tokenize(text):
                tid = self.vocab.get(t)
                if tid is not None:
                    rows.append(q)
                    cols.append(tid)
        data = np.ones(len(rows), dtype=np.float64)
        return sparse.csr_matrix((data, (rows, cols)), shape=(len(queries), len(self.vocab)))

    def score(self, queries: list[str]) -> np.ndarray:
        """Dense (n_queries, n_docs) score matrix."""
        return np.asarray((self.query_matrix(queries) @ self.weights.T).todense())

    def top_k(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, scores), each (n_queries, k'), best first; ties by lower document index."""
        scores = self.score(queries)
        k = min(k, self.n_docs)
        idx = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, idx, axis=1).min(axis=1)
        # argpartition picks arbitrarily among scores tied at the cut; where that happens,
        # take everything above the cut plus the lowest-index documents at it.
        for row in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k):
            s, cut = scores[row], kth[row]
            above = np.flatnonzero(s > cut)
            idx[row] = np.concatenate([above, np.flatnonzero(s == cut)[: k - len(above)]])
        top = np.take_along_axis(scores, idx, axis=1)
        order = np.lexsort((idx, -top), axis=1)
        idx = np.take_along_axis(idx, order, axis=1)
        return idx, np.take_along_axis(scores, idx, axis=1)

    def term_idf(self, term: str) -> float:
        """idf of an analysed term; a term the corpus never saw counts as the rarest."""
        tid = self.vocab.get(term)
        return float(self.idf[tid]) if tid is not None else float(self.idf.max())

    def coverage(self, query_terms: set[str], found) -> float:
        """idf-weighted share of the query's terms that ``found`` holds (0 for no terms)::

            sum_{t in Q, t in F} idf(t) / sum_{t in Q} idf(t)
        """
        total = sum(self.term_idf(t) for t in query_terms)
        if total <= 0:
            return 0.0
        return sum(self.term_idf(t) for t in query_terms if t in found) / total

    def explain(self, query: str, doc_index: int) -> list[tuple[str, float]]:
        """Each analysed query term's contribution to one document's score (sums to it)."""
        out = []
        for t in tokenize(query):
            tid = self.vocab.get(t)
            out.append((t, float(self.weights[doc_index, tid]) if tid is not None else 0.0))
        return out
