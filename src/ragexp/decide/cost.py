"""What a configuration costs, beside what it scores: the cheapest run tied with the best, and
the Pareto front of quality against each cost.

Costs are run metrics, lower is cheaper (``COSTS``): ``time.query_p95_ms`` (one question
served alone, milliseconds, 95th percentile), ``index.bytes`` (the dense index) and
``answer.cost_usd`` (what an LLM's answers cost; absent where no LLM answers). The cheapest of
the tied runs (``cheapest_tied``) is one that measurement shows cheaper than the best: a
latency, timed over a few dozen questions on a shared machine, counts only when the difference
is beyond its spread (``measurably_faster``); bytes and money are exact. Pure functions:
``selection`` logs what they find.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

COSTS = ("time.query_p95_ms", "index.bytes", "answer.cost_usd")
EXACT = ("index.bytes", "answer.cost_usd")  # counted, not timed: any difference is real
# each latency (95th percentile) and its median: the spread ``measurably_faster`` compares
MEDIAN = {"time.query_p95_ms": "time.query_p50_ms", "index.search_p95_ms": "index.search_p50_ms"}
INDEX_PREFIX = "index."  # params of the dense index's own settings (index.ef_search, ...)


def known_costs(runs: list[str], metrics: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The ``COSTS`` every run of ``runs`` logged (finite), in ``COSTS`` order."""
    return [c for c in COSTS
            if runs and all(math.isfinite(metrics.get(r, {}).get(c, math.nan)) for r in runs)]


def varying(runs: list[str], metrics: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The ``known_costs`` of ``runs`` on which they differ: those worth naming."""
    return [c for c in known_costs(runs, metrics) if len({metrics[r][c] for r in runs}) > 1]


@dataclass(frozen=True)
class Cheapest:
    """The cheapest run tied with the best. ``run``: its id (the best's own when no tied run is
    measurably cheaper); ``cheaper``: the costs on which it is measurably lower than the best,
    in ``COSTS`` order (empty: none); ``latency``: the latency compared
    (``latency_key``), or None when not every run logged it."""

    run: str
    cheaper: tuple[str, ...]
    latency: str | None


def latency_key(runs: list[str], metrics: Mapping[str, Mapping[str, float]],
                params: Mapping[str, Mapping[str, str]]) -> str | None:
    """The latency to compare ``runs`` on: ``index.search_p95_ms`` (the dense index searched
    alone) when they differ only in ``index.*`` params and every one logged it and its median,
    since the whole path's time then adds only the same work's noise; else
    ``time.query_p95_ms``; None when not every run logged that one and its median."""
    keys = set().union(*(params.get(r, {}) for r in runs)) if runs else set()
    differ = [k for k in keys if len({params.get(r, {}).get(k) for r in runs}) > 1]
    if differ and all(k.startswith(INDEX_PREFIX) for k in differ) \
            and _logged(runs, metrics, "index.search_p95_ms"):
        return "index.search_p95_ms"
    return "time.query_p95_ms" if _logged(runs, metrics, "time.query_p95_ms") else None


def _logged(runs, metrics, key: str) -> bool:
    return all(math.isfinite(metrics.get(r, {}).get(k, math.nan))
               for r in runs for k in (key, MEDIAN[key]))


def measurably_faster(a: str, b: str, metrics: Mapping[str, Mapping[str, float]],
                      key: str) -> bool:
    """Whether run ``a`` is faster than ``b`` beyond the spread of their timings: ``a``'s 95th
    percentile ``key`` is below ``b``'s median (``MEDIAN[key]``), so 95% of ``a``'s questions
    took less than half of ``b``'s. Runs log percentiles, not each question's time, so this
    distribution-free separation stands in for a rank test; a 95th percentile of 20 questions
    is nearly their maximum, and one slow question on a loaded machine moves it several-fold
    while the medians stay put."""
    return metrics[a][key] < metrics[b][MEDIAN[key]]


def cheapest_tied(runs: list[str], best: str, metrics: Mapping[str, Mapping[str, float]],
                  params: Mapping[str, Mapping[str, str]]) -> Cheapest | None:
    """The cheapest of the tied ``runs`` (``best`` among them) by what measurement supports:

    1. of the runs ``measurably_faster`` than the best on ``latency_key``, the lowest
       95th percentile (ties: fewer ``EXACT`` costs, then the earlier run);
    2. else, of the runs not measurably slower than the best, the least ``EXACT`` costs
       (compared in order, among those every run logged), if lower than the best's;
    3. else the best itself, ``cheaper`` empty: no tied run is measurably cheaper.

    None when ``runs`` is empty or no cost is known for all of them."""
    if not runs:
        return None
    lat = latency_key(runs, metrics, params)
    exact = [c for c in known_costs(runs, metrics) if c in EXACT]
    if lat is None and not exact:
        return None
    spend = lambda r: tuple(metrics[r][c] for c in exact)  # noqa: E731
    if lat is not None:
        faster = [r for r in runs if r != best and measurably_faster(r, best, metrics, lat)]
        if faster:
            chosen = min(faster, key=lambda r: (metrics[r][lat], spend(r)))
            return Cheapest(chosen, (lat, *[c for c in exact
                                           if metrics[chosen][c] < metrics[best][c]]), lat)
    peers = [r for r in runs if lat is None or not measurably_faster(best, r, metrics, lat)]
    chosen = min(peers, key=spend)
    if spend(chosen) < spend(best):
        return Cheapest(chosen, tuple(c for c in exact if metrics[chosen][c] < metrics[best][c]),
                        lat)
    return Cheapest(best, (), lat)


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
