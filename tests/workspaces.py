"""Where tests record runs: a sqlite MLflow store in a temporary folder (``store_uri``,
``migrated_store``, ``tracking_store``; the ``mlflow_store`` and ``module_mlflow_store``
fixtures of ``conftest``), runs of ragexp's real config recorded in this process
(``record_run``, ``record_failed_run``), and a throwaway copy of the shipped handbook to record
them on, as a user's project would (``handbook_copy``). ``cli_runs`` runs the ``ragexp`` CLI in
a child on the same kind of store."""

from __future__ import annotations

import atexit
import copy
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from ragexp.data import shipped

STORE_FILE = "mlflow.db"
# Hydra overrides pointing a run at the copy, relative to its ``work/`` folder.
RELATIVE = ["dataset.corpus_dir=data/corpus", "dataset.questions=data/golden", "cache_dir=cache"]
# Overrides that pass composition (the folder and its model.onnx exist) and fail in the job:
# the model file is not ONNX, so the cross-encoder does not load. A FAILED run to test with.
BROKEN_CROSS_ENCODER = Path(__file__).resolve().parent / "fixtures" / "broken_cross_encoder"
FAILING = ["reranker=cross_encoder", f"reranker.model_path={BROKEN_CROSS_ENCODER}"]


def store_uri(folder: Path) -> str:
    """The tracking URI of the sqlite store ``folder/mlflow.db`` (MLflow creates it on first
    use): what a test points ragexp at, in this process or a child's environment."""
    return f"sqlite:///{folder / STORE_FILE}"


@lru_cache(maxsize=1)
def _template() -> Path:
    """A sqlite store that MLflow created and migrated, once per process (each xdist worker
    makes its own), in a temporary folder removed at exit: migrating a new store takes seconds,
    copying this one a fraction of a second (as mlflow's own tests/conftest.py ``cached_db``)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(tempfile.mkdtemp(prefix="ragexp-store-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    SqlAlchemyStore(store_uri(folder), (folder / "mlruns").as_uri()).engine.dispose()
    return folder / STORE_FILE


def migrated_store(folder: Path) -> str:
    """``store_uri(folder)``, its database a copy of the migrated ``_template`` (left alone if
    ``folder`` holds one already): the store MLflow would create on first use, without the
    seconds of schema migration. The copy's ``Default`` experiment keeps its artifacts where a
    store created from the current folder would (``./mlruns/0``). Tests of a store's creation,
    or of one never created, use ``store_uri`` instead."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

    db = folder / STORE_FILE
    if not db.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(_template(), db)
        default = append_to_uri_path(resolve_uri_if_local("./mlruns"),
                                     str(SqlAlchemyStore.DEFAULT_EXPERIMENT_ID))
        with sqlite3.connect(db) as con:
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                        (default, SqlAlchemyStore.DEFAULT_EXPERIMENT_ID))
        con.close()
    return store_uri(folder)


class Store(NamedTuple):
    """A sqlite store that ``MLFLOW_TRACKING_URI`` points at: its ``folder`` (free for the
    test's other files: caches, outputs), ``uri`` and database file ``db``."""

    folder: Path
    uri: str
    db: Path


@contextmanager
def tracking_store(folder: Path, migrated: bool = True) -> Iterator[Store]:
    """``MLFLOW_TRACKING_URI`` and MLflow's own tracking URI (``mlflow.set_tracking_uri``, which
    the fluent calls read ahead of the variable) set to a sqlite store in ``folder``, until
    exit (then both are as they were: a module whose fixture set MLflow's URI made a later
    module's ``mlflow.search_runs`` read the earlier store). The store is a ``migrated_store``,
    or with ``migrated=False`` one that does not exist yet."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    uri = migrated_store(folder) if migrated else store_uri(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        with _use_tracking_uri(uri):
            yield Store(folder, uri, folder / STORE_FILE)


def search_runs(uri: str, **kwargs):
    """``mlflow.search_runs(**kwargs)`` on the store at ``uri``, with MLflow's tracking URI and
    ``MLFLOW_TRACKING_URI`` (which ``mlflow.set_tracking_uri`` sets too) as they were, after:
    a URI left set made a later test read this test's store (conftest fails a test that
    leaves it changed)."""
    import mlflow
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)  # restored on exit: _use_tracking_uri unsets it
        with _use_tracking_uri(uri):
            return mlflow.search_runs(**kwargs)


def compose_config(*overrides: str, config: str = "config"):
    """ragexp's shipped config (``config``: ``conf/config.yaml``, or ``questions``: ``ragexp
    questions generate``'s) composed with ``overrides``, as ``python -m ragexp OVERRIDES``
    composes it (typed: importing ``ragexp.run.app`` registers the schemas). Composed once per
    process for the same ``overrides`` (``_composed``; as lightning-hydra-template's
    ``cfg_train_global``): each call returns a copy of its own to change."""
    return copy.deepcopy(_composed(config, overrides))


@lru_cache(maxsize=None)
def _composed(config: str, overrides: tuple[str, ...]):
    """``config`` composed with ``overrides``: 0.1-0.5 s each, a copy 0.03 s. The shipped
    folder and the schemas do not change within a process; a composition that fails is not
    kept (``lru_cache`` keeps returned values only)."""
    from hydra import compose, initialize_config_dir

    from ragexp.run.app import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config, overrides=list(overrides))


def record_run(*overrides: str) -> dict:
    """One ragexp run of ``overrides``, in this process, into the current store (``python -m
    ragexp OVERRIDES`` without the child): ``run_logged``'s result, ``{"status", "run_id"}``
    and the run's metrics. Raises what failed the run, after marking it ``FAILED``."""
    from ragexp.run.app import run_logged

    return run_logged(compose_config(*overrides))


def record_failed_run(*overrides: str) -> str:
    """The id of the run of ``overrides`` that fails (as ``record_run`` records it): the newest
    ``FAILED`` run of its experiment."""
    from ragexp.run.app import run_logged
    from ragexp.tracking import store as tracking

    cfg = compose_config(*overrides)
    with pytest.raises(Exception):
        run_logged(cfg)
    failed = tracking.client().search_runs([tracking.ensure_experiment(cfg.experiment)],
                                           "attributes.status = 'FAILED'")
    return failed[0].info.run_id


@contextmanager
def handbook_copy(tmp: Path) -> Iterator[tuple[Path, pytest.MonkeyPatch]]:
    """The handbook's corpus and golden set copied to ``tmp/work/data``, the store of
    ``tracking_store(tmp)`` and the current folder ``tmp/work`` (record runs with
    ``RELATIVE``). Yields ``(work, monkeypatch)``; the patch (store, folder) is undone on exit."""
    work = tmp / "work"
    shutil.copytree(shipped.path("handbook/corpus"), work / "data" / "corpus")
    shutil.copytree(shipped.path("handbook/golden"), work / "data" / "golden")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        with tracking_store(tmp):
            yield work, mp
