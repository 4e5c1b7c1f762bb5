"""A real ``mlflow server`` stopped in the middle of a sweep: the sweep stops within bounded
time with an error naming where the finished job's results are kept; once the server is back,
``ragexp runs sync`` logs them and the resumed sweep skips that job and runs the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tools.background import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
MLFLOW = str(Path(sys.executable).parent / "mlflow")


def start_server(tmp: Path, port: int) -> subprocess.Popen:
    """``mlflow server`` on loopback in its own process group (stopped with ``killpg``)."""
    proc = subprocess.Popen([MLFLOW, "server", "--backend-store-uri",
                             f"sqlite:///{tmp / 'server.db'}", "--artifacts-destination",
                             str(tmp / "server-artifacts"), "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_server_stopped_mid_sweep_loses_nothing(tmp_path):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_DISABLE_TELEMETRY": "true",
           "HF_HUB_OFFLINE": "1"}
    for key in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        env.pop(key, None)
    sweep = tmp_path / "multirun"
    # MiniLM on an empty cache: the first job computes for tens of seconds after it starts
    cmd = [sys.executable, "-m", "ragexp", "-m", "embedder=minilm", "reranker=none",
           "retriever=dense,hybrid", f"cache_dir={tmp_path / 'cache'}", "progress=false",
           f"hydra.sweep.dir={sweep}"]
    server = start_server(tmp_path, port)
    try:
        log = tmp_path / "sweep.log"
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"),
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        while "documents ->" not in log.read_text():  # job #0's run exists and it computes
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        stop_server(server)
        stopped = time.monotonic()
        proc.wait(timeout=600)
        waited = time.monotonic() - stopped
        out = log.read_text()
        assert proc.returncode != 0
        assert waited < 180, f"sweep took {waited:.0f}s to give up"  # MLflow's defaults: >10 min
        status = json.loads((sweep / "0" / "ragexp_status.json").read_text())
        record_dir = sweep / "0" / "mlflow_record"
        assert status["status"] == "PENDING_SYNC" and status["record"] == str(record_dir)
        assert f"ragexp runs sync {record_dir}" in out
        record = json.loads((record_dir / "record.json").read_text())
        assert record["state"] == "pending" and record["tracking_uri"] == uri
        assert record["metrics"]["ndcg_at_10"] > 0
        assert (record_dir / "artifacts" / "per_question.csv").exists()
        assert not (sweep / "1").exists()  # the sweep stopped: no job ran without a store

        server = start_server(tmp_path, port)  # back, same store, same address
        c = MlflowClient(uri)
        assert c.get_run(record["run_id"]).info.status == "RUNNING"
        synced = subprocess.run([sys.executable, "-m", "ragexp.cli.main", "runs", "sync", str(sweep)],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert synced.returncode == 0, synced.stderr
        assert f"as run {record['run_id']} (FINISHED)" in synced.stdout
        run = c.get_run(record["run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.metrics["ndcg_at_10"] == pytest.approx(record["metrics"]["ndcg_at_10"])
        assert "per_question.csv" in {a.path for a in c.list_artifacts(run.info.run_id)}

        resumed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=900)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert "1 finished, 1 skipped" in resumed.stdout
        exp = c.get_experiment_by_name("ragexp-handbook")
        parents = c.search_runs([exp.experiment_id], "tags.`ragexp.role` = 'sweep'")
        statuses = sorted(p.info.status for p in parents)
        assert statuses == ["FAILED", "FINISHED"]  # the first sweep's parent: closed abandoned
        new = next(p for p in parents if p.info.status == "FINISHED")
        assert json.loads(new.data.tags["ragexp.jobs"]) == {"finished": 1, "skipped": 1}
        assert c.get_run(record["run_id"]).data.tags[
            f"ragexp.in_sweep.{new.info.run_id}"] == "skipped"
    finally:
        stop_server(server)
