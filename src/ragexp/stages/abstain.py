"""Abstain (refusal) signals, the abstain curve, and an operating point read off it.

A signal maps each query to a confidence ``s`` (higher = more likely answerable); a threshold
``tau`` refuses when ``s < tau``. Signals:

- ``LexicalSignal`` (from the run's BM25 index, whatever retrievers are on)::

      bm25_norm = max_C BM25(C, Q) / bound(Q)     (share of the score bound)
      bound(Q)  = sum_{t in Q} idf(t) * sup_tf tfc(tf)     (``BM25Index.score_bound``)
      coverage  = sum_{t in Q found in the top-k chunks} idf(t) / sum_{t in Q} idf(t)
      s         = alpha * coverage + (1 - alpha) * bm25_norm

  rare (high-idf) query terms dominate coverage, and a term the corpus never saw counts as the
  rarest: an in-domain question about something the handbook never mentions loses most.
- ``DenseSignal``: ``s = max cos(q, C)`` over the top-k retrieved chunks.

The curve: for every candidate threshold (midpoints between consecutive observed scores, plus
the lowest score, refusing nothing, and just above the highest, refusing everything), the share of unanswerable questions refused (y) and of answerable questions
wrongly refused (x); ``auc`` is the area under y(x) (= P(s_unanswerable < s_answerable), ties
half). The operating point is the threshold that refuses the most unanswerable questions with
x <= ``budget`` (ties: smaller x, then smaller tau). A threshold chosen on the same questions
flatters itself, so k-fold cross-validation also reports the refusal rates of thresholds chosen
on the other folds, pooled over held-out folds. ``k`` is ``abstain.folds`` but at most the
number of unanswerable questions (``cv_folds``), and the run logs the ``k`` it used
(``abstain.cv.folds``).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.index.resources import Passages
from ragexp.records import Query, Ranking, ordered
from ragexp.text.analysis import tokenize


class AbstainSignal(Protocol):
    name: str

    def compute(self, queries: dict[str, str], ranking: Ranking,
                passages: Passages) -> dict[str, float]:
        """``{qid: confidence}`` of each of ``queries`` from its ``ranking`` and what
        ``passages`` holds of the chunks (terms, BM25, vectors)."""
        ...


@dataclass(eq=False)
class LexicalSignal:
    """``s = alpha * coverage + (1 - alpha) * bm25_norm`` over the ``top_k`` retrieved chunks
    (module docstring)."""

    top_k: int = field(default=5, metadata={"ge": 1})
    alpha: float = field(default=0.5, metadata={"ge": 0, "le": 1})
    name: str = "lexical"

    def __post_init__(self) -> None:
        settings.check(self, "abstain.signal")
        self.name = "lexical"  # fixed, as before settings were fields

    def compute(self, queries, ranking, passages):
        bm25 = passages.bm25()
        best = passages.best_bm25_scores(list(queries.values()))
        out = {}
        for (qid, text), top in zip(queries.items(), best):
            q_terms = tokenize(text)
            seen: set[str] = set()
            for cid in ordered(ranking.get(qid, {}))[: self.top_k]:
                seen.update(passages.terms(cid))
            coverage = bm25.coverage(set(q_terms), seen)
            bound = bm25.score_bound(q_terms)
            bm25_norm = float(top) / bound if bound > 0 else 0.0
            out[qid] = self.alpha * coverage + (1 - self.alpha) * bm25_norm
        return out


@dataclass(eq=False)
class DenseSignal:
    """``s = max cos(q, C)`` over the ``top_k`` retrieved chunks."""

    top_k: int = field(default=5, metadata={"ge": 1})
    name: str = "dense"

    def __post_init__(self) -> None:
        settings.check(self, "abstain.signal")
        self.name = "dense"  # fixed, as before settings were fields

    def compute(self, queries, ranking, passages):
        qids = list(queries)
        qvec = passages.query_vectors([queries[q] for q in qids])
        out = {}
        for qid, vec in zip(qids, qvec):
            top = ordered(ranking.get(qid, {}))[: self.top_k]
            out[qid] = float((passages.vectors(top) @ vec).max()) if top else -1.0
        return out


@dataclass(frozen=True)
class CurvePoint:
    threshold: float
    refused_answerable: float
    refused_unanswerable: float


def curve(answerable: list[float], unanswerable: list[float]) -> list[CurvePoint]:
    values = sorted(set(answerable) | set(unanswerable))
    taus = ([values[0]] + [(a + b) / 2 for a, b in zip(values, values[1:])]
            + [math.nextafter(values[-1], math.inf)])
    ans, una = np.asarray(answerable), np.asarray(unanswerable)
    return [CurvePoint(t, float((ans < t).mean()), float((una < t).mean())) for t in taus]


def auc(points: list[CurvePoint]) -> float:
    """Trapezoidal area under refused_unanswerable as a function of refused_answerable."""
    pts = sorted((p.refused_answerable, p.refused_unanswerable) for p in points)
    return float(sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(pts, pts[1:])))


def operating_point(points: list[CurvePoint], budget: float) -> CurvePoint:
    feasible = [p for p in points if p.refused_answerable <= budget + 1e-12]
    return max(feasible, key=lambda p: (p.refused_unanswerable, -p.refused_answerable,
                                        -p.threshold))


def _folds(labels: list[bool], k: int, seed: int) -> list[list[int]]:
    """Stratified folds: answerable and unanswerable indices dealt round-robin after a shuffle."""
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    for flag in (True, False):
        idx = [i for i, lab in enumerate(labels) if lab is flag]
        rng.shuffle(idx)
        for j, i in enumerate(idx):
            folds[j % k].append(i)
    return folds


def cv_folds(folds: int, unanswerable: int) -> int:
    """The folds the cross-validation uses: ``folds`` (``abstain.folds``), but no more than the
    ``unanswerable`` questions, so every fold holds one out, and at least 2. ``abstain.folds=50``
    on 11 questions, 2 of them unanswerable, cross-validates over 2 folds."""
    return max(2, min(folds, unanswerable))


@dataclass(frozen=True)
class AbstainResult:
    signal: str
    budget: float
    auc: float
    threshold: float
    refused_unanswerable: float
    refused_answerable: float
    cv_refused_unanswerable: float
    cv_refused_answerable: float
    cv_folds: int
    curve: tuple[CurvePoint, ...]

    def metrics(self) -> dict[str, float]:
        return {"abstain.auc": self.auc, "abstain.threshold": self.threshold,
                "abstain.refused_unanswerable": self.refused_unanswerable,
                "abstain.refused_answerable": self.refused_answerable,
                "abstain.cv.refused_unanswerable": self.cv_refused_unanswerable,
                "abstain.cv.refused_answerable": self.cv_refused_answerable,
                "abstain.cv.folds": float(self.cv_folds)}

    def to_json(self) -> dict:
        d = asdict(self)
        d["curve"] = [asdict(p) for p in self.curve]
        return d


BUDGET = {"ge": 0, "lt": 1}  # what abstain.budget accepts (the schema field's metadata)
FOLDS = {"ge": 2}  # abstain.folds


def evaluate_abstain(signal: dict[str, float], queries: list[Query], name: str,
                     budget: float = 0.125, folds: int = 5, seed: int = 0) -> AbstainResult:
    """Curve, AUC, operating point under ``budget`` and its k-fold cross-validated rates, ``k``
    the ``cv_folds`` of ``folds`` (``AbstainResult.cv_folds``: fewer than ``folds`` when the
    unanswerable questions are fewer). Raises ``InvalidValue`` for a budget outside [0, 1) or
    fewer than 2 answerable or 2 unanswerable questions."""
    settings.refuse(settings.field_problems("abstain.budget", budget, BUDGET))
    qs = [q for q in queries if q.qid in signal]
    labels = [q.answerable for q in qs]
    if labels.count(True) < 2 or labels.count(False) < 2:
        raise InvalidValue(f"the abstain curve and its cross-validation need at least 2 answerable "
                           f"and 2 unanswerable questions; got {labels.count(True)} and "
                           f"{labels.count(False)}")
    scores = [signal[q.qid] for q in qs]
    split = lambda idx: ([scores[i] for i in idx if labels[i]],  # noqa: E731
                         [scores[i] for i in idx if not labels[i]])
    points = curve(*split(range(len(qs))))
    op = operating_point(points, budget)
    k = cv_folds(folds, labels.count(False))
    refused_a = refused_u = 0
    for fold in _folds(labels, k, seed):
        held = set(fold)
        tau = operating_point(curve(*split([i for i in range(len(qs)) if i not in held])),
                              budget).threshold
        refused_a += sum(1 for i in fold if labels[i] and scores[i] < tau)
        refused_u += sum(1 for i in fold if not labels[i] and scores[i] < tau)
    return AbstainResult(
        signal=name, budget=budget, auc=auc(points), threshold=op.threshold,
        refused_unanswerable=op.refused_unanswerable, refused_answerable=op.refused_answerable,
        cv_refused_unanswerable=refused_u / labels.count(False),
        cv_refused_answerable=refused_a / labels.count(True), cv_folds=k, curve=tuple(points))
