"""What one job of a sweep costs the tracking store (issue #21 item 3): a two-job multirun in a
child process whose ``MlflowClient`` methods count their calls per run, so a change that logs
metric by metric, uploads artifacts file by file, calls ``log_table`` beside them or opens a
store per job fails here."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import mlflow
import pytest
from cli_runs import ROOT, cli_env

# ``python -m ragexp ARGS`` with every call of METHODS counted by (method, run id), and each
# MlflowClient built by ragexp's own code and each tracking store built counted; all written
# to COUNTS as the process exits.
COUNTING = """
import atexit, json, runpy, sys, traceback
from collections import Counter
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.tracking import MlflowClient

calls, built = Counter(), Counter()

def counted(name, fn):
    def wrapper(self, *args, **kwargs):
        calls[name + " " + str(kwargs.get("run_id", args[0] if args else None))] += 1
        return fn(self, *args, **kwargs)
    return wrapper

for name in METHODS:
    setattr(MlflowClient, name, counted(name, getattr(MlflowClient, name)))

def constructed(cls, what):
    init = cls.__init__
    def wrapper(self, *args, **kwargs):
        caller = traceback.extract_stack()[-2].filename
        built[what if "/ragexp/" in caller or what == "store" else "mlflow's own client"] += 1
        init(self, *args, **kwargs)
    cls.__init__ = wrapper

constructed(MlflowClient, "ragexp's client")
constructed(SqlAlchemyStore, "store")
atexit.register(lambda: open(COUNTS, "w").write(json.dumps({"calls": calls, "built": built})))
sys.argv = ["ragexp", *sys.argv[1:]]
runpy.run_module("ragexp", run_name="__main__", alter_sys=True)
"""
METHODS = ("log_artifacts", "log_artifact", "log_batch", "log_metric", "log_param", "set_tag",
           "log_table", "log_text", "log_dict", "log_inputs", "create_run", "set_terminated",
           "list_artifacts")
MLFLOW_PARAMS_PER_CALL, MLFLOW_TAGS_PER_CALL = 100, 100  # log_batch's limits


@pytest.fixture(scope="module")
def counted_sweep(module_mlflow_store):
    """``(calls per run, constructions, the two runs)`` of a hash_dense vs hash_hybrid sweep."""
    tmp = module_mlflow_store.folder
    counts = tmp / "counts.json"
    program = f"METHODS = {METHODS!r}\nCOUNTS = {str(counts)!r}\n{COUNTING}"
    proc = subprocess.run(
        [sys.executable, "-c", program, "-m", "+ablation=hash_dense,hash_hybrid",
         "embedder.dim=64", "baseline=hash_dense", f"hydra.sweep.dir={tmp / 's'}",
         f"cache_dir={tmp / 'cache'}", "progress=false"],
        cwd=ROOT, env=cli_env(tmp, module_mlflow_store.uri), capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(counts.read_text())
    per_run: dict[str, dict[str, int]] = {}
    for key, n in seen["calls"].items():
        method, run = key.split(" ")
        per_run.setdefault(run, {})[method] = n
    # this store, named: an earlier test of the session may have set mlflow's fluent URI, which
    # MLFLOW_TRACKING_URI does not override
    prior = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(module_mlflow_store.uri)
    try:
        df = mlflow.search_runs(experiment_names=["ragexp-handbook"])
    finally:
        mlflow.set_tracking_uri(prior)
    kids = df[df["tags.mlflow.parentRunId"].notna()]
    return per_run, seen["built"], kids


@pytest.mark.slow
def test_each_job_uploads_its_artifacts_once_and_logs_in_batches(counted_sweep,
                                                                 module_mlflow_store):
    per_run, _, kids = counted_sweep
    assert len(kids) == 2
    for _, run in kids.iterrows():
        params = sum(1 for c in run.index if c.startswith("params.") and isinstance(run[c], str))
        tags = sum(1 for c in run.index if c.startswith("tags.") and isinstance(run[c], str))
        calls = per_run[run["run_id"]]
        # the params in chunks of 100; metrics and tags together; the sweep's selection once
        bound = (math.ceil(params / MLFLOW_PARAMS_PER_CALL)
                 + math.ceil(tags / MLFLOW_TAGS_PER_CALL) + 1)
        assert calls.pop("log_batch") <= bound
        assert calls == {"log_inputs": 1, "log_artifacts": 1, "set_terminated": 1}, calls
        # what the job's one upload and its selection batch carried
        assert run["tags.mlflow.loggedArtifacts"] == json.dumps(
            [{"path": "per_question.json", "type": "table"}])
        assert run["metrics.selection.tied_with_best"] in (0.0, 1.0)
    hybrid = kids[kids["tags.ragexp.ablation"] == "hash_hybrid"].iloc[0]
    assert not math.isnan(hybrid["metrics.vs_baseline.ndcg_at_10.delta"])
    client = mlflow.MlflowClient(tracking_uri=module_mlflow_store.uri)
    files = {f.path for f in client.list_artifacts(kids.iloc[0]["run_id"])}
    assert {"config.yaml", "per_question.csv", "per_question.json"} <= files


@pytest.mark.slow
def test_a_sweep_process_builds_one_client_and_one_store(counted_sweep):
    _, built, _ = counted_sweep
    assert built["ragexp's client"] == 1 and built["store"] == 1, built
