"""A sweep's parent run given where an evaluation run is needed, and one of a sweep's runs given
where its parent is (a trial: ``promote PARENT`` said "lacks metrics", ``confirm PARENT`` "were
evaluated on different data", ``gate PARENT`` FAILED with exit 1, ``compare --runs PARENT``
printed an empty row, ``compare --parent CHILD`` "no finished runs ... run an experiment
first"): every command refuses it in the same one line, exit 2, before any other check.
Fast: hand-made runs, no artifacts, so any later check would answer otherwise."""

from __future__ import annotations

import itertools

import pytest

from ragexp.cli import main as cli
from ragexp.tracking import store as tracking

STARTS = itertools.count(1_700_000_000_000, 1000)


def sweep(children: dict[str, str], best: str | None = None,
          reused: str | None = None) -> tuple[str, list[str]]:
    """A FINISHED sweep parent (tag ``ragexp.role=sweep``, as ``run.sweep`` sets it) with
    children (``{ablation: status}``, started in that order); the parent's
    ``ragexp.best_run`` names the child of ablation ``best``; ``reused``: the ablation of one
    more FINISHED run, no child, that the sweep reused (tag ``ragexp.in_sweep.<parent>``)."""
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
    if reused:
        run = c.create_run(exp, start_time=next(STARTS), tags={
            f"ragexp.in_sweep.{parent}": "skipped", "ragexp.ablation": reused,
            "ragexp.config_hash": reused}).info.run_id
        c.set_terminated(run, "FINISHED")
        ids.append(run)
    c.set_terminated(parent, "FINISHED")
    return parent, ids


def one_line_error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if " mlflow." not in line]
    assert len(ours) == 1 and ours[0].startswith("error: ") and "Traceback" not in err, err
    return ours[0]


@pytest.fixture(scope="module")
def trial(module_mlflow_store):
    """The trial's sweep: four jobs, three FINISHED, the best ``notes_hybrid``."""
    parent, (base, hybrid, custom, failed) = sweep(
        {"notes_baseline": "FINISHED", "notes_hybrid": "FINISHED", "custom": "FINISHED",
         "broken": "FAILED"}, best="notes_hybrid")
    return {"parent": parent, "base": base, "hybrid": hybrid, "custom": custom,
            "failed": failed}


COMMANDS = [  # each place a run id comes in, "P" the parent, "C" one of its runs
    ["ask", "How do I install it?", "--run", "P"], ["search", "install", "--run", "P"],
    ["serve", "--run", "P"], ["promote", "P"], ["promote", "--gate", "P"], ["gate", "P"],
    ["gate", "C", "--against", "P"], ["confirm", "P"], ["confirm", "C", "--baseline", "P"],
    ["compare", "--runs", "P", "C"], ["compare", "--baseline", "P"],
    ["compare", "--parent", "P", "--baseline", "P"], ["traces", "mine", "--run", "P"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_refuses_a_sweep_s_parent_in_the_same_line(trial, capsys, argv):
    p, base, hybrid, custom = (trial[k] for k in ("parent", "base", "hybrid", "custom"))
    ids = {"P": p[:8], "C": base}
    line = one_line_error(capsys, *(ids.get(a, a) for a in argv))
    # its best first, then its other FINISHED runs newest first; a run of overrides alone by
    # its id ("custom" says nothing); the FAILED run is counted, never offered
    assert line == (f"error: {p[:8]} is a sweep's parent run (4 runs, 3 finished), not an "
                    f"evaluation run: pick one of its runs, e.g. its best {hybrid[:8]} "
                    f"(notes_hybrid), or {custom[:8]}, {base[:8]} (notes_baseline); "
                    f"`ragexp compare --parent {p[:8]}` lists them")


def test_the_gate_refuses_a_parent_rather_than_failing_it(trial, capsys):
    """``gate PARENT`` exited 1, the code CI reads as a regression: now 2, no verdict."""
    assert cli.main(["gate", trial["parent"], "--against", trial["base"]]) == 2
    captured = capsys.readouterr()
    assert "FAIL" not in captured.out + captured.err and captured.out == ""


@pytest.mark.parametrize("argv", [
    ["compare", "--parent", "C"], ["questions", "plan", "--parent", "C"],
    ["promote", "--cheapest-tied", "C"], ["report", "--html", "OUT", "--parent", "C"]],
    ids=" ".join)
def test_a_sweep_s_run_given_as_its_parent_names_the_sweep(trial, capsys, tmp_path, argv):
    p, base = trial["parent"], trial["base"]
    ids = {"C": base[:8], "OUT": str(tmp_path / "page.html")}
    line = one_line_error(capsys, *(ids.get(a, a) for a in argv))
    assert line == (f"error: {base[:8]} (notes_baseline) is a run of sweep {p[:8]}, not a "
                    f"sweep's parent run: name its sweep, {p[:8]}, instead (`ragexp compare "
                    f"--parent {p[:8]}` lists the sweep's runs)")
    assert not (tmp_path / "page.html").exists()


def test_a_parent_without_a_best_names_its_newest_runs_and_the_reused_one(mlflow_store,
                                                                          capsys):
    parent, ids = sweep({f"job{i}": "FINISHED" for i in range(5)}, reused="old")
    line = one_line_error(capsys, "promote", parent)
    # six runs: five children and the one it reused, the newest three named, then how many more
    assert line == (f"error: {parent[:8]} is a sweep's parent run (6 runs), not an evaluation "
                    f"run: pick one of its runs, e.g. {ids[5][:8]} (old), or {ids[4][:8]} "
                    f"(job4), {ids[3][:8]} (job3), ... and 3 more; `ragexp compare --parent "
                    f"{parent[:8]}` lists them")


def test_a_sweep_without_finished_runs_says_so(mlflow_store, capsys):
    parent, _ = sweep({"broken": "FAILED"})
    line = one_line_error(capsys, "ask", "q?", "--run", parent)
    assert line == (f"error: {parent[:8]} is a sweep's parent run (1 run, 0 finished), not an "
                    f"evaluation run: none of its runs finished, so there is none to pick "
                    f"instead; rerun the sweep")
    # the parent's own artifact (its page) missing is said as before, with no such hint
    with pytest.raises(tracking.RunNotFound) as missing:
        tracking.artifact_path(parent, tracking.SWEEP_REPORT)
    assert "sweep's parent" not in str(missing.value)
    assert "it is FINISHED but has no report.html artifact" in str(missing.value)
    # any other artifact: the refusal itself, wherever a run's files are read
    with pytest.raises(tracking.SweepParentRun, match="none of its runs finished"):
        tracking.artifact_path(parent, "per_question.csv")


@pytest.mark.parametrize(("jobs", "parent", "warning"), [
    (["proj", "proj"], "proj", None),
    ([], "own", None),
    (["proj", "ragexp-handbook", "proj"], "own",
     "this sweep's jobs go to 2 experiments (2 job(s) to 'proj', 1 job(s) to 'ragexp-handbook'); "
     "its parent run is in 'own': set experiment=NAME to keep them together")])
def test_the_parent_goes_where_its_jobs_go_and_a_split_is_said(jobs, parent, warning):
    from ragexp.run.sweep import parent_experiment

    assert parent_experiment(jobs, "own") == (parent, warning)
