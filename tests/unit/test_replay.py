"""Runs that only replay rankings or vectors made for the evaluation's questions
(``decide.replay``): never offered as cheaper, never promoted, never served. A user's sweep
named a TREC run "cheapest tied with the best (... 714.3x less)" at nDCG@10 0.500 against 1.000
on 4 questions; promoted, ``ragexp search`` said no passage shared a term with "grinder"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from workspaces import record_run

from ragexp.cli import main as cli
from ragexp.decide import compare, cost, replay, selection
from ragexp.evaluation import stats
from ragexp.tracking import store as tracking

TREC = {"retriever.name": "trec_run", "retriever.path": "/x/other.run", "embedder.name": "hash"}
DENSE = {"retriever.name": "dense", "embedder.name": "minilm", "abstain.signal.name": "lexical"}
PRECOMPUTED = {"retriever.name": "dense", "embedder.name": "precomputed",
               "embedder.path": "/v", "embedder.queries": "None",
               "abstain.signal.name": "lexical"}


@pytest.mark.parametrize("params, replays", [
    (DENSE, False),
    ({**DENSE, "retriever.name": "bm25"}, False),
    (TREC, True),
    # a hybrid part replaying a file, by its path or by the option's name
    ({"retriever.name": "hybrid", "retriever.parts.bm25.depth": "100",
      "retriever.parts.run.retriever.path": "/x/other.run", "embedder.name": "hash"}, True),
    ({"retriever.name": "hybrid", "retriever.parts.run.retriever.name": "trec_run",
      "embedder.name": "hash"}, True),
    # precomputed question vectors: only the evaluation's questions have one
    (PRECOMPUTED, True),
    ({**PRECOMPUTED, "embedder.queries": "minilm"}, False),  # a model embeds new questions
    ({**PRECOMPUTED, "retriever.name": "bm25"}, False),  # nothing embeds a question
    ({**PRECOMPUTED, "retriever.name": "bm25", "abstain.signal.name": "dense"}, True),
    ({**PRECOMPUTED, "retriever.name": "hybrid", "retriever.parts.dense.depth": "100",
      "retriever.parts.bm25.depth": "100"}, True),
    ({**DENSE, "retriever.name": "hybrid", "retriever.parts.dense.depth": "100",
      "retriever.parts.dense.embedder": "precomputed"}, True),
])
def test_one_rule_says_which_runs_cannot_rank_a_new_question(params, replays):
    assert (replay.replays(params) is not None) == replays


def test_a_config_yaml_is_read_as_its_params():
    """Serving reads the run's ``config.yaml`` (nested, ``_target_`` keys, nulls as None)."""
    trec = {"retriever": {"_target_": "ragexp.stages.external.TrecRunRetriever",
                          "name": "trec_run", "path": "/x/other.run"}}
    assert replay.of_config(trec) == replay.replays(TREC)
    vectors = {"retriever": {"name": "dense"}, "abstain": {"signal": {"name": "lexical"}},
               "embedder": {"name": "precomputed", "path": "/v", "queries": None}}
    assert "cannot embed a new question" in replay.of_config(vectors)
    vectors["embedder"]["queries"] = "minilm"
    assert replay.of_config(vectors) is None


def lat(p50, p95):
    return {"time.query_p50_ms": p50, "time.query_p95_ms": p95}


def test_a_trec_run_is_never_the_cheapest_tied_and_is_named_as_left_out():
    """The user's sweep: best (dense) 1.000 at p95 10 ms, the TREC run 0.500 and tied (4
    questions) at 0.014 ms: 714.3x less. Without the rule it is the cheapest tied."""
    metrics = {"best": lat(5.0, 10.0), "trec": lat(0.01, 0.014), "bm25": lat(4.0, 9.0)}
    params = {"best": DENSE, "trec": TREC, "bm25": {**DENSE, "retriever.name": "bm25"}}
    quality = {"best": 1.0, "trec": 0.5, "bm25": 0.75}
    assert cost.cheapest_tied(["best", "trec", "bm25"], "best", metrics, params).run == "trec"
    found, reference, left_out = selection.servable_choice(["best", "trec", "bm25"], "best",
                                                           quality, metrics, params)
    assert found == cost.Cheapest("best", (), "time.query_p95_ms") and reference == "best"
    assert list(left_out) == ["trec"] and "retriever=trec_run" in left_out["trec"]
    # the best itself replays: the best tied run that can serve is the reference
    found, reference, _ = selection.servable_choice(["trec", "best", "bm25"], "trec",
                                                    {**quality, "trec": 1.0}, metrics, params)
    assert reference == "best" and found.run == "best"
    assert selection.servable_choice(["trec"], "trec", quality, metrics, params)[:2] == (
        None, None)
    line = replay.left_out_line(left_out, {"trec": "proj_trec"})
    assert line.startswith("left out of the cost comparison (they cannot serve a new question")
    assert "proj_trec: its retriever (retriever=trec_run, /x/other.run) only replays" in line
    tags = {"ragexp.cost_left_out": json.dumps([{"run_id": "t" * 32, "label": "proj_trec",
                                                 "why": left_out["trec"]}])}
    assert compare.cost_lines(tags, {}) == [line]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, module_mlflow_store):
    """A BM25 run of the handbook and its own ranking (run.trec) replayed as a TREC run."""
    tmp = tmp_path_factory.mktemp("replay")
    quiet = [f"cache_dir={tmp / 'cache'}", "progress=false", "embedder=hash", "split=all"]
    bm25 = record_run(*quiet, "retriever=bm25")
    path = Path(tracking.artifact_path(bm25["run_id"], "run.trec"))
    trec = record_run(*quiet, "retriever=trec_run", f"retriever.path={path}")
    return bm25["run_id"], trec["run_id"], path


