"""A sweep's parent run given where a run is served or read (a trial: ``ragexp ask --run
PARENT`` said "not a ragexp evaluation run?"): one line, exit 2, saying it is a sweep's parent
and naming its best and some of its finished runs. Fast: hand-made runs, no artifacts."""

from __future__ import annotations

import itertools

import pytest

from ragexp.cli import main as cli
from ragexp.tracking import store as tracking

STARTS = itertools.count(1_700_000_000_000, 1000)


def sweep(children: dict[str, str], best: str | None = None) -> tuple[str, list[str]]:
    """A FINISHED sweep parent with FINISHED children (``{ablation: status}``); the parent's
    ``ragexp.best_run`` names the child of ablation ``best``."""
    c = tracking.client()
    exp = tracking.ensure_experiment("ragexp-notes")
    parent = c.create_run(exp, start_time=next(STARTS), tags={"ragexp.role": "sweep"}).info.run_id
    ids = []
    for ablation, status in children.items():
        run = c.create_run(exp, start_time=next(STARTS), tags={
            "mlflow.parentRunId": parent, "ragexp.ablation": ablation,
            "ragexp.config_hash": ablation}).info.run_id
        c.set_terminated(run, status)
        ids.append(run)
        if ablation == best:
            c.set_tag(parent, "ragexp.best_run", run)
            c.set_tag(parent, "ragexp.best_label", ablation)
    c.set_terminated(parent, "FINISHED")
    return parent, ids


def one_line_error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if " mlflow." not in line]
    assert len(ours) == 1 and ours[0].startswith("error: ") and "Traceback" not in err, err
    return ours[0]


@pytest.mark.parametrize("argv", [["ask", "How do I install it?"], ["search", "install"]])
def test_asking_a_sweep_s_parent_names_its_best_and_its_runs(mlflow_store, capsys, argv):
    parent, (base, hybrid, custom, failed) = sweep(
        {"notes_baseline": "FINISHED", "notes_hybrid": "FINISHED", "custom": "FINISHED",
         "broken": "FAILED"}, best="notes_hybrid")
    line = one_line_error(capsys, *argv, "--run", parent[:8])
    assert f"run {parent} has no config.yaml: it is a sweep's parent run" in line
    assert f"its best, {hybrid[:8]} (notes_hybrid)" in line
    # newest first, finished only; a run of overrides by its id alone (no "custom")
    assert (f"one of its runs, {custom[:8]}, {hybrid[:8]} (notes_hybrid), "
            f"{base[:8]} (notes_baseline) ") in line
    assert failed[:8] not in line and "(custom)" not in line
    assert f"ragexp compare --parent {parent[:8]}" in line and "--run RUN_ID" in line


def test_a_sweep_without_best_or_finished_runs_says_so(mlflow_store, capsys):
    parent, _ = sweep({"broken": "FAILED"})
    line = one_line_error(capsys, "ask", "q?", "--run", parent)
    assert "it is a sweep's parent run" in line and "it has no finished run" in line
    # the parent's own artifact (its page) missing is said as before, with no such hint
    with pytest.raises(tracking.RunNotFound) as missing:
        tracking.artifact_path(parent, tracking.SWEEP_REPORT)
    assert "sweep's parent" not in str(missing.value)
    assert "it is FINISHED but has no report.html artifact" in str(missing.value)
