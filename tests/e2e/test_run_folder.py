"""A run refused before any work leaves no folder behind (``run.run_folder``). Hydra creates a
single run's ``outputs/<date>/<time>/`` (``.hydra/`` and the job's log file) before the task
starts, so each refused ``python -m ragexp k=0`` left one more such folder; a folder that
existed before the run, or that holds anything of ragexp's, stays. A refused sweep never had a
folder: Hydra's launcher creates ``multirun/...`` only as it launches the first job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_runs import cli_env

from ragexp.data import shipped
from ragexp.run.run_folder import hydras_own

QUESTIONS = (f"dataset.questions=[{shipped.path('handbook/golden')},"
             f"{shipped.path('handbook/golden/generated')}]")


def ragexp_in(ws: Path, tmp: Path, *args: str, module: str = "ragexp"
              ) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` started in the folder ``ws`` (where Hydra's relative
    ``outputs/`` and ``multirun/`` go), its store and cache in ``tmp``."""
    ws.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", module, *args, f"cache_dir={tmp / 'cache'}",
                           "progress=false"], cwd=ws, env=cli_env(tmp), capture_output=True,
                          text=True, timeout=300)


def test_a_run_refused_by_its_config_leaves_no_outputs_folder(tmp_path):
    ws = tmp_path / "ws"
    done = ragexp_in(ws, tmp_path, "k=0")
    assert done.returncode == 2 and "k=0 is out of range" in done.stderr, done.stderr[-2000:]
    assert list(ws.iterdir()) == []  # before: outputs/<date>/<time>/{.hydra/,app.log}


def test_a_refused_sweep_leaves_no_folder(tmp_path):
    ws = tmp_path / "ws"
    done = ragexp_in(ws, tmp_path, "-m", "k=0,5", "embedder=hash")
    assert done.returncode == 2 and "nothing was run" in done.stderr, done.stderr[-2000:]
    assert list(ws.iterdir()) == []


def test_a_run_refused_after_loading_its_data_leaves_no_folder_nor_created_parents(tmp_path):
    """Refused as an input (exit 2) once the data is loaded, before a run exists: the folder
    goes, and so do the parents this run created for it; the folder above them stays."""
    above = tmp_path / "runs"
    above.mkdir()
    done = ragexp_in(tmp_path / "ws", tmp_path, QUESTIONS, "embedder=hash", "retriever=bm25",
                     "reranker=none", "objective_source=llm",
                     f"hydra.run.dir={above / 'a' / 'b'}")
    assert done.returncode == 2 and "objective_source='llm'" in done.stdout + done.stderr
    assert above.is_dir() and list(above.iterdir()) == []


def test_a_folder_that_was_there_before_the_run_stays(tmp_path):
    kept, empty = tmp_path / "kept", tmp_path / "empty"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    empty.mkdir()
    for folder in (kept, empty):
        done = ragexp_in(tmp_path / "ws", tmp_path, "k=0", f"hydra.run.dir={folder}")
        assert done.returncode == 2, done.stderr[-2000:]
        assert (folder / ".hydra" / "config.yaml").is_file()  # Hydra's, left as they are
    assert (kept / "notes.txt").read_text() == "mine"


def test_an_embedding_shard_refused_leaves_no_outputs_folder(tmp_path):
    ws = tmp_path / "ws"
    done = ragexp_in(ws, tmp_path, "+shard=9/2", "embedder=hash", module="ragexp.run.embed")
    assert done.returncode == 1 and "shard=9/2" in done.stderr, done.stderr[-2000:]
    assert list(ws.iterdir()) == []


def test_only_hydras_own_files_count_as_an_untouched_folder(tmp_path):
    folder = tmp_path / "run"
    (folder / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (folder / ".hydra" / name).write_text("x: 1\n")
    (folder / "app.log").write_text("error: refused\n")
    assert hydras_own(folder, ".hydra", "app.log")
    assert not hydras_own(folder, ".hydra", "embed.log")  # another job's log: not Hydra's
    assert not hydras_own(folder, None, "app.log")  # no output_subdir: .hydra is someone's
    (folder / ".hydra" / "notes.md").write_text("mine")
    assert not hydras_own(folder, ".hydra", "app.log")
    (folder / ".hydra" / "notes.md").unlink()
    (folder / "ragexp_status.json").write_text("{}")
    assert not hydras_own(folder, ".hydra", "app.log")
