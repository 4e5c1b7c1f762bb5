"""One owner of a run's life (``tracking.tracked_run``), process ownership and clean-up of
abandoned runs (``lifecycle``), the code's identity in the run identity, and results kept on
disk (``outbox``). In-process, on temporary sqlite stores."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from workspaces import compose_config

from ragexp.index import stagestore
from ragexp.session import Session
from ragexp.tracking import lifecycle, outbox, runs
from ragexp.tracking import store as tracking


@pytest.fixture
def store(mlflow_store):
    """The test's own store with the experiment ``lifecycle``: ``(client, its id, folder)``."""
    exp = tracking.ensure_experiment("lifecycle")
    return MlflowClient(mlflow_store.uri), exp, mlflow_store.folder


def open_run(exp, out, **kw):
    return runs.tracked_run(exp, run_name="t", tags={"ragexp.config_hash": "h"},
                                params={"k": 10}, output_dir=str(out), overrides="k=10", **kw)


def status_file(out: Path) -> dict:
    return json.loads((out / tracking.STATUS_FILE).read_text())


def test_finished_run_has_end_time_status_file_and_record(store):
    c, exp, tmp = store
    with open_run(exp, tmp / "job") as run:
        assert c.get_run(run.run_id).info.status == "RUNNING"
        assert status_file(tmp / "job")["status"] == "RUNNING"
        run.log({"mrr": 0.5}, {"embedder.backend": "hash"},
                lambda out: (out / "config.yaml").write_text("k: 10\n"))
    info = c.get_run(run.run_id)
    assert info.info.status == "FINISHED" and info.info.end_time >= info.info.start_time
    assert info.data.metrics == {"mrr": 0.5} and info.data.params == {"k": "10"}
    assert info.data.tags[lifecycle.PID_TAG] == str(os.getpid())
    assert info.data.tags[lifecycle.HOST_TAG] == socket.gethostname()
    assert [a.path for a in c.list_artifacts(run.run_id)] == ["config.yaml"]
    assert status_file(tmp / "job") == {"status": "FINISHED", "run_id": run.run_id,
                                        "overrides": "k=10"}
    record = outbox.Outbox(tmp / "job" / outbox.RECORD_DIR).read()
    assert record["state"] == "logged" and record["metrics"] == {"mrr": 0.5}


def test_exception_ends_the_run_failed_with_error_tag_and_error_txt(store):
    c, exp, tmp = store
    with pytest.raises(ValueError, match="broken   stage"):
        with open_run(exp, tmp / "job") as run:
            raise ValueError("broken   stage\nsecond line")
    info = c.get_run(run.run_id)
    assert info.info.status == "FAILED" and info.info.end_time is not None
    assert info.data.tags["ragexp.error"] == "ValueError: broken stage second line"
    trace = Path(c.download_artifacts(run.run_id, "error.txt", str(tmp))).read_text()
    assert "ValueError: broken   stage" in trace
    assert status_file(tmp / "job")["status"] == "FAILED"


@pytest.mark.parametrize("exc,reason", [(KeyboardInterrupt(), "SIGINT"),
                                        (lifecycle.Interrupted(15), "stopped by SIGTERM")])
def test_interruption_ends_the_run_killed(store, exc, reason):
    c, exp, tmp = store
    with pytest.raises(type(exc)):
        with open_run(exp, tmp / "job") as run:
            raise exc
    info = c.get_run(run.run_id)
    assert info.info.status == "KILLED" and info.info.end_time is not None
    assert reason in info.data.tags["ragexp.error"]
    assert status_file(tmp / "job")["status"] == "KILLED"


def test_interrupted_is_not_an_exception_a_job_handler_could_swallow():
    assert not isinstance(lifecycle.Interrupted(15), Exception)
    assert lifecycle.interruption(KeyboardInterrupt()) and not lifecycle.interruption(
        ValueError())


