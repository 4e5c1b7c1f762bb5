"""What a configuration costs, beside what it scores: the cheapest run tied with the best, and
the Pareto front of quality against each cost.

Costs are run metrics, lower is cheaper (``COSTS``): ``time.query_p95_ms`` (one question
served alone, milliseconds, 95th percentile), ``index.bytes`` (the dense index) and
``answer.cost_usd`` (what an LLM's answers cost; absent where no LLM answers). The cheapest of
the tied runs compares them in that order: latency first, then bytes, then money, each only
among the costs every tied run logged. Pure functions: ``selection`` logs what they find.
"""

from __future__ import annotations

import math
from typing import Mapping

COSTS = ("time.query_p95_ms", "index.bytes", "answer.cost_usd")


def known_costs(runs: list[str], metrics: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The ``COSTS`` every run of ``runs`` logged (finite), in ``COSTS`` order."""
    return [c for c in COSTS
            if runs and all(math.isfinite(metrics.get(r, {}).get(c, math.nan)) for r in runs)]


def varying(runs: list[str], metrics: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The ``known_costs`` of ``runs`` on which they differ: those worth naming."""
    return [c for c in known_costs(runs, metrics) if len({metrics[r][c] for r in runs}) > 1]


def cheapest(runs: list[str], metrics: Mapping[str, Mapping[str, float]]) -> str | None:
    """The run of ``runs`` with the lowest ``known_costs``, compared in ``COSTS`` order (a tie
    on one goes to the next; a tie on all to the earlier run of ``runs``); None when ``runs`` is
    empty or no cost is known for all of them."""
    costs = known_costs(runs, metrics)
    if not costs:
        return None
    return min(runs, key=lambda r: tuple(metrics[r][c] for c in costs))


def pareto_front(quality: Mapping[str, float], cost: Mapping[str, float]) -> list[str]:
    """Runs no other run dominates: none has quality at least as high and cost at least as low,
    one of them strictly. Only runs with both values; best quality first. Quality is higher
    = better, cost lower = cheaper."""
    runs = [r for r in quality if r in cost and math.isfinite(cost[r])]
    front = [r for r in runs
             if not any(quality[o] >= quality[r] and cost[o] <= cost[r]
                        and (quality[o] > quality[r] or cost[o] < cost[r]) for o in runs)]
    return sorted(front, key=lambda r: (-quality[r], cost[r]))


def fronts(quality: Mapping[str, float],
           metrics: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
    """``{cost: pareto_front(quality, that cost)}`` for each of ``COSTS`` that at least two runs
    logged with different values (a cost every run shares, such as ``answer.cost_usd`` 0 for
    extractive answers, says nothing)."""
    out = {}
    for c in COSTS:
        cost = {r: m[c] for r, m in metrics.items() if c in m and r in quality}
        if len(set(cost.values())) >= 2:
            out[c] = pareto_front(quality, cost)
    return out
