"""Two real sweeps started at the same moment on a fresh sqlite store (several times): both
finish and every run is recorded once; a sweep whose callback cannot reach the store stops
instead of running jobs without a parent."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_runs import cli_env
from mlflow.tracking import MlflowClient
from workspaces import store_uri

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SWEEPS = (["retriever=dense,bm25"], ["retriever=hybrid", "chunking.max_words=60,200"])


def launch(tmp: Path, uri: str, name: str, *args: str) -> subprocess.Popen:
    env = cli_env(tmp, uri)
    return subprocess.Popen([sys.executable, "-m", "ragexp", "-m", "embedder=hash",
                             "reranker=none", *args, f"cache_dir={tmp / name / 'cache'}",
                             "progress=false", f"hydra.sweep.dir={tmp / name / 'multirun'}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


@pytest.mark.parametrize("attempt", range(3))
def test_two_sweeps_at_once_on_a_fresh_store(tmp_path, attempt):
    uri = store_uri(tmp_path)
    procs = [launch(tmp_path, uri, f"s{i}", *args) for i, args in enumerate(SWEEPS)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
        assert "sweep done: 2 finished" in out
    c = MlflowClient(uri)
    [exp] = [e for e in c.search_experiments() if e.name == "ragexp-handbook"]
    runs = c.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("ragexp.role") != "sweep"]
    assert len(parents) == 2 and len(children) == 4
    assert Counter(r.data.tags["mlflow.parentRunId"] for r in children) == {
        p.info.run_id: 2 for p in parents}
    assert len({r.data.tags["ragexp.config_hash"] for r in children}) == 4  # each job once
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.params["retriever.name"] for r in children} == {"dense", "bm25", "hybrid"}


def test_a_sweep_that_cannot_create_its_parent_stops_before_any_job(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    uri = store_uri(tmp_path / "a-file")  # nothing can be created there
    proc = launch(tmp_path, uri, "s", "retriever=dense,bm25")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 1
    assert "the sweep could not start, nothing was run" in out and "a-file" in out
    assert not (tmp_path / "s" / "multirun" / "0").exists()