def test_store_down_while_logging_keeps_results_on_disk_then_sync_logs_them(store, monkeypatch):
    c, exp, tmp = store

    def refuse(*a, **k):
        raise ConnectionError("connection refused")

    with pytest.raises(tracking.TrackingError) as info:
        with open_run(exp, tmp / "job") as run:
            with monkeypatch.context() as m:
                m.setattr(tracking, "log_batch", refuse)
                run.log({"mrr": 0.25, "ndcg_at_10": 0.5}, {"corpus_hash": "c"},
                        lambda out: (out / "per_question.csv").write_text("id\nq1\n"))
    box = tmp / "job" / outbox.RECORD_DIR
    assert str(box) in str(info.value) and "ragexp runs sync" in str(info.value)
    assert status_file(tmp / "job")["status"] == "PENDING_SYNC"
    assert c.get_run(run.run_id).data.metrics == {}
    # a clean-up meanwhile (process "gone") must not hide the results: sync finishes the run
    c.set_tag(run.run_id, "ragexp.error", "abandoned")
    assert [b.root for b in outbox.pending([tmp])] == [box]
    synced = outbox.sync([tmp], tracking.tracking_uri())
    assert [r for _, r in synced] == [run.run_id]
    info = c.get_run(run.run_id)
    assert info.info.status == "FINISHED"
    assert info.data.metrics == {"mrr": 0.25, "ndcg_at_10": 0.5}
    assert info.data.params == {"k": "10"} and info.data.tags["corpus_hash"] == "c"
    assert "ragexp.error" not in info.data.tags
    assert "per_question.csv" in [a.path for a in c.list_artifacts(run.run_id)]
    assert outbox.pending([tmp]) == []
    assert status_file(tmp / "job")["status"] == "FINISHED"


def test_sync_recreates_a_run_the_store_does_not_have(store, tmp_path):
    c, exp, tmp = store
    box = outbox.Outbox.create(tmp / "old")
    box.update(run_id="0" * 32, run_name="lost", experiment="lifecycle",
               tracking_uri=tracking.tracking_uri(), params={"k": 5}, metrics={"mrr": 0.1},
               tags={"ragexp.config_hash": "x", "mlflow.parentRunId": "gone"}, state="pending")
    (box.artifacts / "config.yaml").write_text("k: 5\n")
    other = outbox.Outbox.create(tmp / "elsewhere")
    other.update(run_id="1" * 32, tracking_uri="sqlite:////other.db", state="pending")
    [(_, run_id)] = outbox.sync([tmp], tracking.tracking_uri())
    run = c.get_run(run_id)
    assert run_id != "0" * 32 and run.info.status == "FINISHED"
    assert run.data.metrics == {"mrr": 0.1} and run.data.tags["ragexp.config_hash"] == "x"
    assert "mlflow.parentRunId" not in run.data.tags
    assert [b.root for b in outbox.pending([tmp])] == [other.root]  # other store: left alone


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_owner_state():
    me = lifecycle.process_tags()
    assert lifecycle.owner_state(me) == "alive"
    assert lifecycle.owner_state({**me, lifecycle.PID_TAG: str(dead_pid())}) == "gone"
    assert lifecycle.owner_state({**me, lifecycle.START_TAG: "1"}) == "gone"  # pid reused
    assert lifecycle.owner_state({**me, lifecycle.HOST_TAG: "elsewhere"}) == "unknown"
    assert lifecycle.owner_state({}) == "unknown"


@pytest.mark.slow
def test_close_abandoned_closes_only_runs_whose_process_is_gone(store):
    c, exp, _ = store
    me = lifecycle.process_tags()
    gone = c.create_run(exp, tags={**me, lifecycle.PID_TAG: str(dead_pid())}).info.run_id
    alive = c.create_run(exp, tags=me).info.run_id
    remote = c.create_run(exp, tags={**me, lifecycle.HOST_TAG: "elsewhere"}).info.run_id
    untagged = c.create_run(exp).info.run_id
    done = c.create_run(exp, tags={**me, lifecycle.PID_TAG: str(dead_pid())}).info.run_id
    c.set_terminated(done, "FINISHED")
    would, _ = lifecycle.close_abandoned(c, [exp], dry_run=True)
    assert [r.info.run_id for r in would] == [gone]
    assert c.get_run(gone).info.status == "RUNNING"
    closed, left = lifecycle.close_abandoned(c, [exp])
    assert [r.info.run_id for r in closed] == [gone]
    assert {r.info.run_id for r, _ in left} == {alive, remote, untagged}
    run = c.get_run(gone)
    assert run.info.status == "FAILED" and run.info.end_time is not None
    assert run.data.tags["ragexp.error"].startswith("abandoned: process")
    for run_id, status in ((alive, "RUNNING"), (remote, "RUNNING"), (untagged, "RUNNING"),
                           (done, "FINISHED")):
        assert c.get_run(run_id).info.status == status


def test_exit_hook_ends_registered_runs_failed_or_killed(store, monkeypatch):
    c, exp, _ = store
    ended = []
    monkeypatch.setattr(Session.current(), "open_runs", {"a": lambda s, r: ended.append((s, r))})
    monkeypatch.setattr(Session.current(), "signals", [])
    lifecycle.close_open_runs()
    assert ended == [("FAILED", "the process exited before the run was ended")]
    monkeypatch.setattr(Session.current(), "open_runs", {"b": lambda s, r: ended.append((s, r))})
    monkeypatch.setattr(Session.current(), "signals", [15])
    lifecycle.close_open_runs()
    assert ended[-1] == ("KILLED", "stopped by SIGTERM") and Session.current().open_runs == {}


