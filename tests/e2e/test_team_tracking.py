"""Beyond one machine: a sweep with 4 parallel workers (joblib launcher) against an MLflow
tracking server backed by PostgreSQL loses no run and logs none twice; the same sweep through
the submitit launcher (its ``local`` executor) with the caches on one shared folder.

PostgreSQL comes from Debian's ``postgresql`` package (``.ci/run`` installs it): the test runs
``initdb``/``pg_ctl`` as a non-root user (``postgres`` when run as root) in a private folder, on
loopback; the MLflow server runs in its own process group (``background.background_server``)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_runs import cli_env
from workspaces import migrated_store, search_runs

from tools.background import background_server, free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# 4 jobs; split=all: every question is embedded, as the cache-row count below expects
SWEEP = ["embedder=hash", "retriever=dense,bm25", "reranker=none,lexical", "split=all"]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


@contextmanager
def postgres():
    """A throwaway PostgreSQL cluster on 127.0.0.1; yields its port. Trust auth, loopback only."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.fail("PostgreSQL is not installed: apt-get install -y postgresql (.ci/run does)")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="ragexp-pg-"))
    if os.geteuid() == 0:  # initdb refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")
    data, port = folder / "data", free_port()
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True,  # noqa
                                      text=True, timeout=120)
    try:
        run(initdb, "-D", str(data), "-U", "ragexp", "--auth=trust", "--no-sync")
        run(pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "60", "-o",
            f"-p {port} -h 127.0.0.1 -k {folder} -F", "start")
        try:
            run(_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "ragexp", "mlflow")
            yield port
        finally:
            run(pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep(tmp: Path, uri: str, *launcher: str) -> subprocess.CompletedProcess:
    env = cli_env(tmp, uri)
    return subprocess.run([sys.executable, "-m", "ragexp", "-m", *launcher, *SWEEP,
                           f"cache_dir={tmp / 'shared-cache'}", "progress=false",
                           f"hydra.sweep.dir={tmp / 'multirun'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)


def _check_one_run_per_job(uri: str, n_jobs: int) -> None:
    df = search_runs(uri, experiment_names=["ragexp-handbook"])
    parents = df[df["tags.ragexp.role"] == "sweep"]
    assert len(parents) == 1
    children = df[df["tags.mlflow.parentRunId"] == parents["run_id"].iloc[0]]
    assert len(children) == n_jobs == len(df) - 1  # no run lost, none logged twice
    configs = sorted(zip(children["params.retriever.name"], children["params.reranker.name"]))
    assert configs == sorted({(r, k) for r in ("dense", "bm25") for k in ("none", "lexical")})
    assert children["tags.ragexp.config_hash"].nunique() == n_jobs
    assert (children["status"] == "FINISHED").all()
    assert children[["metrics.rr_at_10", "metrics.ndcg_at_10"]].notna().all().all()


def test_parallel_sweep_against_a_postgresql_backed_server(tmp_path):
    import psycopg2

    with postgres() as pg_port:
        db = f"postgresql+psycopg2://ragexp@127.0.0.1:{pg_port}/mlflow"
        server = lambda port: [sys.executable, "-m", "mlflow", "server",  # noqa: E731
                               "--backend-store-uri", db, "--default-artifact-root",
                               (tmp_path / "artifacts").as_uri(), "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"]
        with background_server(server, timeout_s=300) as port:
            uri = f"http://127.0.0.1:{port}"
            proc = _sweep(tmp_path, uri, "hydra/launcher=joblib", "hydra.launcher.n_jobs=4")
            assert proc.returncode == 0, proc.stderr[-3000:]
            _check_one_run_per_job(uri, 4)
        # the rows really are in PostgreSQL: one per job plus the sweep's parent
        with psycopg2.connect(db.replace("+psycopg2", "")) as conn, conn.cursor() as cur:
            cur.execute("select count(*) from runs where lifecycle_stage = 'active'")
            assert cur.fetchone()[0] == 5
    _check_each_text_cached_once(tmp_path / "shared-cache")


def _check_each_text_cached_once(cache: Path) -> None:
    """The workers shared one embedding cache and none embedded a text another had: the store
    holds one row per distinct passage and question text, no more."""
    from conftest import CORPUS, GOLDEN

    from ragexp.data.datasets import MarkdownDataset
    from ragexp.stages.chunking import MarkdownChunker

    ds = MarkdownDataset(str(CORPUS), str(GOLDEN))
    texts = {c.text for c in MarkdownChunker().chunk(ds.documents())}
    questions = {q.text for q in ds.queries()}
    rows = sum(p.stat().st_size // 32 for p in cache.rglob("packed/*.keys"))
    assert rows == len(texts) + len(questions)


def test_sweep_through_the_submitit_launcher(tmp_path):
    uri = migrated_store(tmp_path)
    proc = _sweep(tmp_path, uri, "hydra/launcher=submitit_local",
                  "hydra.launcher.timeout_min=20", "hydra.launcher.cpus_per_task=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_one_run_per_job(uri, 4)
    _check_each_text_cached_once(tmp_path / "shared-cache")
