"""One naming rule for runs (``decide.labels``), as ``compare``'s table, its paired tests,
``confirm``, ``gate``, the sweep's console lines and its page use it: a trial named one run of
overrides ``custom`` (compare), by its id (the paired table) and ``fusion.k=10.0
retriever.name=bm25`` (the page, naming a setting a BM25 run ignores, an integer as a float).
Mostly pure: hand-written recorded params, labels written out by the rule in the module
docstring; the last tests record chunking runs in a temporary store, as a new user's were."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from workspaces import record_run

from ragexp.cli import main as cli
from ragexp.config import schema
from ragexp.decide import compare, gate, labels
from ragexp.report import sweep_data
from ragexp.tracking import store as tracking

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


def chunked(name: str, **values: str) -> dict:
    """Recorded params of a BM25 run of chunking option ``name``: its own keys only, as the
    schema records them (``chunking.sentences`` exists only on a sentence-chunking run)."""
    own = {"markdown": {"max_words": "120", "overlap_words": "20", "include_headings": "True"},
           "sentences": {"sentences": "6", "overlap_sentences": "1", "max_words": "120",
                         "include_headings": "True"},
           "none": {"include_title": "True", "windows": "truncate"}}[name]
    return {**run("bm25", "60.0"), "chunking.name": name,
            **{f"chunking.{k}": v for k, v in {**own, **values}.items()}}


def test_a_key_only_some_runs_have_tells_apart_the_runs_that_have_it():
    """A new user's ``compare --experiment``: two sentence-chunking runs were both
    ``chunking.name=sentences`` with an id (nDCG 0.914 and 0.802; ``chunking.sentences``, 2 and
    1, appeared nowhere), and markdown runs of ``max_words`` 10 and 15 showed neither that nor
    ``include_headings``: only keys every run had counted, and a ``chunking=none`` run has
    none of them. A key a run lacks differs from one it has; the option's own values still go
    with its name (``overlap_sentences`` is 1 in both sentence runs: not named)."""
    E = "e" * 32
    params = {A: chunked("sentences", sentences="2"), B: chunked("sentences", sentences="1"),
              C: chunked("markdown", max_words="10"),
              D: chunked("markdown", max_words="15", include_headings="False"),
              E: chunked("none")}
    got = labels.labels(dict.fromkeys(params, "custom"), params)
    assert got == {A: "chunking.name=sentences chunking.sentences=2",
                   B: "chunking.name=sentences chunking.sentences=1",
                   C: "chunking.include_headings=True chunking.max_words=10 "
                      "chunking.name=markdown",
                   D: "chunking.include_headings=False chunking.max_words=15 "
                      "chunking.name=markdown",
                   E: "chunking.name=none"}
    # compare's columns: the keys every run has, and those a label names
    assert labels.columns(dict.fromkeys(params), params) == [
        "chunking.include_headings", "chunking.max_words", "chunking.name",
        "chunking.sentences"]
    # a key one run of an option records and another lacks (recorded before it existed)
    old = {k: v for k, v in chunked("markdown").items() if k != "chunking.include_headings"}
    assert labels.labels({A: None, B: None}, {A: chunked("markdown"), B: old}) == {
        A: "chunking.include_headings=True", B: "bbbbbbbb"}


def test_runs_of_one_named_ablation_are_told_apart_by_what_differs_between_them():
    """``-m +ablation=chunks_sentences chunking.sentences=2,1``: both were the ablation's name
    with an id. The settings that differ between them follow the name; a run of another
    ablation keeps its name alone, and runs that differ in nothing they measure keep the id."""
    params = {A: chunked("sentences", sentences="2"), B: chunked("sentences", sentences="1"),
              C: chunked("markdown"), D: {**chunked("markdown"), "experiment": "other"}}
    got = labels.labels({A: "chunks_sentences", B: "chunks_sentences", C: "default",
                         D: "default"}, params)
    assert got == {A: "chunks_sentences chunking.sentences=2",
                   B: "chunks_sentences chunking.sentences=1",
                   C: "default (cccccccc)", D: "default (dddddddd)"}
    assert labels.labels({A: "chunks_sentences", B: "chunks_sentences", C: "default",
                          D: "default"}, params, ids=False)[C] == "default"
    assert labels.beside_id(A, "chunks_sentences") == "aaaaaaaa (chunks_sentences)"
    assert labels.beside_id(A, "aaaaaaaa") == "aaaaaaaa"


# ---- the new user's runs, recorded: compare, gate and confirm name them alike ---------------

schema.register()
ONE = ["chunking=sentences", "chunking.overlap_sentences=0"]  # less than sentences=1
SENTENCES = {"s2": [*ONE, "chunking.sentences=2"], "s1": [*ONE, "chunking.sentences=1"],
             "m10": ["chunking=markdown", "chunking.overlap_words=5", "chunking.max_words=10"],
             "m15": ["chunking=markdown", "chunking.overlap_words=5", "chunking.max_words=15",
                     "chunking.include_headings=false"],
             "none": ["chunking=none"]}


@pytest.fixture(scope="module")
def chunking_runs(module_mlflow_store):
    """BM25 runs of the handbook (dev split) that differ in chunking only, as ablation
    ``custom`` (overrides only)."""
    base = ["retriever=bm25", "reranker=none", "embedder=hash", "progress=false",
            f"cache_dir={module_mlflow_store.folder / 'cache'}"]
    return {k: record_run(*base, *o)["run_id"] for k, o in SENTENCES.items()}


def test_compare_names_every_recorded_run_by_the_settings_that_tell_it_apart(chunking_runs):
    ids = chunking_runs
    df = compare.runs_frame("ragexp-handbook")
    assert set(df["run_id"]) == set(ids.values())
    tab = compare.table(df).set_index("run")
    name = {k: tab.loc[r[:8], "name"] for k, r in ids.items()}
    assert name == {"s2": "chunking.name=sentences chunking.sentences=2",
                    "s1": "chunking.name=sentences chunking.sentences=1",
                    "m10": "chunking.include_headings=True chunking.max_words=10 "
                           "chunking.name=markdown",
                    "m15": "chunking.include_headings=False chunking.max_words=15 "
                           "chunking.name=markdown",
                    "none": "chunking.name=none"}
    # the keys named are columns, blank for a run that lacks the key
    assert tab.loc[ids["s2"][:8], "chunking.sentences"] == "2"
    assert tab.loc[ids["none"][:8], "chunking.max_words"] == ""
    assert "chunking.overlap_sentences" not in tab and "chunking.include_title" not in tab
    # compare --runs of the two sentence runs names the key too, alone
    pair = compare.runs_frame("", run_ids=[ids["s2"], ids["s1"]])
    assert compare.run_labels(pair) == {ids["s2"]: "chunking.sentences=2",
                                        ids["s1"]: "chunking.sentences=1"}


def test_gate_and_confirm_name_a_run_of_overrides_by_its_settings_not_custom(chunking_runs,
                                                                             capsys):
    """The gate's header said ``(custom)`` of both runs, and confirm's console lines
    ``[custom]`` of both test runs (named at random in MLflow)."""
    s1, s2 = chunking_runs["s1"], chunking_runs["s2"]
    header = gate.evaluate(s1, s2, gate.Rule()).header.splitlines()[0]
    assert header.startswith(f"gate: run {s1[:8]} (chunking.sentences=1) against run "
                             f"{s2[:8]} (chunking.sentences=2); ")
    assert cli.main(["confirm", s1, "--baseline", s2]) == 0
    out = capsys.readouterr().out
    assert "custom" not in out
    printed = re.findall(r"^run [0-9a-f]{32} \[(.*?)\] ", out, re.M)  # the two test runs
    assert sorted(printed) == ["chunking.sentences=1", "chunking.sentences=2"]
    test_run = tracking.client().get_run(s1).data.tags["ragexp.confirm.test_run"]
    assert tracking.client().get_run(test_run).info.run_name == "chunking.sentences=1"
