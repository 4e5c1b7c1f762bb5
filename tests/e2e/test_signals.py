"""Stopping ``python -m ragexp`` for real (a subprocess): SIGTERM and SIGINT end every run it
started ``KILLED`` with an end time; after ``kill -9`` the runs left ``RUNNING`` are closed by
``ragexp runs cleanup`` and by the next sweep, and nothing of a live process is touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runs import cli_env
from mlflow.tracking import MlflowClient
from workspaces import store_uri

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# MiniLM with an empty cache embeds for tens of seconds: long enough to be stopped mid-run.
SLOW_JOB = ["embedder=minilm", "reranker=none"]


def start(tmp: Path, *args: str) -> subprocess.Popen:
    log = open(tmp / f"log-{time.monotonic_ns()}.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "ragexp", *args, f"cache_dir={tmp / 'cache'}",
                             "progress=false"], cwd=ROOT, env=cli_env(tmp), stdout=log,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragexp.cli.main", *args], cwd=ROOT, env=cli_env(tmp),
                          capture_output=True, text=True, timeout=300)


def wait_running(status: Path, proc: subprocess.Popen, timeout: float = 300) -> str:
    """The run id once the job's status file says RUNNING."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if status.exists():
            s = json.loads(status.read_text())
            if s["status"] == "RUNNING":
                return s["run_id"]
            raise AssertionError(f"job ended before it could be stopped: {s}")
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        time.sleep(0.2)
    raise AssertionError("no RUNNING status in time")


def store(tmp: Path) -> MlflowClient:
    return MlflowClient(store_uri(tmp))


def all_runs(tmp: Path):
    c = store(tmp)
    exp = c.get_experiment_by_name("ragexp-handbook")
    return c.search_runs([exp.experiment_id])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_a_single_run_killed(tmp_path, sig):
    proc = start(tmp_path, *SLOW_JOB, f"hydra.run.dir={tmp_path / 'out'}")
    run_id = wait_running(tmp_path / "out" / "ragexp_status.json", proc)
    time.sleep(1)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) in (128 + sig, -sig)  # exit status says "stopped by sig"
    run = store(tmp_path).get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.info.end_time is not None and run.info.end_time >= run.info.start_time
    assert signal.Signals(sig).name in run.data.tags["ragexp.error"]
    status = json.loads((tmp_path / "out" / "ragexp_status.json").read_text())
    assert status["status"] == "KILLED" and status["run_id"] == run_id


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_a_sweep_child_and_parent_killed(tmp_path, sig):
    sweep = tmp_path / "multirun"
    proc = start(tmp_path, "-m", *SLOW_JOB, "retriever=dense,hybrid", f"hydra.sweep.dir={sweep}")
    child = wait_running(sweep / "0" / "ragexp_status.json", proc)
    time.sleep(1)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) in (128 + sig, -sig)  # exit status says "stopped by sig"
    runs = {r.info.run_id: r for r in all_runs(tmp_path)}
    assert len(runs) == 2  # the parent and the one job started; job #1 never began
    parent = next(r for r in runs.values() if r.data.tags.get("ragexp.role") == "sweep")
    assert runs[child].data.tags["mlflow.parentRunId"] == parent.info.run_id
    for run in (runs[child], parent):
        assert run.info.status == "KILLED" and run.info.end_time is not None
    assert json.loads(parent.data.tags["ragexp.jobs"]) == {"killed": 1}
    assert signal.Signals(sig).name in parent.data.tags["ragexp.error"]
    assert not (sweep / "1").exists()


