"""Ranking metrics, declared as data (name, MLflow key, cutoff) plus one function each.

For a query with judged relevance grades ``rel(d) > 0`` and ranked list ``d_1, d_2, ...``
(ordered by ``records.ordered``: score descending, ties by id descending, as trec_eval)::

    hit@k    = 1 if any d_i (i <= k) is relevant else 0                (ir_measures: Success@k)
    recall@k = |{i <= k : rel(d_i) > 0}| / |{d : rel(d) > 0}|          (R@k)
    MRR@10   = 1 / min{i <= 10 : rel(d_i) > 0}, or 0                   (RR@10)
    nDCG@10  = DCG@10 / IDCG@10,  DCG@10 = sum_{i<=10} rel(d_i) / log2(i + 1)   (nDCG@10)

IDCG uses every judged relevant item, ideally ordered. Queries are averaged with equal weight
over answerable queries, overall and per question kind. Checked against ir_measures
(trec_eval through pytrec_eval) in ``tests/test_metrics.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

from ragexp.records import Qrels, Query, Ranking, ordered


@dataclass(frozen=True)
class Measure:
    name: str  # as ir_measures prints it
    key: str  # MLflow-safe metric name
    fn: Callable[[list[str], dict[str, int], int], float]
    cutoff: int


def _hit(ranked, rel, k):
    return float(any(rel.get(d, 0) > 0 for d in ranked[:k]))


def _recall(ranked, rel, k):
    n_rel = sum(1 for g in rel.values() if g > 0)
    return sum(1 for d in ranked[:k] if rel.get(d, 0) > 0) / n_rel if n_rel else 0.0


def _rr(ranked, rel, k):
    return next((1.0 / i for i, d in enumerate(ranked[:k], 1) if rel.get(d, 0) > 0), 0.0)


def _ndcg(ranked, rel, k):
    dcg = sum(rel.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranked[:k], 1)
              if rel.get(d, 0) > 0)
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


MEASURES: tuple[Measure, ...] = (
    *(Measure(f"Success@{k}", f"hit_at_{k}", _hit, k) for k in (1, 3, 5, 10)),
    *(Measure(f"R@{k}", f"recall_at_{k}", _recall, k) for k in (1, 3, 5, 10)),
    Measure("RR@10", "mrr", _rr, 10),
    Measure("nDCG@10", "ndcg_at_10", _ndcg, 10),
)


def first_relevant_rank(ranked: list[str], rel: dict[str, int]) -> int | None:
    return next((i for i, d in enumerate(ranked, 1) if rel.get(d, 0) > 0), None)


def per_query(ranking: Ranking, qrels: Qrels) -> dict[str, dict[str, float]]:
    """``{qid: {metric_key: value}}`` for every judged query (missing rankings score 0)."""
    out = {}
    for qid, rel in qrels.items():
        ranked = ordered(ranking.get(qid, {}))
        out[qid] = {m.key: m.fn(ranked, rel, m.cutoff) for m in MEASURES}
    return out


def aggregate(scores: dict[str, dict[str, float]], queries: Iterable[Query]) -> dict[str, float]:
    """Means overall and per kind as ``<metric>`` and ``<metric>.<kind>``."""
    kind_of = {q.qid: q.kind for q in queries}
    out: dict[str, float] = {}
    groups: dict[str | None, list[str]] = {None: list(scores)}
    for qid in scores:
        groups.setdefault(kind_of.get(qid, "general"), []).append(qid)
    for kind, qids in groups.items():
        suffix = "" if kind is None else f".{kind}"
        for m in MEASURES:
            out[m.key + suffix] = sum(scores[q][m.key] for q in qids) / len(qids)
    return out


def collapse_to_documents(ranking: Ranking, doc_of: dict[str, str]) -> Ranking:
    """Chunk ranking -> document ranking in rank order: a document takes the rank of its best
    chunk; scores become ``n - position`` so ties cannot reorder documents."""
    out: Ranking = {}
    for qid, scores in ranking.items():
        docs: list[str] = []
        seen: set[str] = set()
        for cid in ordered(scores):
            d = doc_of[cid]
            if d not in seen:
                seen.add(d)
                docs.append(d)
        out[qid] = {d: float(len(docs) - i) for i, d in enumerate(docs)}
    return out
