"""Jobs of one sweep log the same dataset at the same moment: MLflow's SQL store looks the
dataset up and inserts it when missing, so two jobs can both insert and one fails on the unique
key (experiment, name, digest); CI caught it once in a real two-sweep run. The clash window is
too narrow to hit on demand, so the retry is checked with a client that clashes once, and the
lock with real processes logging at one instant (a lock taken twice in one process would hang
them, as a first version of this fix did)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from mlflow.entities import Dataset, DatasetInput
from mlflow.tracking import MlflowClient

from ragexp.tracking import store as tracking
from ragexp.tracking.runs import TrackedRun


def _dataset() -> list[DatasetInput]:
    return [DatasetInput(Dataset(name="handbook", digest="0123456789abcdef",
                                 source_type="local", source="x", profile="{}"))]


CHILD = """
import sys, time
from mlflow.entities import Dataset, DatasetInput
from ragexp.tracking.runs import TrackedRun
run_id, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # every process logs at the same instant
TrackedRun(run_id, outbox=None).log_inputs([DatasetInput(Dataset(
    name="handbook", digest="0123456789abcdef", source_type="local", source="x",
    profile="{}"))])
"""


@pytest.mark.parametrize("attempt", range(3))
def test_processes_logging_one_dataset_at_once_all_succeed(mlflow_store, attempt):
    uri = mlflow_store.uri
    c = tracking.client()
    exp = c.create_experiment("race")
    run_ids = [c.create_run(exp).info.run_id for _ in range(4)]
    start = time.time() + 8  # after every interpreter has imported mlflow
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, r, str(start)],
                              env={**os.environ, "MLFLOW_TRACKING_URI": uri},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in run_ids]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(outputs)[-3000:]
    client = MlflowClient(uri)
    for r in run_ids:
        [inp] = client.get_run(r).inputs.dataset_inputs
        assert inp.dataset.digest == "0123456789abcdef"


class _ClashOnce:
    """A client whose first ``log_inputs`` fails as PostgreSQL reports a unique-key clash."""

    def __init__(self, message: str):
        self.calls, self.message = 0, message

    def log_inputs(self, run_id, inputs):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError(self.message)


@pytest.mark.parametrize("message", [
    "(psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint "
    '"datasets_pk"',
    "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id"])
def test_a_unique_key_clash_is_retried_and_finds_the_row(monkeypatch, message):
    fake = _ClashOnce(message)
    monkeypatch.setattr(tracking, "client", lambda: fake)
    monkeypatch.setattr(tracking, "store_lock", lambda: tracking.nullcontext())
    monkeypatch.setattr(tracking.time, "sleep", lambda s: None)
    TrackedRun("r1", outbox=None).log_inputs(_dataset())
    assert fake.calls == 2


def test_other_store_errors_are_not_retried(monkeypatch):
    fake = _ClashOnce("connection refused")
    monkeypatch.setattr(tracking, "client", lambda: fake)
    monkeypatch.setattr(tracking, "store_lock", lambda: tracking.nullcontext())
    with pytest.raises(tracking.TrackingError, match="connection refused"):
        TrackedRun("r1", outbox=None).log_inputs(_dataset())
    assert fake.calls == 1