def test_kill_9_then_cleanup_closes_abandoned_runs_and_the_next_sweep_does_too(tmp_path):
    sweep = tmp_path / "multirun"
    proc = start(tmp_path, "-m", *SLOW_JOB, "retriever=dense,hybrid", f"hydra.sweep.dir={sweep}")
    child = wait_running(sweep / "0" / "ragexp_status.json", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    runs = all_runs(tmp_path)
    assert sorted(r.info.status for r in runs) == ["RUNNING", "RUNNING"]
    parent = next(r.info.run_id for r in runs if r.data.tags.get("ragexp.role") == "sweep")

    dry = cli(tmp_path, "runs", "cleanup", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would close {child}" in dry.stdout and f"would close {parent}" in dry.stdout
    assert {r.info.status for r in all_runs(tmp_path)} == {"RUNNING"}
    done = cli(tmp_path, "runs", "cleanup", "--experiment", "ragexp-handbook")
    assert done.returncode == 0, done.stderr
    assert "2 run(s) closed, 0 still running" in done.stdout
    for run in all_runs(tmp_path):
        assert run.info.status == "FAILED" and run.info.end_time is not None
        assert run.data.tags["ragexp.error"].startswith(
            f"abandoned: process {run.data.tags['ragexp.pid']}")

    # a single run killed hard, then a new sweep on the experiment closes it
    single = start(tmp_path, *SLOW_JOB, f"hydra.run.dir={tmp_path / 'single'}")
    lost = wait_running(tmp_path / "single" / "ragexp_status.json", single)
    single.send_signal(signal.SIGKILL)
    single.wait(timeout=60)
    again = subprocess.run([sys.executable, "-m", "ragexp", "-m", "embedder=hash", "reranker=none",
                            f"cache_dir={tmp_path / 'cache'}", "progress=false",
                            f"hydra.sweep.dir={tmp_path / 'again'}"], cwd=ROOT, env=cli_env(tmp_path),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"closed abandoned run {lost}" in again.stdout
    run = store(tmp_path).get_run(lost)
    assert run.info.status == "FAILED" and "abandoned" in run.data.tags["ragexp.error"]


def test_ctrl_c_while_a_sweep_composes_says_nothing_was_run_without_a_traceback(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) before any run exists:
    here while 400 jobs compose in the forked child (``run.forked``), which takes tens of
    seconds. Exit 130 (or death by SIGINT), one line, no traceback, no store, no child left."""
    values = ",".join(str(k) for k in range(100, 500))
    proc = start(tmp_path, "-m", f"k={values}", "embedder=hash", "retriever=bm25",
                 f"hydra.sweep.dir={tmp_path / 'multirun'}")
    time.sleep(4)
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) in (130, -signal.SIGINT)
    out = next(tmp_path.glob("log-*.txt")).read_text()
    assert "ragexp: stopped by SIGINT; no run was created, nothing was run" in out
    assert "Traceback" not in out
    assert not Path(store_uri(tmp_path).removeprefix("sqlite:///")).exists()
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
    assert left.stdout.strip() == ""  # the composing child is gone too


def test_ctrl_c_stops_a_ragexp_command_in_one_line(tmp_path):
    """``ragexp embed`` (MiniLM, empty cache: seconds of embedding) stopped by Ctrl-C once it
    embeds: exit 130 (or death by SIGINT, which a shell also reads as 130: CPython ends so
    now and then after the handled stop), ``ragexp: stopped by SIGINT``, no traceback
    (``cli.main``)."""
    log = tmp_path / "embed.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ragexp.cli.main", "embed",
                                 "embedder=minilm", "chunking.max_words=60",
                                 f"cache_dir={tmp_path / 'cache'}"], cwd=ROOT,
                                env=cli_env(tmp_path), stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while "embed passages" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) in (130, -signal.SIGINT), log.read_text()[-2000:]
    text = log.read_text()
    assert "ragexp: stopped by SIGINT" in text and "Traceback" not in text


def test_ctrl_c_while_mlflow_creates_the_store_leaves_it_usable(tmp_path):
    """SIGINT 0.2 s into MLflow's creation of a new sqlite store (its tables, in migrations)
    waits for the store to be whole (``store.client`` under ``signals_deferred``): the first
    run says nothing was run, the next run in the same folder uses the store. Before, 4 in 5
    such stops left tables half-made (``table _alembic_tmp_tags already exists``) and every
    later run failed."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "MLFLOW_TRACKING_URI"}
    args = [sys.executable, "-m", "ragexp", "embedder=hash", "retriever=bm25",
            f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    proc = subprocess.Popen(args, cwd=ws, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "Creating initial MLflow database tables" in line:
            time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            break
    seen.append(proc.stdout.read())
    assert proc.wait(timeout=60) in (130, -signal.SIGINT), "".join(seen)[-2000:]
    assert "Traceback" not in "".join(seen)
    again = subprocess.run(args, cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.startswith("run ") or "\nrun " in again.stdout


def test_a_sweep_whose_reader_left_finishes_every_job_and_counts_each_once(tmp_path):
    """``python -m ragexp -m ... | head -2``: the reader leaves after two lines. Each job's
    result line then met a closed pipe and the job was counted FAILED although its run had
    finished (``run.console.say``): now every job finishes, and is counted once."""
    sweep = tmp_path / "multirun"
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", "k=100,101,102,103",
                             "embedder=hash", "retriever=bm25", f"hydra.sweep.dir={sweep}",
                             f"cache_dir={tmp_path / 'cache'}", "progress=false"], cwd=ROOT,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()  # the reader leaves, as head does
    assert proc.wait(timeout=300) == 0 and all(head)
    runs = all_runs(tmp_path)
    parent = next(r for r in runs if r.data.tags.get("ragexp.role") == "sweep")
    assert json.loads(parent.data.tags["ragexp.jobs"]) == {"finished": 4}
    assert parent.info.status == "FINISHED"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_as_a_sweep_ends_leaves_no_run_running(tmp_path, sig):
    """The stop comes as the sweep writes its page and ends its parent: the parent was taken
    off the exit hook's list before it was ended, and stayed RUNNING (4 times in 4). Now it
    ends with its jobs' outcome, or KILLED, never RUNNING."""
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", "k=100,101",
                             "embedder=hash", "retriever=bm25",
                             f"hydra.sweep.dir={tmp_path / 'multirun'}",
                             f"cache_dir={tmp_path / 'cache'}", "progress=false"], cwd=ROOT,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        if "wrote report.html" in line:
            os.killpg(proc.pid, sig)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=120) in (0, 128 + sig)  # never killed by the signal itself
    runs = all_runs(tmp_path)
    assert len(runs) == 3 and not [r for r in runs if r.info.status == "RUNNING"]
    parent = next(r for r in runs if r.data.tags.get("ragexp.role") == "sweep")
    assert parent.info.status in ("FINISHED", "KILLED") and parent.info.end_time is not None
    if parent.info.status == "FINISHED":  # then no run was ended KILLED, and none is said to be
        assert "are ended KILLED" not in rest


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03])
def test_a_stop_after_sweep_done_changes_nothing_and_says_no_run_was_killed(tmp_path, delay):
    """Ctrl-C just after "sweep done" (the parent ended): the process died by SIGINT without a
    word (exit -2), 5-30 ms after it; a stop still inside the sweep's last step said "the
    runs it started are ended KILLED" of runs that were FINISHED. Now: exit 0, or 130 saying
    every run had ended; every run as the sweep ended it."""
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", "k=100,101",
                             "embedder=hash", "retriever=bm25", "sweep_report=false",
                             f"hydra.sweep.dir={tmp_path / 'multirun'}",
                             f"cache_dir={tmp_path / 'cache'}", "progress=false"], cwd=ROOT,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        if line.startswith("sweep done"):
            time.sleep(delay)
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest = proc.stdout.read()
    code = proc.wait(timeout=120)
    assert code in (0, 130), (code, rest)
    assert "Traceback" not in rest and "Exception ignored" not in rest
    if code == 130:
        assert rest.strip().endswith("every run it started had ended before the stop "
                                     "(none is ended KILLED)")
    assert sorted(r.info.status for r in all_runs(tmp_path)) == ["FINISHED"] * 3
