"""The cheapest run tied with the best and the Pareto front of quality against cost, on hand
examples whose answers are worked out in the comments."""

from __future__ import annotations

import math

from ragexp.decide import compare, cost, selection
from ragexp.report.html import cost_section
from ragexp.report.sweep_data import SweepData

METRICS = {  # flat is exact and slow; hnsw tied and 9x faster but bigger; bm25 has no index
    "flat": {"time.query_p95_ms": 18.0, "index.bytes": 4000.0},
    "hnsw": {"time.query_p95_ms": 2.0, "index.bytes": 9000.0},
    "ivf": {"time.query_p95_ms": 2.0, "index.bytes": 4100.0},
    "bm25": {"time.query_p95_ms": 1.0},
}


def lat(p50, p95, **exact):
    return {"time.query_p50_ms": p50, "time.query_p95_ms": p95, **exact}


SAME = {r: {"retriever": "dense"} for r in ("best", "a", "b", "c")}


def test_a_noisy_latency_tie_makes_no_claim():
    # the trial's ef_search sweep, whole path: p95 of 20 questions 2.67 / 5.26 / 0.96 / 8.86 ms
    # with medians 0.43 to 0.69 ms: 0.96 is not below the best's median 0.48, so no claim
    metrics = {"best": lat(0.481, 2.673), "a": lat(0.688, 5.265), "b": lat(0.529, 0.962),
               "c": lat(0.435, 8.863)}
    found = cost.cheapest_tied(["best", "a", "b", "c"], "best", metrics, {
        r: {"index.ef_search": ef} for r, ef in zip(metrics, "800 400 200 100".split())})
    assert found == cost.Cheapest("best", (), "time.query_p95_ms")
    line = selection.cheapest_line(found, "best", metrics, {r: r for r in metrics},
                                   {r: {"time.query_p95_ms": 20} for r in metrics})
    assert line == ("cheapest tied with the best: the best itself, best (no tied run is "
                    "measurably cheaper; time.query_p95_ms counts as lower only below the other "
                    "run's median, 20 questions timed)")
    assert "vs" not in line


def test_a_clear_latency_difference_is_claimed_and_the_index_own_latency_preferred():
    # b's p95 0.9 ms is below the best's median 2.0 ms: 95% of b's questions beat half the best's
    metrics = {"best": lat(2.0, 11.0), "a": lat(1.9, 3.0), "b": lat(0.5, 0.9)}
    found = cost.cheapest_tied(["best", "a", "b"], "best", metrics, SAME)
    assert found == cost.Cheapest("b", ("time.query_p95_ms",), "time.query_p95_ms")
    line = selection.cheapest_line(found, "best", metrics, {r: r for r in metrics},
                                   {r: {"time.query_p95_ms": 30} for r in metrics})
    assert "b (time.query_p95_ms 0.9 vs 11 for the best: 12.2x less" in line
    assert "30 questions timed" in line
    # runs that differ only in index.* params: the index searched alone decides (the trial's
    # ef=100 run, 0.057 ms p95 under ef=800's median 0.066 ms), not the whole path's noise
    index = {"best": {**lat(0.481, 2.673), "index.search_p50_ms": 0.066,
                      "index.search_p95_ms": 0.102},
             "ef100": {**lat(0.435, 8.863), "index.search_p50_ms": 0.035,
                       "index.search_p95_ms": 0.057}}
    params = {"best": {"index.ef_search": "800", "k": "10"},
              "ef100": {"index.ef_search": "100", "k": "10"}}
    assert cost.latency_key(["best", "ef100"], index, params) == "index.search_p95_ms"
    assert cost.cheapest_tied(["best", "ef100"], "best", index, params).run == "ef100"
    other = {**params, "ef100": {**params["ef100"], "k": "20"}}  # not an index setting
    assert cost.latency_key(["best", "ef100"], index, other) == "time.query_p95_ms"
    assert cost.cheapest_tied(["best", "ef100"], "best", index, other).cheaper == ()


def test_exact_costs_decide_when_latency_does_not_separate():
    metrics = {"best": lat(1.0, 3.0, **{"index.bytes": 9000.0}),
               "small": lat(1.1, 3.5, **{"index.bytes": 4000.0}),
               "slow": lat(4.0, 6.0, **{"index.bytes": 1000.0})}  # p50 4.0 > best's p95 3.0
    assert cost.cheapest_tied(list(metrics), "best", metrics, SAME) == cost.Cheapest(
        "small", ("index.bytes",), "time.query_p95_ms")  # slow is measurably slower: out
    # bm25 logged no index.bytes: only latency counts; no latency at all: bytes alone
    assert cost.known_costs(["best", "bm25"], {**metrics, "bm25": lat(0.1, 0.2)}) == [
        "time.query_p95_ms"]
    assert cost.cheapest_tied(["best", "bm25"], "best", {**metrics, "bm25": lat(0.1, 0.2)},
                              SAME).run == "bm25"
    bytes_only = {"x": {"index.bytes": 5.0}, "y": {"index.bytes": 2.0}}
    assert cost.cheapest_tied(["x", "y"], "x", bytes_only, {}) == cost.Cheapest(
        "y", ("index.bytes",), None)
    assert cost.cheapest_tied([], "x", metrics, SAME) is None
    assert cost.cheapest_tied(["x", "z"], "x", {"x": {"answer.cost_usd": 1.0}, "z": {}},
                              {}) is None
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
    same = {"ragexp.cheapest_tied": "a" * 32, "ragexp.best_run": "a" * 32,
            "ragexp.cheapest_tied_costs": "{}"}
    assert compare.cost_lines(same, names) == [
        "cheapest tied with the best: the best itself, default (no tied run is measurably "
        "cheaper)"]
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


def test_a_run_a_sweep_reused_from_itself_is_listed_once(monkeypatch):
    """A trial: ``-m retriever=bm25,hybrid fusion.k=10,90`` skips bm25 at k=90 as identical to
    this sweep's own bm25 run at k=10 and links it (``ragexp.in_sweep.<parent>``), so the run
    is both a child and a reused run; ``compare --parent`` listed it twice. Ids given twice are
    one run too."""
    import mlflow
    import pandas as pd

    from ragexp.tracking import store

    a, b = "a" * 32, "b" * 32
    rows = {"child": [a, b], "skipped": [a], "ids": [a, b]}

    def search_runs(filter_string="", **_):
        which = ("skipped" if "in_sweep" in filter_string else
                 "ids" if "run_id IN" in filter_string else "child")
        ids = rows[which]
        return pd.DataFrame({"run_id": ids, "tags.ragexp.config_hash": ids,
                             "tags.ragexp.ablation": ["custom"] * len(ids)})

    monkeypatch.setattr(store, "client", lambda: None)
    monkeypatch.setattr(store, "experiment_ids", lambda name: ["0"])
    monkeypatch.setattr(mlflow, "search_runs", search_runs)
    assert sorted(compare.runs_frame("e", parent="p")["run_id"]) == [a, b]
    assert list(compare.runs_frame("e", run_ids=[b, a, b])["run_id"]) == [b, a]