def test_stopped_runs_counts_runs_ended_killed_and_runs_still_open(store, monkeypatch):
    """What ``python -m ragexp`` says of a stop: the runs it ends KILLED, not every run it
    ever opened (a stop after a sweep's end said its FINISHED runs were "ended KILLED")."""
    c, exp, tmp = store
    monkeypatch.setattr(Session.current(), "open_runs", {})
    monkeypatch.setattr(Session.current(), "killed_runs", [])
    with open_run(exp, tmp / "done"):
        pass
    assert lifecycle.stopped_runs() == 0
    with pytest.raises(KeyboardInterrupt):
        with open_run(exp, tmp / "stopped"):
            raise KeyboardInterrupt
    assert lifecycle.stopped_runs() == 1
    lifecycle.opened("parent", lambda status, reason: None)
    assert lifecycle.stopped_runs() == 2  # the exit hook ends it KILLED
    lifecycle.closed("parent", "FINISHED")
    assert lifecycle.stopped_runs() == 1


@pytest.mark.parametrize("ever, open_, stopped, said", [
    ([], {}, [], "no run was created, nothing was run"),
    (["p", "a", "b"], {}, [], "every run it started had ended before the stop (none is ended "
                              "KILLED)"),
    (["p", "a", "b"], {"p": None}, [], "1 of the 3 runs it started is ended KILLED; the others "
                                       "had ended before the stop"),
    (["p", "a", "b"], {"p": None}, ["b"], "2 of the 3 runs it started are ended KILLED; the "
                                          "others had ended before the stop"),
    (["p", "a"], {"p": None}, ["a"], "the runs it started are ended KILLED"),
])
def test_the_stop_summary_counts_the_runs_a_stop_ends(monkeypatch, ever, open_, stopped, said):
    """A stop between a sweep's last job and its end said "the runs it started are ended
    KILLED" of a parent KILLED and its jobs FINISHED."""
    monkeypatch.setattr(Session.current(), "opened_runs", ever)
    monkeypatch.setattr(Session.current(), "open_runs", dict(open_))
    monkeypatch.setattr(Session.current(), "killed_runs", stopped)
    assert lifecycle.stop_summary() == said


