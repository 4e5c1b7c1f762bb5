"""Which experiment ``compare``, ``report`` and ``questions plan`` read without
``--experiment``: the one holding the store's latest ragexp evaluation run (a ``ragexp init``
project's ``ragexp-<name>``, not the shipped ``ragexp-handbook``), and the one line they print
for an experiment with nothing to show. Fast: the store holds hand-made runs."""

from __future__ import annotations

import itertools

import pytest

from ragexp.cli import main as cli
from ragexp.decide import compare
from ragexp.errors import NotFound
from ragexp.tracking import store as tracking

STARTS = itertools.count(1_700_000_000_000, 1000)  # ms: each run a second after the last


def evaluation_run(experiment: str, config_hash: str, ablation: str = "custom") -> str:
    """A FINISHED run tagged as ragexp evaluation runs are (``ragexp.config_hash``)."""
    c = tracking.client()
    run = c.create_run(tracking.ensure_experiment(experiment), start_time=next(STARTS),
                       tags={"ragexp.config_hash": config_hash,
                             "ragexp.ablation": ablation}).info.run_id
    c.log_metric(run, "ndcg_at_10", 0.5)
    c.set_terminated(run, "FINISHED")
    return run


def one_line_error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if " mlflow." not in line]  # MLflow's own log
    assert len(ours) == 1 and ours[0].startswith("error: ") and "Traceback" not in err, err
    return ours[0]


def test_the_default_is_the_experiment_of_the_latest_evaluation_run(mlflow_store):
    assert tracking.default_experiment() == "ragexp-handbook"  # an empty store
    tracking.ensure_experiment("ragexp-serving")  # traces only: no evaluation run
    evaluation_run("ragexp-handbook", "h1")
    assert tracking.default_experiment() == "ragexp-handbook"
    evaluation_run("ragexp-notes", "n1", "notes_baseline")
    assert tracking.default_experiment() == "ragexp-notes"
    assert tracking.experiments_with_runs() == ["ragexp-notes", "ragexp-handbook"]
    c = tracking.client()  # a run without the tag (a trace, a sweep parent) does not count
    other = c.create_run(tracking.ensure_experiment("ragexp-serving"), start_time=next(STARTS))
    c.set_terminated(other.info.run_id, "FINISHED")
    assert tracking.default_experiment() == "ragexp-notes"


def test_compare_without_experiment_lists_the_project_s_runs(mlflow_store, capsys):
    run = evaluation_run("ragexp-notes", "n1", "notes_baseline")
    assert cli.main(["compare", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert run[:8] in out and "notes_baseline" in out


def test_an_experiment_without_runs_is_one_line_naming_it_and_the_ones_with_runs(
        mlflow_store, capsys):
    evaluation_run("ragexp-notes", "n1")
    line = one_line_error(capsys, "compare", "--experiment", "ragexp-handbook")
    assert "no finished runs in experiment 'ragexp-handbook'" in line
    assert "--experiment NAME (experiments with runs here: ragexp-notes)" in line
    line = one_line_error(capsys, "report", "--html", str(mlflow_store.folder / "r.html"))
    assert line.startswith("error: no sweep in experiment 'ragexp-notes'")  # the default
    with pytest.raises(NotFound, match="unknown run id"):
        compare.runs_frame("", run_ids=["0" * 32])


def test_a_store_without_runs_says_how_to_make_one(mlflow_store, capsys):
    line = one_line_error(capsys, "questions", "plan")
    assert "no sweep in experiment 'ragexp-handbook'" in line
    assert "run an experiment first" in line


def test_a_misspelt_experiment_is_ragexps_one_line_and_no_mlflow_warning(mlflow_store, capsys,
                                                                           caplog):
    """A trial's ``compare --experiment ragexp-gardn`` printed MLflow's "Cannot retrieve
    experiment by name" WARNING above ragexp's line: the runs are now searched by id."""
    import logging

    evaluation_run("ragexp-notes", "n1")
    with caplog.at_level(logging.WARNING):
        for argv in (("compare", "--experiment", "ragexp-nots"),
                     ("report", "--experiment", "ragexp-nots", "--html",
                      str(mlflow_store.folder / "r.html"))):
            line = one_line_error(capsys, *argv)
            assert "'ragexp-nots'" in line and "ragexp-notes" in line
    assert not [r for r in caplog.records if r.name.startswith("mlflow")
                and r.levelno >= logging.WARNING], caplog.records
    assert tracking.experiment_ids("ragexp-nots") == []
    assert tracking.experiment_ids("ragexp-notes") == [
        tracking.client().get_experiment_by_name("ragexp-notes").experiment_id]
