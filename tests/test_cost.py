"""The cheapest run tied with the best and the Pareto front of quality against cost, on hand
examples whose answers are worked out in the comments."""

from __future__ import annotations

import math

from ragexp.decide import compare, cost
from ragexp.report.html import cost_section
from ragexp.report.sweep_data import SweepData

METRICS = {  # flat is exact and slow; hnsw tied and 9x faster but bigger; bm25 has no index
    "flat": {"time.query_p95_ms": 18.0, "index.bytes": 4000.0},
    "hnsw": {"time.query_p95_ms": 2.0, "index.bytes": 9000.0},
    "ivf": {"time.query_p95_ms": 2.0, "index.bytes": 4100.0},
    "bm25": {"time.query_p95_ms": 1.0},
}


def test_cheapest_compares_latency_then_bytes_among_costs_every_run_logged():
    # hnsw and ivf tie on p95 (2.0 ms); ivf holds fewer bytes
    assert cost.cheapest(["flat", "hnsw", "ivf"], METRICS) == "ivf"
    # bm25 logged no index.bytes: only latency counts, and bm25 is fastest
    assert cost.known_costs(["flat", "bm25"], METRICS) == ["time.query_p95_ms"]
    assert cost.cheapest(["flat", "bm25"], METRICS) == "bm25"
    # a tie on every known cost goes to the earlier run
    assert cost.cheapest(["hnsw", "x"], {**METRICS, "x": {"time.query_p95_ms": 2.0,
                                                          "index.bytes": 9000.0}}) == "hnsw"
    assert cost.cheapest([], METRICS) is None
    assert cost.cheapest(["flat", "y"], {**METRICS, "y": {"answer.cost_usd": 1.0}}) is None
    assert cost.known_costs(["flat", "z"], {**METRICS, "z": {"time.query_p95_ms": math.nan,
                                                             "index.bytes": 1.0}}) == [
        "index.bytes"]


def test_pareto_front_keeps_the_runs_no_other_dominates():
    quality = {"flat": 0.60, "hnsw": 0.59, "ivf": 0.55, "bm25": 0.40, "worse": 0.50}
    latency = {"flat": 18.0, "hnsw": 2.0, "ivf": 2.0, "bm25": 1.0, "worse": 5.0}
    # ivf: hnsw has more quality at the same cost; worse: hnsw beats it on both
    assert cost.pareto_front(quality, latency) == ["flat", "hnsw", "bm25"]
    # equal points do not dominate each other
    assert cost.pareto_front({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 1.0}) == ["a", "b"]


def test_fronts_per_cost_need_two_runs_that_logged_it_differently():
    quality = {"flat": 0.60, "hnsw": 0.59, "ivf": 0.55, "bm25": 0.40}
    free = {r: {**m, "answer.cost_usd": 0.0} for r, m in METRICS.items()}  # extractive
    assert cost.varying(["flat", "hnsw"], free) == ["time.query_p95_ms", "index.bytes"]
    out = cost.fronts(quality, free)
    assert out == {"time.query_p95_ms": ["flat", "hnsw", "bm25"],
                   "index.bytes": ["flat"]}  # flat has the most quality and fewest bytes


def test_the_parent_tags_read_back_as_lines_and_a_page_section():
    tags = {"ragexp.cheapest_tied": "b" * 32,
            "ragexp.cheapest_tied_costs": '{"time.query_p95_ms": {"cheapest": 2, "best": 18}}',
            "ragexp.pareto": '{"time.query_p95_ms": ["%s", "%s"]}' % ("a" * 32, "b" * 32)}
    names = {"a" * 32: "default", "b" * 32: "hnsw_dense"}
    assert compare.cost_lines(tags, names) == [
        "cheapest tied with the best: hnsw_dense (time.query_p95_ms 2 vs 18 for the best)",
        "Pareto front, objective against time.query_p95_ms: default, hnsw_dense"]
    assert compare.cost_lines({}, names) == []
    data = SweepData("p" * 32, "e", None, {}, {}, "nDCG@10", None, parent_tags=tags)
    html = "\n".join(cost_section(data, names))
    assert "cheapest tied with the best: hnsw_dense" in html and "<h2>" in html


def test_runs_of_overrides_are_labelled_by_their_id_not_custom():
    """A sweep of overrides (no ``+ablation``) tags every run ``custom``: ``compare`` named the
    cheapest tied run "custom" (a fresh-user trial); the label is the run id's first 8."""
    import pandas as pd

    from ragexp.decide import compare

    a, b, c = "a" * 32, "b" * 32, "c" * 32
    df = pd.DataFrame({"run_id": [a, b, c],
                       "tags.ragexp.ablation": ["custom", "hybrid_convex", None]})
    assert compare.run_labels(df) == {a: "aaaaaaaa", b: "hybrid_convex", c: "cccccccc"}
    assert compare.cost_lines({"ragexp.cheapest_tied": a, "ragexp.pareto": f'{{"bytes": ["{a}", "{b}"]}}'},
                              compare.run_labels(df)) == [
        "cheapest tied with the best: aaaaaaaa",
        "Pareto front, objective against bytes: aaaaaaaa, hybrid_convex"]