FINISHED_SCRIPT = """
import os, signal, sys, time
from ragexp.tracking import lifecycle
lifecycle.install_signal_handlers()
if sys.argv[1] == "finishing":
    lifecycle.finishing()
for _ in range(int(sys.argv[2])):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)
print("the work's end reached", flush=True)

class Teardown:  # freed as Python exits, after its exit hooks: a stop arrives meanwhile
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        print("teardown went on", flush=True)

kept = Teardown()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode,signals,code,out", [
    ("finishing", 0, 0, "the work's end reached\nteardown went on\n"),
    ("finishing", 1, 0, "the work's end reached\nteardown went on\n"),
    ("finishing", 2, -2, ""),  # a second stop insists: the default action at once
    ("working", 0, -2, "the work's end reached\n"),  # without it: killed as Python exits
])
def test_a_stop_once_the_work_is_done_changes_nothing(mode, signals, code, out):
    """``lifecycle.finishing``: a Ctrl-C after a sweep's end (its parent ended, "sweep done"
    printed) made the process die by SIGINT, silently, 5-30 ms out of every 50 after it."""
    done = subprocess.run([sys.executable, "-c", FINISHED_SCRIPT, mode, str(signals)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert (done.returncode, done.stdout) == (code, out), done.stderr[-1000:]
    if code == 0:
        assert done.stderr == ""  # no "Exception ignored", no traceback


def test_the_console_script_changes_nothing_on_a_stop_once_its_command_returned(monkeypatch):
    import signal
    import time

    from ragexp.cli import main as cli

    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli.process, "own", lambda: None)
    monkeypatch.setattr(Session.current(), "finishing", False)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.program() == 3 and Session.current().finishing
        os.kill(os.getpid(), signal.SIGINT)  # recorded, not raised
        time.sleep(0.05)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_code_identity_is_part_of_the_run_identity(tmp_path):
    resolved, data = {"k": 10, "force": False}, {"corpus_hash": "c"}
    assert tracking.config_hash(resolved, data, "0.1.0+src.a") != tracking.config_hash(
        resolved, data, "0.1.0+src.b")
    assert tracking.config_hash(resolved, data) == tracking.config_hash(
        resolved, data, tracking.code_identity())
    assert tracking.config_hash({**resolved, "force": True}, data) == tracking.config_hash(
        resolved, data)
    pkg = tmp_path / "ragexp"
    shutil.copytree(stagestore.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = stagestore.source_hash(pkg)
    assert before == stagestore.source_hash(stagestore.PACKAGE)
    # an edit in a subpackage changes the identity as one at the top would
    metrics = pkg / "evaluation" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\n# edited\n")
    assert stagestore.source_hash(pkg) != before
    assert tracking.code_identity().endswith(f"+src.{before[:12]}")


def test_store_lock_is_beside_a_sqlite_store(tmp_path):
    lock = tracking.store_lock(f"sqlite:///{tmp_path / 'm.db'}")
    assert lock.lock_file == str(tmp_path / "m.db.lock")
    assert type(tracking.store_lock("http://127.0.0.1:5000")).__name__ == "nullcontext"


def test_http_retries_are_bounded_unless_the_user_set_them(store, monkeypatch):
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")
    tracking.client()
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"


@pytest.mark.slow
def test_a_change_to_ragexp_reruns_a_finished_config(store, monkeypatch):
    from ragexp.run.app import run_logged

    c, exp, tmp = store
    cfg = compose_config("embedder=hash", "retriever=bm25", "reranker=none",
                         "experiment=lifecycle", f"cache_dir={tmp / 'c'}", "progress=false")
    first = run_logged(cfg)
    assert first["status"] == "FINISHED"
    assert run_logged(cfg) == {"status": "SKIPPED", "run_id": first["run_id"]}
    monkeypatch.setattr(tracking, "code_identity", lambda: "0.1.0+src.000000000000")
    second = run_logged(cfg)
    assert second["status"] == "FINISHED" and second["run_id"] != first["run_id"]
    tags = c.get_run(second["run_id"]).data.tags
    assert tags["ragexp.code"] == "0.1.0+src.000000000000"
    assert tags["ragexp.config_hash"] != c.get_run(first["run_id"]).data.tags[
        "ragexp.config_hash"]
    cfg.force = True
    assert run_logged(cfg)["run_id"] not in (first["run_id"], second["run_id"])


def test_signals_deferred_holds_a_signal_another_thread_receives_until_the_block_ends():
    """A Ctrl-C during the block is held and raised on leaving, even when the kernel hands it
    to another thread (blocking it in the main thread, as before, let a thread started earlier
    take it and the main thread raise inside the block: a store half-created)."""
    import signal
    import threading
    import time

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)  # signals unblocked in it
    other.start()
    reached = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # not lifecycle's
    try:
        with pytest.raises(KeyboardInterrupt):
            with lifecycle.signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)  # to the process: any thread may take it
                time.sleep(0.2)
                reached.append("the end of the block")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        stop.set()
        signal.signal(signal.SIGINT, before)
    assert reached == ["the end of the block"]


def test_a_half_created_sqlite_store_is_named_with_what_to_do():
    hint = tracking._half_created("sqlite:////w/mlruns/mlflow.db", RuntimeError(
        "(sqlite3.OperationalError) table _alembic_tmp_tags already exists"))
    assert "remove /w/mlruns/mlflow.db and run again" in hint
    assert tracking._half_created("sqlite:////w/mlruns/mlflow.db", RuntimeError("locked")) == ""
    assert tracking._half_created("http://host:5000", RuntimeError("already exists")) == ""


def test_a_second_signal_is_not_held():
    """Whoever stops twice insists: the second Ctrl-C in ``signals_deferred`` raises at once
    (a store that does not answer can keep a run's end waiting a minute)."""
    import signal
    import time

    reached = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with lifecycle.signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                reached.append("held the first")
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                reached.append("held the second too")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert reached == ["held the first"]


def test_a_stop_python_could_only_print_still_stops_the_run(store, tmp_path, monkeypatch):
    """SIGINT raised inside a weakref callback is printed ("Exception ignored in ...") and the
    process went on, to finish its run and exit 0; the signal was recorded, so ``tracked_run``
    creates no run after it, and ends ``KILLED`` a run during which it came."""
    c, exp, _ = store
    monkeypatch.setattr(Session.current(), "signals", [2])
    with pytest.raises(lifecycle.Interrupted):
        with open_run(exp, tmp_path / "never"):
            pass
    assert c.search_runs([exp]) == []
    monkeypatch.setattr(Session.current(), "signals", [])
    with pytest.raises(lifecycle.Interrupted):
        with open_run(exp, tmp_path / "stopped") as run:
            Session.current().signals.append(2)  # as _on_signal records it, its raise swallowed
    assert c.get_run(run.run_id).info.status == "KILLED"
    assert status_file(tmp_path / "stopped")["status"] == "KILLED"