def test_promote_search_and_ask_refuse_a_trec_run_and_say_why(runs, capsys):
    bm25, trec, path = runs
    assert cli.main(["promote", trec]) == 2
    err = capsys.readouterr().err
    assert f"refused: run {trec} cannot serve: its retriever (retriever=trec_run, {path}) only " \
           f"replays a precomputed ranking of the evaluation's question ids; promote a run " \
           f"whose retriever ranks any question" in err
    assert tracking.champion() is None  # nothing registered
    for argv in (["search", "--run", trec, "ledger"], ["ask", "--run", trec, "What is it?"]):
        assert cli.main(argv) == 2
        out = capsys.readouterr()
        assert f"run {trec} cannot answer a new question: its retriever (retriever=trec_run" \
               in out.err and "none shares a term" not in out.out + out.err, out
    assert cli.main(["search", "--run", bm25, "ledger"]) == 0  # the run it replays serves
    assert f"(run {bm25})" in capsys.readouterr().out


def test_the_sweep_logs_and_says_the_trec_run_was_left_out(monkeypatch):
    """What ``summarise_sweep`` logs on the parent and prints for the user's sweep."""
    logged = {}
    monkeypatch.setattr(selection.tracking, "log_batch",
                        lambda run, tags=None, **_: logged.update(tags or {}))
    metrics = {"best": lat(5.0, 10.0), "trec": lat(0.01, 0.014)}
    params = {"best": DENSE, "trec": TREC}
    label = {"best": "dense", "trec": "proj_trec"}
    lines = selection._log_cheapest("p", stats.Tied("best", ("best", "trec"), {}),
                                    {"best": 1.0, "trec": 0.5}, metrics, label, params,
                                    {r: {"time.query_p95_ms": 4} for r in metrics})
    assert lines[0].startswith("cheapest tied with the best: the best itself, dense")
    assert "714.3x" not in " ".join(lines) and lines[1].startswith("left out of the cost")
    assert logged["ragexp.cheapest_tied"] == "best"
    assert json.loads(logged["ragexp.pareto"]) == {}  # one run left: no front
    assert [e["run_id"] for e in json.loads(logged["ragexp.cost_left_out"])] == ["trec"]


def test_promote_cheapest_tied_says_every_tied_run_replays(runs, capsys):
    """A sweep whose tied runs all replay names no cheapest run: ``promote --cheapest-tied``
    said it "ended before this ragexp, or no tied run logged a cost", neither of them true."""
    _, trec, _ = runs
    c = tracking.client()
    exp = c.get_run(trec).info.experiment_id
    why = "its retriever (retriever=trec_run) only replays a precomputed ranking"
    parent = c.create_run(exp, tags={
        "ragexp.role": "sweep", "ragexp.best_run": trec,
        "ragexp.tied_with_best": json.dumps([{"run_id": trec, "label": "proj_trec"}]),
        "ragexp.cost_left_out": json.dumps([{"run_id": trec, "label": "proj_trec",
                                             "why": why}])}).info.run_id
    c.set_terminated(parent, "FINISHED")
    assert cli.main(["promote", "--cheapest-tied", parent]) == 2
    err = capsys.readouterr().err
    assert f"error: sweep {parent} names no cheapest run tied with the best (tag " \
           f"ragexp.cheapest_tied): every run tied with the best replays rankings or vectors " \
           f"made for the evaluation's questions, so none can serve (proj_trec: {why}); " \
           f"promote a run by its id" in err
