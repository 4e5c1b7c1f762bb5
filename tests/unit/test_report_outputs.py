"""`ragexp report --html/--chart`: output paths refused before any work (one line, exit 2,
nothing written), outputs written all or none, and the sweep chosen by default (the latest whose
parent run is FINISHED). Fast: no sweep is run; the store holds hand-made parent runs."""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from ragexp.cli import main as cli
from ragexp.errors import NotFound
from ragexp.report import html as report_html
from ragexp.report import sweep_data
from ragexp.tracking import store as tracking

EXPERIMENT = "ragexp-handbook"


def files(folder: Path) -> set[str]:
    """Every file under ``folder``, relative, ignoring the store's own database."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith("mlflow.db")}


def refused(capsys, *argv: str) -> str:
    """Run ``ragexp report ARGV``; assert exit 2 and a one-line ``error: ...``; its text."""
    assert cli.main(["report", *argv]) == 2
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if " mlflow." not in line]  # MLflow's own log
    assert len(ours) == 1 and ours[0].startswith("error: ") and "Traceback" not in err, err
    return ours[0]


STARTS = itertools.count(1_700_000_000_000, 1000)  # ms: each parent a second after the last


def parent_run(name: str, status: str) -> str:
    """A sweep parent run (tag ``ragexp.role=sweep``) ended with ``status``, started a second
    after the previous one made here (so "latest" is unambiguous)."""
    c = tracking.client()
    run = c.create_run(tracking.ensure_experiment(EXPERIMENT), start_time=next(STARTS),
                       run_name=name, tags={"ragexp.role": "sweep"}).info.run_id
    c.set_terminated(run, status)
    return run


# --- paths refused before the sweep is looked up (the store has no sweep at all) -----------

def test_a_folder_as_html_is_refused_and_nothing_is_written(mlflow_store, capsys, monkeypatch):
    tmp = mlflow_store.folder
    monkeypatch.chdir(tmp)
    (tmp / "ro").mkdir()
    before = files(tmp)
    err = refused(capsys, "--html", "ro", "--no-upload")
    assert "--html ro" in err and "folder" in err
    (tmp / "docs").mkdir()
    err = refused(capsys, "--chart", "conf.svg", "--html", "docs")
    assert "--html docs" in err
    assert files(tmp) == before  # no ro.part, docs.part nor conf.svg


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_chart_in_an_unwritable_or_missing_folder_is_refused(mlflow_store, capsys):
    err = refused(capsys, "--chart", "/proc/x.svg")
    assert "--chart /proc/x.svg" in err and "/proc" in err
    missing = mlflow_store.folder / "nowhere" / "x.svg"
    err = refused(capsys, "--chart", str(missing), "--html", str(mlflow_store.folder / "r.html"))
    assert f"--chart {missing}" in err and "does not exist" in err
    assert not missing.parent.exists() and not (mlflow_store.folder / "r.html").exists()


def test_chart_and_html_naming_one_file_are_refused(mlflow_store, capsys, monkeypatch):
    monkeypatch.chdir(mlflow_store.folder)
    err = refused(capsys, "--chart", "w1.svg", "--html", "w1.svg")
    assert "same file" in err and "w1.svg" in err
    # the same file spelt two ways is still one file (paths compared resolved)
    refused(capsys, "--chart", "w1.svg", "--html", str(mlflow_store.folder / "sub" / ".." /
                                                       "w1.svg"))
    assert not (mlflow_store.folder / "w1.svg").exists()


def test_a_png_chart_is_refused_before_the_sweep_lookup(mlflow_store, capsys):
    # the store has no sweep: a lookup first would say "no sweep" instead
    err = refused(capsys, "--chart", str(mlflow_store.folder / "wins.png"))
    assert "name the file wins.svg" in err and "sweep" not in err


# --- outputs written all or none --------------------------------------------------------

def fake_sweep(monkeypatch, n_runs: int = 2) -> None:
    """``write`` without MLflow: a sweep of ``n_runs`` runs whose page and chart are fixed."""
    monkeypatch.setattr(report_html.sweep_data, "load",
                        lambda parent: SimpleNamespace(runs=pd.DataFrame({"r": range(n_runs)})))
    monkeypatch.setattr(report_html, "build", lambda data: ("<html>page</html>", "<svg/>"))


def test_a_write_failing_midway_leaves_no_output_and_no_part_file(tmp_path, monkeypatch):
    fake_sweep(monkeypatch)
    real, calls = os.replace, []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(report_html.InvalidValue, match="r.html.*nothing was written"):
        report_html.write("p" * 32, tmp_path / "r.html", tmp_path / "w.svg", upload=False)
    assert len(calls) == 2  # the chart was moved in, then the page failed
    assert files(tmp_path) == set()  # the chart taken back out; no temporary left


def test_write_replaces_both_outputs_and_says_so(tmp_path, monkeypatch):
    fake_sweep(monkeypatch, n_runs=1)
    (tmp_path / "r.html").write_text("old")
    line = report_html.write("p" * 32, tmp_path / "r.html", tmp_path / "w.svg", upload=False)
    assert line == f"sweep pppppppp (1 run): wrote {tmp_path / 'w.svg'}, {tmp_path / 'r.html'}"
    assert (tmp_path / "r.html").read_text() == "<html>page</html>"
    assert (tmp_path / "w.svg").read_text() == "<svg/>"
    assert files(tmp_path) == {"r.html", "w.svg"}


# --- the default sweep: the latest whose parent run FINISHED -----------------------------

def test_latest_sweep_passes_over_a_failed_newer_one(mlflow_store):
    older = parent_run("older", "FINISHED")
    parent_run("one job failed", "FAILED")
    parent_run("stopped", "KILLED")
    assert sweep_data.latest_sweep(EXPERIMENT) == older
    newest = parent_run("newest", "FINISHED")
    assert sweep_data.latest_sweep(EXPERIMENT) == newest


def test_no_finished_sweep_names_the_latest_and_its_status(mlflow_store, capsys):
    with pytest.raises(NotFound, match="no sweep in experiment"):
        sweep_data.latest_sweep(EXPERIMENT)
    parent_run("first", "KILLED")
    failed = parent_run("second", "FAILED")
    with pytest.raises(NotFound) as exc:
        sweep_data.latest_sweep(EXPERIMENT)
    assert f"{failed}, is FAILED" in str(exc.value) and f"--parent {failed}" in str(exc.value)
    err = refused(capsys, "--html", str(mlflow_store.folder / "r.html"), "--no-upload")
    assert f"--parent {failed}" in err and not (mlflow_store.folder / "r.html").exists()


# --- failed jobs: named on the page ------------------------------------------------------

def test_failed_jobs_from_status_files_and_child_runs(mlflow_store):
    """Job 0 finished, job 1 failed before its run existed (a range error: a status file
    only), job 2's file still says RUNNING while its run was KILLED (the store decides), and a
    FAILED child no file names (a killed worker): three failed jobs, files first."""
    c = tracking.client()
    sweep_dir = mlflow_store.folder / "s"
    parent = parent_run("sweep", "FAILED")
    c.set_tag(parent, "ragexp.sweep_dir", str(sweep_dir))
    exp = c.get_run(parent).info.experiment_id

    def child(overrides: str, status: str, error: str) -> str:
        run = c.create_run(exp, start_time=next(STARTS), tags={
            "mlflow.parentRunId": parent, "ragexp.overrides": overrides,
            "ragexp.error": error}).info.run_id
        c.set_terminated(run, status)
        return run

    done = child("bm25.k1=0.9", "FINISHED", "")
    killed = child("bm25.k1=1.5", "KILLED", "KILLED: sweep stopped by SIGTERM")
    lost = child("bm25.k1=2.0", "FAILED", "EmbedderError: no model")
    for i, status in enumerate([
            {"status": "FINISHED", "run_id": done, "overrides": "bm25.k1=0.9"},
            {"status": "FAILED", "run_id": None, "overrides": "bm25.k1=-1",
             "error": "bm25.k1=-1: must be >= 0"},
            {"status": "RUNNING", "run_id": killed, "overrides": "bm25.k1=1.5"}]):
        (sweep_dir / str(i)).mkdir(parents=True)
        (sweep_dir / str(i) / tracking.STATUS_FILE).write_text(json.dumps(status))
    got = sweep_data.failed_jobs(parent)
    assert got == [
        sweep_data.FailedJob("bm25.k1=-1", "FAILED", "bm25.k1=-1: must be >= 0", None),
        sweep_data.FailedJob("bm25.k1=1.5", "KILLED", "KILLED: sweep stopped by SIGTERM",
                             killed),
        sweep_data.FailedJob("bm25.k1=2.0", "FAILED", "EmbedderError: no model", lost)]
    section = "\n".join(report_html.failed_jobs_section(SimpleNamespace(failed_jobs=got,
                                                                         never_ran=0)))
    assert "3 jobs of this sweep did not finish and are not on this page" in section
    assert section.count('data-k="failedjob|') == 3 and "no run" in section
    assert report_html.failed_jobs_section(SimpleNamespace(failed_jobs=[], never_ran=0)) == []
    # a sweep of 6 jobs stopped after these 4 (3 status files, 1 run no file names): the page
    # said only that 3 did not finish, as if the sweep were whole
    c.set_tag(parent, "ragexp.n_jobs", "6")
    assert sweep_data.never_ran(c.get_run(parent)) == 2
    section = "\n".join(report_html.failed_jobs_section(SimpleNamespace(
        failed_jobs=got, never_ran=2, parent_tags={"ragexp.n_jobs": "6"})))
    assert "2 of the sweep's 6 jobs never ran (the sweep stopped before them): this sweep " \
           "is incomplete." in section
    c.set_tag(parent, "ragexp.n_jobs", "4")
    assert sweep_data.never_ran(c.get_run(parent)) == 0


@pytest.mark.slow
def test_a_sweep_with_a_failed_job_names_it_on_its_page(mlflow_store, tmp_path, capsys):
    """A real sweep whose ``embedder=bge`` job fails at once offline: its parent is FAILED
    (so it is no default choice), and its page says "1 run" and lists the failed job with the
    run's own ``ragexp.error``, with or without the sweep folder."""
    from cli_runs import run_app

    tmp = mlflow_store.folder
    proc = run_app(tmp, "-m", "embedder=hash,bge", "embedder.dim=256",
                   f"hydra.sweep.dir={tmp / 's'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    c = tracking.client()
    parent = sweep_data.sweep_parents(EXPERIMENT).iloc[0]
    assert parent["status"] == "FAILED"
    with pytest.raises(NotFound, match=f"{parent['run_id']}, is FAILED"):
        sweep_data.latest_sweep(EXPERIMENT)
    bad = c.search_runs([parent["experiment_id"]], f"tags.`mlflow.parentRunId` = "
                        f"'{parent['run_id']}' and attributes.status = 'FAILED'")
    assert len(bad) == 1 and bad[0].data.params["embedder.name"] != "hash"
    error = bad[0].data.tags["ragexp.error"]
    assert error.startswith("EmbedderError")
    for where in ("sweep folder", "store only"):
        if where == "store only":
            shutil.rmtree(tmp / "s")
        out = tmp_path / f"{where.replace(' ', '_')}.html"
        assert cli.main(["report", "--html", str(out), "--parent", parent["run_id"],
                         "--no-upload"]) == 0
        assert "(1 run): wrote" in capsys.readouterr().out
        page = out.read_text()
        assert "1 run on the" in page and "1 runs" not in page
        row = re.search(r'<tr data-k="failedjob\|0">(.*?)</tr>', page).group(1)
        cells = [html.unescape(t) for t in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        assert "embedder=bge" in cells[0] and cells[1] == "FAILED", (where, cells)
        assert error.startswith(cells[2]) and len(cells[2]) >= 100, (where, cells)
        assert cells[3] == bad[0].info.run_id[:8]
        assert 'data-k="failedjob|1"' not in page


# --- the sweep's runs frame: one frame, not fragmented --------------------------------------

def sweep_job(parent: str, keys: list[str], skipped: bool = False) -> str:
    """A FINISHED job of sweep ``parent`` (its child, or with ``skipped`` a run the sweep
    linked as skipped), logging ``keys`` as params and metrics in that order."""
    c = tracking.client()
    link = {f"ragexp.in_sweep.{parent}": "skipped"} if skipped else {"mlflow.parentRunId": parent}
    run = c.create_run(tracking.ensure_experiment(EXPERIMENT), start_time=next(STARTS),
                       tags={"ragexp.config_hash": f"h{next(STARTS)}", "ragexp.ablation": "a",
                             **link}).info.run_id
    tracking.log_batch(run, metrics={f"m.{k}": 0.5 for k in keys},
                       params={f"p.{k}": "x" for k in keys})
    c.set_terminated(run, "FINISHED")
    return run


def test_a_sweep_with_skipped_jobs_reads_into_one_unfragmented_frame(mlflow_store):
    """A sweep rerun with skipped jobs: ``ragexp report --html`` printed pandas'
    PerformanceWarning ("DataFrame is highly fragmented"): its two searches' frames held the
    same 287 keys in other orders, and their concatenation one block per metric (163)."""
    parent = parent_run("sweep", "FINISHED")
    keys = [f"k{i:03d}" for i in range(150)]
    jobs = [sweep_job(parent, keys), sweep_job(parent, keys[::-1], skipped=True),
            sweep_job(parent, keys[75:] + keys[:75] + ["extra"], skipped=True)]
    with pytest.warns(pd.errors.PerformanceWarning):  # the plain concatenation warned
        pd.concat([tracking_frame(parent, "mlflow.parentRunId", parent),
                   tracking_frame(parent, f"ragexp.in_sweep.{parent}", "skipped")],
                  ignore_index=True).assign(label="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = sweep_data._frame(EXPERIMENT, parent)  # adds the label column
        df.assign(another=1)
    assert sorted(df["run_id"]) == sorted(jobs) and len(df.columns) == len(set(df.columns))
    assert df["metrics.m.k007"].dtype == float and (df["metrics.m.k007"] == 0.5).all()
    assert df["metrics.m.extra"].isna().sum() == 2  # only the third job logged it
    assert sum(not b.is_extension for b in df._mgr.blocks) <= 3


def tracking_frame(parent: str, tag: str, value: str) -> pd.DataFrame:
    """``search_runs`` of the finished runs tagged ``tag=value`` (one of ``runs_frame``'s)."""
    # defer heavy import
    import mlflow

    return mlflow.search_runs(experiment_ids=tracking.experiment_ids(EXPERIMENT),
                              filter_string=f"attributes.status = 'FINISHED' and "
                                            f"tags.`{tag}` = '{value}'")
