"""One naming rule for runs (``decide.labels``), as ``compare``'s table, its paired tests,
``confirm``, the sweep's console lines and its page use it: a trial named one run of overrides
``custom`` (compare), by its id (the paired table) and ``fusion.k=10.0 retriever.name=bm25``
(the page, naming a setting a BM25 run ignores, an integer as a float). Pure: hand-written
recorded params, labels written out by the rule in the module docstring."""

from __future__ import annotations

import pandas as pd
import pytest

from ragexp.decide import compare, labels
from ragexp.report import sweep_data

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32
CUSTOM = dict.fromkeys((A, B, C), "custom")


def run(retriever: str, k: str, reranker: str = "none", top_n: str = "0", **extra) -> dict:
    """Recorded params of one run, as MLflow keeps them (strings; floats for float fields)."""
    params = {"retriever.name": retriever, "fusion.name": "rrf", "fusion.k": k,
              "reranker.name": reranker, "reranker.top_n": top_n, "experiment": f"e-{k}",
              "embedder.name": "hash", **extra}
    if retriever == "hybrid":
        params["retriever.parts.bm25.depth"] = "100"
    return params


@pytest.mark.parametrize(("recorded", "printed"), [
    ("10.0", "10"), ("-3.00", "-3"), ("10", "10"), ("0.5", "0.5"), ("1e-05", "1e-05"),
    ("1.0e3", "1.0e3"), ("rrf", "rrf"), ("10.01", "10.01")])
def test_integral_values_print_as_integers_and_nothing_else_changes(recorded, printed):
    assert labels.shown(recorded) == printed


def test_a_setting_a_run_ignores_is_not_in_its_label():
    """``-m retriever=bm25,hybrid fusion.k=10,60``: BM25 fuses nothing, so fusion.k is no part
    of what it measures (its config hash leaves it out) nor of its name; a bookkeeping key that
    differs (experiment) is never named."""
    got = labels.labels(CUSTOM, {A: run("bm25", "10.0"), B: run("hybrid", "10.0"),
                                 C: run("hybrid", "60.0")})
    assert got == {A: "retriever.name=bm25", B: "fusion.k=10 retriever.name=hybrid",
                   C: "fusion.k=60 retriever.name=hybrid"}


def test_an_option_s_own_values_go_with_its_name():
    """reranker=none has top_n 0, lexical 20: the name says it. A top_n that differs between
    two runs of the same option is named."""
    got = labels.labels(CUSTOM, {A: run("bm25", "60.0", "none", "0"),
                                 B: run("bm25", "60.0", "lexical", "20"),
                                 C: run("bm25", "60.0", "lexical", "50")})
    assert got == {A: "reranker.name=none", B: "reranker.name=lexical reranker.top_n=20",
                   C: "reranker.name=lexical reranker.top_n=50"}


def test_ablations_keep_their_name_and_the_rest_fall_back_to_the_id():
    got = labels.labels({A: "hybrid_convex", B: "custom", C: None, D: "custom"},
                        {A: run("hybrid", "60.0"), B: run("bm25", "60.0"),
                         C: run("bm25", "60.0"), D: run("bm25", "60.0", "lexical", "20")})
    # keys differ across all four (the named run's too); B and C differ from each other in
    # nothing they measure: the same label, ids appended
    assert got == {A: "hybrid_convex", B: "reranker.name=none retriever.name=bm25 (bbbbbbbb)",
                   C: "reranker.name=none retriever.name=bm25 (cccccccc)",
                   D: "reranker.name=lexical retriever.name=bm25"}
    assert labels.labels({A: "custom"}, {A: run("bm25", "60.0")}) == {A: "aaaaaaaa"}  # alone


def frame(params: dict[str, dict], ablations: dict[str, str]) -> pd.DataFrame:
    """A ``search_runs`` frame of these runs (``params.*`` and the ablation tag)."""
    rows = [{"run_id": r, "tags.ragexp.ablation": ablations[r],
             **{f"params.{k}": v for k, v in p.items()}} for r, p in params.items()]
    return pd.DataFrame(rows)


def test_compare_its_paired_table_and_the_page_name_a_run_alike():
    df = frame({A: run("bm25", "10.0"), B: run("hybrid", "10.0"), C: run("hybrid", "60.0")},
               CUSTOM)
    expected = {A: "retriever.name=bm25", B: "fusion.k=10 retriever.name=hybrid",
                C: "fusion.k=60 retriever.name=hybrid"}
    assert compare.run_labels(df) == expected  # the paired table, sources, costs, plan
    assert sweep_data.labels(df) == [expected[r] for r in df["run_id"]]  # the page
    tab = compare.table(df, per_kind=())
    assert list(tab["name"]) == [expected[r] for r in df["run_id"]]  # compare's own table
    # its differing columns as the labels print them, blank where the run ignores the key
    assert list(tab["fusion.k"]) == ["", "10", "60"]
    assert list(tab["retriever.name"]) == ["bm25", "hybrid", "hybrid"]


def test_a_key_the_config_copies_from_another_is_named_once():
    """``retriever.fusion`` is ``${fusion}`` in the recorded config: a trial saw
    ``bm25.k1=1.2 fusion.k=10 retriever.fusion.k=10``. The copy is left out of the differing
    keys (labels and compare's columns), a key that merely ends alike but differs is kept."""
    def hybrid(k: str, k1: str, own: str) -> dict:
        return {**run("hybrid", k), "retriever.fusion.k": k, "bm25.k1": k1,
                "retriever.parts.bm25.k1": own}

    params = {A: hybrid("10.0", "1.2", "0.9"), B: hybrid("20.0", "1.5", "0.9"),
              C: hybrid("10.0", "1.5", "1.1")}
    assert labels.differing(params) == ["bm25.k1", "fusion.k", "retriever.parts.bm25.k1"]
    got = labels.labels(CUSTOM, params)
    assert got[A] == "bm25.k1=1.2 fusion.k=10 retriever.parts.bm25.k1=0.9"
    frame = pd.DataFrame([{"run_id": r, **{f"params.{k}": v for k, v in p.items()}}
                          for r, p in params.items()])
    assert compare.differing_params(frame) == [f"params.{k}" for k in labels.differing(params)]


@pytest.mark.parametrize(("overrides", "label"), [
    (["retriever=bm25", "embedder=hash", "progress=false", "cache_dir=/tmp/c"],
     "retriever=bm25 embedder=hash"),
    (["+ablation=x", "hydra.sweep.dir=s", "force=true", "embedder.dim=256", "~reranker"],
     "embedder.dim=256 ~reranker"),
    (["force=true", "experiment=e"], "custom"), ([], "custom")])
def test_a_run_of_overrides_is_named_by_its_overrides_less_bookkeeping(overrides, label):
    assert labels.of_overrides(overrides) == label
