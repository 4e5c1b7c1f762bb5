"""BM25 over a sparse document-term matrix (scipy), scored for all queries at once.

For query terms ``q_1..q_n`` (duplicates counted) and a document ``D`` of ``|D|`` terms::

    score(D, Q) = sum_i idf(q_i) * tfc(f(q_i, D), |D|)
    norm(D)     = 1 - b + b * |D| / avgdl

with the variants of Kamphuis, de Vries, Boytsov & Lin, "Which BM25 do you mean? A large-scale
reproducibility study of scoring variants" (ECIR 2020), exactly as bm25s implements them
(``bm25.method``; ``N`` documents, ``df`` of them holding the term, ``tf = f(t, D)``)::

    method     idf(t)                                   tfc(tf)                       (tf > 0)
    lucene     ln(1 + (N - df + 0.5) / (df + 0.5))      tf / (tf + k1 * norm)         (default)
    robertson  max(0, ln((N - df + 0.5) / (df + 0.5)))  tf / (tf + k1 * norm)
    atire      ln(N / df)                               (k1 + 1) tf / (tf + k1 * norm)
    bm25l      ln((N + 1) / (df + 0.5))                 (k1 + 1)(c + delta) / (k1 + c + delta),
                                                        c = tf / norm
    bm25+      ln((N + 1) / df)                         (k1 + 1) tf / (tf + k1 * norm) + delta

For bm25l and bm25+ a query term *absent* from D still scores ``idf(t) * tfc(0)`` (the
"non-occurrence" score, the same for every document). Lucene's idf is positive for every term;
Robertson's original idf is negative for terms in more than half the documents, which would rank
a document holding such a term *below* one holding no query term at all, so it is floored at 0,
as bm25s does by default (rank_bm25 floors it at a fraction of the mean idf instead).
Lucene and Robertson rows leave out the constant factor ``k1 + 1`` (as Lucene 8+ and bm25s do);
it changes no ranking.

Retrieval (``top_k``) returns the documents that hold at least one query term, best first; a
document holding one is never dropped for scoring 0 (robertson's floored idf, atire's ln(N/N)).
The per-document term weights are computed once at index time; a query then only touches its
terms' postings, and only matching documents are ever ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np
from scipy import sparse

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.index.stagestore import stage_key
from ragexp.text.analysis import tokenize
from ragexp.text.tokens import TokenMatrix

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
_BLOCK = 1 << 20  # postings weighted at a time in ``fit_terms`` (float64 temporaries: ~50 MB)
# Relative gap of float64 scores below which float32 weights may order two documents otherwise
# (twice 2^-24, the worst rounding of each of two sums, with margin): near-ties.
FLOAT32_TIE = 1e-6


def idf(method: str, df: np.ndarray, n_docs: int) -> np.ndarray:
    """idf of terms held by ``df`` (>= 1) of ``n_docs`` documents, per the table above."""
    df = np.asarray(df, dtype=np.float64)
    if method == "lucene":
        return np.log1p((n_docs - df + 0.5) / (df + 0.5))
    if method == "robertson":
        return np.log(np.maximum(1.0, (n_docs - df + 0.5) / (df + 0.5)))
    if method == "atire":
        return np.log(n_docs / df)
    if method == "bm25l":
        return np.log((n_docs + 1) / (df + 0.5))
    return np.log((n_docs + 1) / df)  # bm25+


def tfc(method: str, tf: np.ndarray, norm: np.ndarray, k1: float, delta: float) -> np.ndarray:
    """Term-frequency component for ``tf`` occurrences in documents of length factor ``norm``."""
    if method in ("lucene", "robertson"):
        return tf / (tf + k1 * norm)
    if method == "atire":
        return (k1 + 1) * tf / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1) * (c + delta) / (k1 + c + delta)
    return (k1 + 1) * tf / (tf + k1 * norm) + delta  # bm25+


class TopK(NamedTuple):
    """Best ``k`` documents per query: ``indices`` and ``scores``, each (n_queries, k), best
    first, ties by lower document index. Rows with fewer matching documents are padded with
    index -1 and score -inf."""

    indices: np.ndarray
    scores: np.ndarray


def lower_bound(b, at: str = "bm25") -> list[str]:
    """``method=bm25l`` (``b``: params, or the config at key ``at``) needs ``k1 + delta > 0``."""
    if b.method != "bm25l" or b.k1 + b.delta > 0:
        return []
    return [f"{at}.method=bm25l needs {at}.k1 + {at}.delta > 0, got {b.k1} + {b.delta}"]


bm25l_lower_bound = settings.rule_for("bm25", ("method", "k1", "delta"), lower_bound)


@dataclass(frozen=True)
class BM25Params:
    """The ``bm25`` config group as one value: what a BM25 index is fitted with, and all of it.

    ``k1 >= 0`` (term-frequency saturation), ``0 <= b <= 1`` (document-length normalisation),
    ``method`` one of ``METHODS`` (the table above), ``delta >= 0`` (bm25l, bm25+ only; kept
    for every method, so a run's settings key its BM25 stage whatever they are). The group's
    schema (``config.schema.BM25Conf``) is generated from these fields, so composition checks the
    same ranges, as does the constructor (an index can be built without a config). Raises
    ``InvalidValue`` on a value out of range, an unknown method, or bm25l with
    ``k1 + delta <= 0`` (``lower_bound``)."""

    k1: float = field(default=1.5, metadata={"ge": 0})  # term-frequency saturation
    b: float = field(default=0.75, metadata={"ge": 0, "le": 1})  # document-length normalisation
    method: str = field(default="lucene", metadata={"choices": METHODS})  # the table above
    delta: float = field(default=0.5, metadata={"ge": 0})  # bm25l/bm25+: lower bound of tfc

    def __post_init__(self) -> None:
        settings.check(self, "bm25", lower_bound(self, "bm25"))

    # an ``Index`` (``index.base``): built from the chunks' analysed terms
    source = "terms"

    def key(self, source_key: str) -> str:
        """Stage key of this BM25 index over the terms of the chunks keyed ``source_key``:
        every field of these parameters."""
        return stage_key("bm25", source_key, asdict(self))

    def build(self, terms: TokenMatrix) -> BM25Index:
        """A BM25 index with these parameters fitted on ``terms`` (``BM25Index.fit_terms``)."""
        return BM25Index(self).fit_terms(terms)

    def searcher(self, built: BM25Index) -> BM25Index:
        """The fitted index itself: BM25 has no query-time setting."""
        return built


@dataclass
class BM25Index:
    """A BM25 index with ``params`` (``BM25Params``), fitted by ``fit`` or ``fit_terms``."""

    params: BM25Params = BM25Params()
    vocab: dict[str, int] = field(default_factory=dict, repr=False)

    def fit(self, texts: list[str]) -> "BM25Index":
        return self.fit_terms([tokenize(t) for t in texts])

    def fit_terms(self, docs: Sequence[list[str]] | TokenMatrix) -> "BM25Index":
        """Fit on documents already analysed with ``text.tokenize`` (empty lists allowed): term
        lists, or a ``TokenMatrix`` (``Resources.terms``), whose term ids and first-appearance
        vocabulary are used as they are.

        Built with array operations, never a Python object per posting. Each weight is
        computed in float64 and stored as float32 (as bm25s stores its scores), so the index is
        8 bytes a posting (weight and int32 term-major index: a million passages, about 45
        million postings, take 0.35 GB); queries sum the float32 weights in float64. Rankings
        equal those of float64 weights except between documents whose float64 scores differ by
        less than ``FLOAT32_TIE`` relatively (a float32 rounding is at most 2^-24 of a
        weight, so of a sum of non-negative weights; ``tests/unit/test_bm25.py``). While fitting,
        int32 arrays of a few bytes per token are held on top, and float64 temporaries of one
        block of ``_BLOCK`` postings at a time."""
        if not len(docs):
            raise InvalidValue("BM25 needs at least one document")
        tokens = docs if isinstance(docs, TokenMatrix) else TokenMatrix.build(
            docs, analyse=lambda terms: terms)
        self.vocab = {t: i for i, t in enumerate(tokens.vocab)}
        n_docs, n_terms = len(tokens), len(tokens.vocab)
        lengths = tokens.lengths()
        # (doc, term) counts: the token matrix is already one row of term ids per document, so
        # it is a CSR matrix of ones with repeated columns, which sum_duplicates sorts and sums
        # in place (on a copy of the ids: the token matrix is a stage others read); no (doc,
        # term) pairs are spelled out, as a COO matrix would (two more int32s a token).
        counts = sparse.csr_matrix((np.ones(len(tokens.ids), dtype=np.int32),
                                    tokens.ids.copy(), tokens.offsets), shape=(n_docs, n_terms))
        counts.sum_duplicates()
        doc_len = lengths.astype(np.float64)
        # document frequencies a block at a time: bincount converts its input to int64, which
        # for all postings at once (a million passages) was the fit's peak
        df = np.zeros(n_terms, dtype=np.float64)
        for lo in range(0, counts.nnz, _BLOCK):
            df += np.bincount(counts.indices[lo:lo + _BLOCK], minlength=n_terms)
        self.n_docs, self.doc_len = n_docs, doc_len
        self.avgdl = doc_len.mean() if doc_len.mean() > 0 else 1.0
        p = self.params
        self.idf = idf(p.method, df, n_docs)
        norm = 1 - p.b + p.b * doc_len / self.avgdl
        # Absent terms score idf * tfc(0) (bm25l, bm25+); the matrix holds the difference, so a
        # query's score is its sparse product plus one constant.
        self.absent = (self.idf * tfc(p.method, 0.0, 1.0, p.k1, p.delta)
                       if p.method in ("bm25l", "bm25+") else np.zeros(n_terms))
        # Only the postings' columns and row pointers outlive the loop: the counts go before the
        # transpose below copies the postings (at a million passages the fit's peak held the
        # counts, a row index per posting and both layouts at once: the peak of a whole run).
        indices, indptr, tf = counts.indices, counts.indptr, counts.data
        del counts
        weights = np.empty(len(tf), dtype=np.float32)  # computed in float64, stored rounded
        for lo in range(0, len(tf), _BLOCK):
            hi = min(lo + _BLOCK, len(tf))
            cols = indices[lo:hi]
            rows = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
            weights[lo:hi] = (self.idf[cols] * tfc(p.method, tf[lo:hi].astype(np.float64),
                                                   norm[rows], p.k1, p.delta) - self.absent[cols])
        del tf
        assert (weights >= 0).all(), "every variant's present-term weight is >= 0"
        # (n_docs, n_terms) by column, so its transpose is each term's postings by row (a
        # view: one copy of the weights serves both).
        self.weights = sparse.csr_matrix((weights, indices, indptr),
                                         shape=(n_docs, n_terms)).tocsc()
        self._by_term = self.weights.T.tocsr()  # (n_terms, n_docs): each term's postings
        return self

    def __getstate__(self) -> dict:
        """Pickled (the stage store) without ``_by_term``: a view of ``weights``'s buffers,
        which pickle would write a second time."""
        state = dict(self.__dict__)
        state.pop("_by_term", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "weights" in state:
            self._by_term = self.weights.T.tocsr()

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
        """Dense (n_queries, n_docs) score matrix, every document scored."""
        held, base = self._held(queries)
        return np.asarray(held.todense()) + base[:, None]

    def _held(self, queries: list[str]) -> tuple[sparse.csr_matrix, np.ndarray]:
        """``score``'s two parts: the sparse (n_queries, n_docs) sums of the query terms'
        postings and the (n_queries,) score every document gets from absent terms."""
        q = self.query_matrix(queries)
        # Only the query terms' postings, in float64 (a product with the float32 matrix would
        # convert all of it at every call); the same sums, in the same order.
        terms = np.unique(q.indices)
        return q[:, terms] @ self._by_term[terms].astype(np.float64), q @ self.absent

    def best_scores(self, queries: list[str], block_bytes: int = 1 << 25) -> np.ndarray:
        """(n_queries,) each query's highest score over every document, bit for bit
        ``score(...).max(1)``, a block of queries at a time so the postings summed for at most
        ``block_bytes / 8`` (query, document) pairs are held at once (the dense matrix is 8 GB
        for 1,000 queries over a million passages). The maximum is taken over the sparse sums,
        with 0 for a document holding no query term (scipy's ``max`` counts implicit zeros),
        before the absent terms' score is added: rounding is monotone, so ``max(x) + b`` is
        ``max(x + b)`` exactly, without the dense block and its sum (together about 3x the
        block, the peak of a 1,000,000-passage run). 32 MiB blocks were as fast as 128 MiB
        ones on 500 queries over 300,000 synthetic passages (2.2-2.4 s against 2.7 s)."""
        rows = max(1, block_bytes // (8 * max(1, self.n_docs)))
        out = np.empty(len(queries))
        for start in range(0, len(queries), rows):
            held, base = self._held(queries[start:start + rows])
            out[start:start + rows] = held.max(axis=1).toarray().ravel() + base
        return out

    def top_k(self, queries: list[str], k: int) -> TopK:
        """The best ``k`` documents holding at least one query term, per query (see ``TopK``).

        Each query sums its terms' postings per document: by sorting them when they are few,
        else into a dense vector (as bm25s does), whose candidates are the documents scoring at
        least the k-th largest score of a strided sample (a lower bound of the k-th best).
        A document counts as a match by holding a posting, whatever its weight, so a weight of 0
        never hides one."""
        if k < 1:
            raise InvalidValue(f"top_k needs k >= 1, got {k}")
        q, post, n = self.query_matrix(queries), self._by_term, self.n_docs
        base = q @ self.absent
        k = min(k, n)
        out_i = np.full((len(queries), k), -1, dtype=np.int64)
        out_s = np.full((len(queries), k), -np.inf)
        for row in range(len(queries)):
            lo, hi = q.indptr[row], q.indptr[row + 1]
            spans = [(post.indptr[t], post.indptr[t + 1], c)
                     for t, c in zip(q.indices[lo:hi], q.data[lo:hi])]
            if sum(e - s for s, e, _ in spans) * 8 < n:
                docs, inverse = np.unique(np.concatenate(
                    [post.indices[s:e] for s, e, _ in spans] or [np.zeros(0, np.int32)]),
                    return_inverse=True)
                vals = np.bincount(inverse, weights=np.concatenate(
                    [post.data[s:e] * c for s, e, c in spans] or [np.zeros(0)]),
                    minlength=len(docs))
            else:
                dense = np.zeros(n)
                for s, e, c in spans:
                    # float64 values: ufunc.at is fast only when they match ``dense``'s dtype
                    np.add.at(dense, post.indices[s:e], post.data[s:e] * c)
                # The k-th largest of a strided sample is <= the k-th largest of all: every
                # document at least that high is a candidate (about n/64 of them).
                sample = dense[:: max(1, n // (64 * k))]
                cut = np.partition(sample, len(sample) - k)[len(sample) - k]
                if cut > 0:  # weights are >= 0 and absent terms add 0: the k best all match
                    docs = np.flatnonzero(dense >= cut)
                else:
                    held = np.zeros(n, dtype=bool)
                    for s, e, _ in spans:
                        held[post.indices[s:e]] = True
                    docs = np.flatnonzero(held)
                vals = dense[docs]
            docs, vals = _best(docs, vals, k)
            out_i[row, :len(docs)] = docs
            out_s[row, :len(docs)] = vals + base[row]
        return TopK(out_i, out_s)

    def term_idf(self, term: str) -> float:
        """idf of an analysed term; a term the corpus never saw counts as the rarest (df = 1)."""
        tid = self.vocab.get(term)
        if tid is not None:
            return float(self.idf[tid])
        return float(max(self.idf.max(initial=0.0), idf(self.params.method, 1, self.n_docs)))

    def score_bound(self, terms: list[str]) -> float:
        """Least upper bound of ``score`` for these analysed query terms over any document:
        ``sum_t idf(t) * sup_tf tfc(tf)`` over known terms (1 for lucene/robertson, k1 + 1 for
        atire and bm25l, k1 + 1 + delta for bm25+)."""
        p = self.params
        sup = {"lucene": 1.0, "robertson": 1.0, "atire": p.k1 + 1, "bm25l": p.k1 + 1,
               "bm25+": p.k1 + 1 + p.delta}[p.method]
        return sup * sum(float(self.idf[self.vocab[t]]) for t in terms if t in self.vocab)

    def coverage(self, query_terms: set[str], found) -> float:
        """idf-weighted share of the query's terms that ``found`` holds (0 for no terms)::

            sum_{t in Q, t in F} idf(t) / sum_{t in Q} idf(t)
        """
        terms = sorted(query_terms)  # a set's order changes with each process's string hash
        total = sum(self.term_idf(t) for t in terms)  # seed: summed in one order, bit for bit
        if total <= 0:
            return 0.0
        return sum(self.term_idf(t) for t in terms if t in found) / total

    def explain(self, query: str, doc_index: int) -> list[tuple[str, float]]:
        """Each analysed query term's contribution to one document's score (sums to it)."""
        out = []
        for t in tokenize(query):
            tid = self.vocab.get(t)
            out.append((t, float(self.weights[doc_index, tid] + self.absent[tid])
                        if tid is not None else 0.0))
        return out


def _best(docs: np.ndarray, vals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (docs, vals) by value descending, then document index ascending."""
    if len(vals) > k:
        cut = np.partition(vals, len(vals) - k)[len(vals) - k]  # the k-th largest value
        above = vals > cut
        tied = np.flatnonzero(vals == cut)
        tied = tied[np.argsort(docs[tied], kind="stable")[: k - int(above.sum())]]
        keep = np.concatenate([np.flatnonzero(above), tied])
        docs, vals = docs[keep], vals[keep]
    order = np.lexsort((docs, -vals))
    return docs[order], vals[order]
