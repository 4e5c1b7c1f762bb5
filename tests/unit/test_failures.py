"""Failures a user can act on: a model that cannot be fetched fails in one attempt with ragexp's
hint, and that hint (not the library's bare error) reaches the console, the sweep summary and
the run's ``ragexp.error`` tag; tracebacks go to error.txt and the log file unless verbose."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from cli_runs import cli_env, own_dirs
from hydra.errors import InstantiationException
from workspaces import migrated_store, search_runs, store_uri, tracking_store

from ragexp.index.embedders import (
    EmbedderError,
    FastEmbedEmbedder,
    UnusableModelFolder,
    hub_unreachable,
)
from ragexp.tracking import failures
from tools.background import free_port

ROOT = Path(__file__).resolve().parents[2]
HINT = "embedder.model_path=DIR"


def test_describe_keeps_ragexp_hint_under_hydra_wrapper():
    try:
        try:
            try:
                raise ValueError("Could not load model X from any source.")
            except ValueError as inner:
                raise EmbedderError(f"could not load X. pass {HINT}") from inner
        except EmbedderError as mid:
            raise InstantiationException("Error in call to target 'x':\nEmbedderError(...)") \
                from mid
    except InstantiationException as exc:
        line = failures.describe(exc)
    assert line == f"EmbedderError: could not load X. pass {HINT}"


def test_report_sends_traceback_to_log_file_not_console(tmp_path, caplog):
    handler = logging.FileHandler(tmp_path / "job.log")
    logging.getLogger().addHandler(handler)
    try:
        try:
            raise EmbedderError(f"no model; pass {HINT}")
        except EmbedderError as exc:
            with caplog.at_level(logging.INFO):
                line = failures.report(exc, verbose=False)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert line == f"EmbedderError: no model; pass {HINT}"
    assert HINT in caplog.text and "Traceback" not in caplog.text
    assert str(tmp_path / "job.log") in caplog.text and "verbose=true" in caplog.text
    assert "Traceback (most recent call last)" in (tmp_path / "job.log").read_text()


def test_offline_is_detected(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in hub_unreachable()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for var in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens
    assert "cannot be reached" in hub_unreachable()


@pytest.mark.parametrize("offline_by", ["env", "closed endpoint"])
def test_bge_without_network_fails_at_once_with_the_hint(tmp_path, monkeypatch, offline_by):
    if offline_by == "closed endpoint":
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    start = time.monotonic()
    with pytest.raises(EmbedderError) as err:
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5", cache_dir=str(tmp_path))
    assert time.monotonic() - start < 10  # one attempt: fastembed's retries sleep 39 s
    msg = str(err.value)
    assert HINT in msg and "never substitutes" in msg and str(tmp_path) in msg


def _sweep(tmp: Path, *extra: str, offline_env: dict) -> subprocess.CompletedProcess:
    env = {**cli_env(tmp, migrated_store(tmp)), **offline_env}
    if "HF_HUB_OFFLINE" not in offline_env:
        env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run([sys.executable, "-m", "ragexp", *extra, *own_dirs(tmp, extra),
                           f"cache_dir={tmp / 'cache'}", "progress=false"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_sweep_hash_bge_offline(tmp_path):
    """The issue's literal sweep, offline (no HF_HUB_OFFLINE, the hub unreachable)."""
    proc = _sweep(tmp_path, "-m", "retriever=dense,hybrid", "embedder=hash,bge",
                  f"hydra.sweep.dir={tmp_path / 'multirun'}",
                  offline_env={"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"})
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "2 failed, 2 finished" in proc.stdout
    failed = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("FAILED")]
    assert len(failed) == 2 and all("embedder=bge" in ln and HINT in ln for ln in failed)
    assert "Traceback" not in out  # tracebacks are in error.txt and the job logs
    assert "retries left" not in out  # fastembed's download retries never ran
    logs = list((tmp_path / "multirun").glob("*/*.log"))
    assert any("Traceback (most recent call last)" in p.read_text() for p in logs)
    df = search_runs(store_uri(tmp_path), experiment_names=["ragexp-handbook"])
    jobs = df.dropna(subset=["tags.ragexp.config_hash"])
    bge = jobs[jobs["params.embedder.name"] == "bge"]
    assert sorted(bge["status"]) == ["FAILED", "FAILED"]
    # One attempt: fastembed's retries alone sleep 3 + 9 + 27 = 39 s, whatever the load.
    assert ((bge["end_time"] - bge["start_time"]).dt.total_seconds() < 39).all()
    assert bge["tags.ragexp.error"].str.contains(HINT, regex=False).all()
    assert bge["tags.ragexp.error"].str.startswith("EmbedderError").all()
    assert sorted(jobs[jobs["params.embedder.name"] == "hash"]["status"]) == ["FINISHED"] * 2
    with tracking_store(tmp_path):  # runs:/ reads MLflow's tracking URI
        trace = mlflow.artifacts.load_text(f"runs:/{bge['run_id'].iloc[0]}/error.txt")
    assert "Traceback" in trace and HINT in trace


@pytest.mark.slow
def test_single_run_verbose_prints_the_traceback(tmp_path):
    quiet = _sweep(tmp_path, "embedder=bge", f"hydra.run.dir={tmp_path / 'a'}",
                   offline_env={"HF_HUB_OFFLINE": "1"})
    assert quiet.returncode == 1 and HINT in quiet.stderr + quiet.stdout
    assert "Traceback" not in quiet.stderr + quiet.stdout
    loud = _sweep(tmp_path, "embedder=bge", "verbose=true", f"hydra.run.dir={tmp_path / 'b'}",
                  offline_env={"HF_HUB_OFFLINE": "1"})
    assert loud.returncode == 1 and "Traceback" in loud.stderr + loud.stdout


def test_the_failure_line_names_error_txt_only_for_a_run_that_has_one(caplog):
    """A trial: a folder refused before any run existed (a NaN row in precomputed vectors)
    said "traceback in the run's error.txt", of a run that was never created."""
    with caplog.at_level(logging.ERROR, logger="ragexp"):
        failures.report(ValueError("before any run"), verbose=False)
        ended = ValueError("in a run")
        setattr(ended, failures.FAILED_RUN, "0123456789abcdef")
        failures.report(ended, verbose=False)
    first, second = (r.getMessage() for r in caplog.records[-2:])
    assert first.startswith("job failed: ValueError: before any run") and "error.txt" not in first
    assert "traceback in run 01234567's error.txt" in second


@pytest.mark.slow
def test_a_single_run_on_a_model_folder_that_does_not_load_exits_2(tmp_path):
    # a folder of the right file names and junk content: "Exception: Model missing. at line 1
    # column 2", exit 1, where a file ragexp cannot use exits 2 (docs/runs.md)
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model_optimized.onnx", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("junk")
    proc = _sweep(tmp_path, "embedder=bge", f"embedder.model_path={folder}", "retriever=dense",
                  offline_env={"HF_HUB_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert f"UnusableModelFolder: embedder.model_path={folder}" in out
    assert "Model missing" not in out.split("UnusableModelFolder")[0]


def test_a_model_folder_whose_tokenizer_does_not_read_names_the_folder(tmp_path):
    # the tokenizers library said "Exception: Model missing. at line 1 column 2"
    from ragexp.index.embedders import _folder_counter

    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "special_tokens_map.json").write_text("{}")
    with pytest.raises(UnusableModelFolder, match=f"embedder.model_path={tmp_path}: its "
                       f"tokenizer files .* do not read as a Hugging Face tokenizer"):
        _folder_counter(str(tmp_path), 0, 0)
