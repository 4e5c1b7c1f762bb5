"""Reranker attribution: how much of what the first stage made possible a reranker realises.

A reranker reorders the first stage's best ``top_n`` (N) items and can do no better than the
best order of them. For every query with judgements, over the first-stage ranking (at the
scoring unit, before reranking):

- the **ceiling** at the rerank depth: ``R@N`` and ``Success@N`` (what a perfect reranker could
  at most find);
- the **oracle**: the objective (e.g. ``nDCG@10``) of the first stage's top N reordered by
  judged grade, highest first (ties keep their first-stage order), the tail unchanged: the
  objective's ceiling at this depth;
- the **first stage** objective as retrieved, and the **reranked** objective the run logs;
- the **realised share**: mean reranked objective / mean oracle objective (1.0: the reranker
  reaches the ceiling; the first stage's own share is first stage / oracle).

Metric keys are MLflow-safe: ``rerank.ceiling.r_at_20``, ``rerank.ceiling.success_at_20``,
``rerank.first_stage.ndcg_at_10``, ``rerank.oracle.ndcg_at_10``, ``rerank.reranked.ndcg_at_10``
``rerank.realised_share`` (reranked / oracle: how much of the ceiling the final ranking
reaches, a reranker that changes nothing included) and ``rerank.gain_share`` ((reranked - first
stage) / (oracle - first stage): the share of the room above the first stage the reranker
closes; 0 for a reranker that changes nothing, negative when it hurts; left out when the first
stage already reaches the oracle).
"""

from __future__ import annotations

from ragexp.evaluation.measures import Measure, parse
from ragexp.records import Qrels, Ranking, ordered


def oracle_order(ranked: list[str], rel: dict[str, int], top_n: int) -> list[str]:
    """``ranked`` with its first ``top_n`` items sorted by grade (``rel``, 0 when unjudged),
    highest first, stable; the rest as they were."""
    head = sorted(ranked[:top_n], key=lambda item: -rel.get(item, 0))
    return head + ranked[top_n:]


def rerank_attribution(first_stage: Ranking, reranked: Ranking, qrels: Qrels, top_n: int,
                       objective: Measure) -> dict[str, float]:
    """The ``rerank.*`` metrics above (``{key: value}``), means over the queries in ``qrels``
    (a query missing from a ranking scores 0, as in ``metrics.per_query``). ``top_n >= 1``;
    ``realised_share`` is left out when the oracle scores 0 on every query (nothing relevant
    in any first-stage top N: there is no ceiling to share)."""
    recall, success = parse(f"R@{top_n}"), parse(f"Success@{top_n}")
    sums = {"ceiling_r": 0.0, "ceiling_s": 0.0, "first": 0.0, "oracle": 0.0, "reranked": 0.0}
    for qid, rel in qrels.items():
        first = ordered(first_stage.get(qid, {}))
        sums["ceiling_r"] += recall(first, rel)
        sums["ceiling_s"] += success(first, rel)
        sums["first"] += objective(first, rel)
        sums["oracle"] += objective(oracle_order(first, rel, top_n), rel)
        sums["reranked"] += objective(ordered(reranked.get(qid, {})), rel)
    n = max(len(qrels), 1)
    out = {f"rerank.ceiling.{recall.key}": sums["ceiling_r"] / n,
           f"rerank.ceiling.{success.key}": sums["ceiling_s"] / n,
           f"rerank.first_stage.{objective.key}": sums["first"] / n,
           f"rerank.oracle.{objective.key}": sums["oracle"] / n,
           f"rerank.reranked.{objective.key}": sums["reranked"] / n}
    if sums["oracle"] > 0:
        out["rerank.realised_share"] = sums["reranked"] / sums["oracle"]
    if sums["oracle"] > sums["first"]:
        out["rerank.gain_share"] = (sums["reranked"] - sums["first"]) / (sums["oracle"]
                                                                       - sums["first"])
    return out
