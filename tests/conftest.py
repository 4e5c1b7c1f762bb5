"""Shared fixtures: the shipped corpus and golden set, loaded once per session, the MLflow store
runs are recorded into (``mlflow_store``, ``module_mlflow_store``; record runs with
``workspaces.record_run``), and small helpers for writing throwaway corpora. Everything runs
offline.

Tests live in tiers by folder: ``tests/unit`` (in this process), ``tests/contract`` (one
contract per protocol, inherited by every implementation), ``tests/e2e`` (child processes,
servers, browsers; every test there is ``slow``); an in-process test of several seconds (a
recorded run, a benchmark) is marked ``slow`` where it stands, so ``make test-fast`` stays
fast. A test not marked ``slow`` that starts a child process, a server or a browser fails,
saying so (``pytest_configure``); so does a test, or a module's fixtures, that leaves the
tracking URI changed (``tracking_uri_kept``)."""

from __future__ import annotations

import os

# Before anything imports fastembed / huggingface_hub / mlflow.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Iterator  # noqa: E402

import pytest  # noqa: E402
from workspaces import Store, tracking_store  # noqa: E402

from ragexp.data import shipped  # noqa: E402
from ragexp.data.golden import load_corpus, load_golden  # noqa: E402
from ragexp.stages.chunking import MarkdownChunker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
CORPUS = Path(shipped.path("handbook/corpus"))
GOLDEN = Path(shipped.path("handbook/golden"))


# Tiers by folder: unit (one process, no server), contract (one per protocol, every
# implementation), e2e (child processes, servers, browsers: marked slow here).
TIERS = ("unit", "contract", "e2e")
SLOW_TIER = "e2e"
# Children that only a slow test may start, besides a Python interpreter and the venv's scripts
# (ragexp, mlflow): browsers, their drivers, PostgreSQL, shells. Cheap tools that libraries run
# on first use (git for a run's commit, uname, ldconfig) are left to them.
COSTLY_CHILDREN = {"chrome", "chromium", "google-chrome", "chromedriver", "selenium-manager",
                   "pg_ctl", "initdb", "postgres", "createdb", "sh", "bash"}
_CURRENT: list[pytest.Item] = []  # the test being set up, run or torn down
_STARTS = pytest.MonkeyPatch()  # the guarded starts, for the whole session


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under ``tests/e2e`` is ``slow``."""
    for item in items:
        if SLOW_TIER in Path(item.path).relative_to(TESTS).parts[:1]:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Remembers the test under way for ``_refuse_unless_slow`` (its module's and session's
    fixtures are set up within it too)."""
    _CURRENT.append(item)
    try:
        return (yield)
    finally:
        _CURRENT.pop()


def _refuse_unless_slow(what: str) -> None:
    """Fails the test under way, unless it is marked ``slow``, for starting ``what``."""
    if _CURRENT and _CURRENT[-1].get_closest_marker("slow") is None:
        pytest.fail(f"{_CURRENT[-1].nodeid} starts {what} and is not marked slow: move it to "
                    f"tests/{SLOW_TIER}/ or mark it @pytest.mark.slow (or run it in this "
                    f"process: cli_runs, workspaces.record_run)", pytrace=False)


def _refuse(problem: str) -> None:
    """Fails the test under way for ``problem`` (a sentence naming what it started)."""
    if _CURRENT:
        pytest.fail(f"{_CURRENT[-1].nodeid} {problem}", pytrace=False)


# What a ``python -c`` child runs when it runs the Hydra app (tests/unit/test_perf.py,
# tests/e2e/test_tracking_calls.py).
APP_CODE = ("app.entry()", 'run_module("ragexp"', "ragexp.run.embed")


# Options that print and run no job, so Hydra creates no folder: ragexp's ``--version``,
# Hydra's help, config and information.
NO_JOB = {"--version", "--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i",
          "--shell-completion", "-sc"}


def _hydra_app(args) -> list[str] | None:
    """The arguments of the Hydra app (``python -m ragexp [overrides]``, ``python -m
    ragexp.run.embed``, or ``python -c CODE`` with CODE running either, ``APP_CODE``) that a
    child's ``args`` start to run a job, else None (a ``ragexp`` command, ``NO_JOB``, any
    other program)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return None
    words = [os.fsdecode(a) for a in args[1:]]
    while words and words[0].startswith("-") and words[0] not in ("-m", "-c"):
        del words[:2 if words[0] in ("-X", "-W") else 1]  # the interpreter's own options
    if len(words) < 2:
        return None
    flag, what, *rest = words
    if flag == "-c":
        return rest if any(code in what for code in APP_CODE) else None
    if flag != "-m" or what not in ("ragexp", "ragexp.run.embed"):
        return None
    from ragexp.cli.main import is_command

    if what == "ragexp" and rest and is_command(rest[0]) or NO_JOB & set(rest):
        return None
    return rest


def _shared_outputs(args, cwd) -> str | None:
    """What is wrong with the folder Hydra would write a child's run or sweep into
    (``hydra.run.dir``, with ``-m`` ``hydra.sweep.dir``), unless it is the test's own: set to,
    or left to Hydra's dated default in a launch folder ``cwd`` in, a folder below the
    temporary folder (pytest's ``tmp_path``, ``tempfile``'s: made for one test or one tool's
    run) and outside the repository. Hydra's default under the repository root gave two tests
    started in the same second on two workers one folder, which a refused run removed under
    the other (``cli_runs.own_dirs`` gives a launch its own). A setting that does not resolve
    (``${nosuch}``, not ``${now:...}``) creates no folder."""
    app = _hydra_app(args)
    if app is None or not _CURRENT:
        return None
    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(app) else "hydra.run.dir"
    value = next((a.split("=", 1)[1] for a in reversed(app) if a.startswith(f"{key}=")), None)
    if value is not None and "${" in value and "${now:" not in value:
        return None
    where = Path(os.path.abspath(Path(cwd or os.getcwd()) / (value or ".")))
    return None if _own_folder(where) else _not_own(key, where)


def _own_folder(where: Path) -> bool:
    """Whether ``where`` lies below the temporary folder (pytest's ``tmp_path``,
    ``tempfile``'s: made for one test or one tool's run) and outside the repository."""
    where, temp = where.resolve(), Path(tempfile.gettempdir()).resolve()
    return where.is_relative_to(temp) and where != temp and not where.is_relative_to(ROOT)


def _not_own(key: str, where: Path) -> str:
    """The refusal of a run of ragexp's Hydra app whose ``key`` folder is ``where``."""
    return (f"runs ragexp's Hydra app with {key} in {where}, not a folder of its own: two "
            f"tests started in the same second share Hydra's dated folder there; pass "
            f"{key}= under tmp_path (cli_runs.own_dirs) or start it in a folder of tmp_path")


def _costly_child(args, shell: bool) -> str | None:
    """The name of the program a ``Popen`` starts (a shell line: its shell) if it is a Python
    interpreter, a script of this venv, or one of ``COSTLY_CHILDREN``; else None."""
    if shell:
        return "sh"
    program = Path(os.fsdecode(args if isinstance(args, (str, bytes, os.PathLike)) else args[0]))
    venv = Path(sys.executable).parent
    if (program.name.startswith("python") or program.parent == venv
            or program.name in COSTLY_CHILDREN):
        return program.name
    return None


def pytest_configure(config) -> None:
    """Child processes, multiprocessing workers and uvicorn servers go through
    ``_refuse_unless_slow`` for the whole session (restored at ``pytest_unconfigure``), and a
    child or in-process job of ragexp's Hydra app through ``_shared_outputs``. A bare
    ``os.fork`` does not: it starts no interpreter, and ``run.forked`` forks or not by whether
    an earlier test left a thread running."""
    import multiprocessing.process
    import subprocess

    import uvicorn

    popen_init, server_init = subprocess.Popen.__init__, uvicorn.Server.__init__
    start = multiprocessing.process.BaseProcess.start

    def guarded_popen(self, args, *rest, **kwargs):
        if name := _costly_child(args, kwargs.get("shell", False)):
            _refuse_unless_slow(f"a child process ({name})")
            if problem := _shared_outputs(args, kwargs.get("cwd")):
                _refuse(problem)
        popen_init(self, args, *rest, **kwargs)

    def guarded_start(self):
        _refuse_unless_slow(f"a multiprocessing worker ({type(self).__name__})")
        start(self)

    def guarded_server(self, *args, **kwargs):
        _refuse_unless_slow("a server (uvicorn)")
        server_init(self, *args, **kwargs)

    _STARTS.setattr(subprocess.Popen, "__init__", guarded_popen)
    _STARTS.setattr(multiprocessing.process.BaseProcess, "start", guarded_start)
    _STARTS.setattr(uvicorn.Server, "__init__", guarded_server)
    _guard_jobs_here()


def _guard_jobs_here() -> None:
    """A job of ragexp's Hydra app run in this process (``cli_runs.run_app``) goes through
    ``_own_folder`` too, as Hydra's launchers start it (``run_job``), for the session."""
    import inspect

    import hydra._internal.core_plugins.basic_launcher as basic
    import hydra._internal.hydra as single
    from omegaconf import OmegaConf

    run_job = single.run_job
    signature = inspect.signature(run_job)

    def guarded_job(*args, **kwargs):
        given = signature.bind(*args, **kwargs).arguments
        try:  # Hydra refuses a folder that does not resolve itself
            folder = str(OmegaConf.select(given["config"], given["job_dir_key"]))
        except Exception:
            folder = None
        if folder is not None and not _own_folder(Path(os.path.abspath(folder))):
            _refuse(_not_own(given["job_dir_key"], Path(os.path.abspath(folder))))
        return run_job(*args, **kwargs)

    _STARTS.setattr(single, "run_job", guarded_job)
    _STARTS.setattr(basic, "run_job", guarded_job)


def pytest_collection_finish(session) -> None:
    """The collector as ``ragexp.cli.process.own`` sets it for a command's process, once the
    test modules and what they import (mlflow, pandas, Hydra) are loaded, and those objects
    left out of every later collection (``gc.freeze``): with Python's default thresholds the
    full collections rescanned that whole heap every few thousand allocations, in every test
    (an in-process run, ``cli_runs.run_app``, runs as its child would)."""
    import gc

    from ragexp.cli.process import GC_THRESHOLD

    gc.set_threshold(*GC_THRESHOLD)
    gc.freeze()


def pytest_unconfigure(config) -> None:
    """The starts as they were before ``pytest_configure``."""
    _STARTS.undo()


def tracking_uris() -> tuple[str | None, str | None]:
    """``MLFLOW_TRACKING_URI`` and MLflow's own tracking URI (``mlflow.set_tracking_uri``'s,
    which the fluent calls read first; None while mlflow's tracking is not even imported)."""
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    return os.environ.get("MLFLOW_TRACKING_URI"), getattr(utils, "_tracking_uri", None)


def _uris_kept(what: str) -> Iterator[None]:
    """Fails ``what`` (a test, or a module's fixtures) if it leaves the tracking URIs other than
    it found them, after putting them back (so one leak fails one test, not every later one
    that reads the store it left set). Fixtures of a wider scope are set up before and torn
    down after, so what they set does not count."""
    before = tracking_uris()
    yield
    after = tracking_uris()
    if after == before:
        return
    import mlflow

    mlflow.set_tracking_uri(before[1])  # it sets or clears MLFLOW_TRACKING_URI too
    if before[0] is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before[0]
    pytest.fail(f"{what} left the tracking URI changed (MLFLOW_TRACKING_URI, mlflow's own): "
                f"{before} before, {after} after; use the mlflow_store fixture, "
                f"workspaces.tracking_store or workspaces.search_runs, which put it back",
                pytrace=False)


@pytest.fixture(autouse=True)
def tracking_uri_kept(request) -> Iterator[None]:
    """No test leaves the tracking URI changed (``_uris_kept``)."""
    yield from _uris_kept(f"test {request.node.nodeid}")


@pytest.fixture(autouse=True, scope="module")
def module_tracking_uri_kept(request) -> Iterator[None]:
    """No module's fixtures leave the tracking URI changed (``_uris_kept``)."""
    yield from _uris_kept(f"the module-scoped fixtures of {request.node.nodeid}")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def docs():
    """``{doc_id: Document}`` of the shipped corpus."""
    return load_corpus(CORPUS)


@pytest.fixture(scope="session")
def golden(docs):
    """The validated shipped golden set."""
    return load_golden(GOLDEN, docs)


@pytest.fixture(scope="session")
def chunks(docs):
    """The corpus at the default chunking."""
    return MarkdownChunker().chunk(docs.values())


@pytest.fixture
def mlflow_store(tmp_path) -> Iterator[Store]:
    """A fresh sqlite MLflow store in ``tmp_path`` (``workspaces.migrated_store``) that
    ``MLFLOW_TRACKING_URI`` points at for this test (no inherited sweep parent); yields its
    ``Store`` (``folder``, ``uri``, ``db``)."""
    with tracking_store(tmp_path) as store:
        yield store


@pytest.fixture
def unmade_mlflow_store(tmp_path) -> Iterator[Store]:
    """As ``mlflow_store``, but its database does not exist yet: for a test that nothing
    creates one (``mlflow_store`` starts from a copy of a migrated store)."""
    with tracking_store(tmp_path, migrated=False) as store:
        yield store


@pytest.fixture(scope="module")
def module_mlflow_store(tmp_path_factory) -> Iterator[Store]:
    """One sqlite store for a whole module, in a folder of its own, for the modules that record
    their (expensive) runs once and read them in many tests: creating a store's schema alone
    takes seconds. ``MLFLOW_TRACKING_URI`` points at it until the module's last test is done."""
    with tracking_store(tmp_path_factory.mktemp("store")) as store:
        yield store


@pytest.fixture(scope="session")
def minilm(tmp_path_factory):
    """The packaged MiniLM embedder, assembled in a private cache folder."""
    from ragexp.index.embedders import FastEmbedEmbedder

    return FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path_factory.mktemp("fe-cache")))


class FixedRetriever:
    """A retriever that ranks the same ``items`` for every query, scored len(items) - rank: a
    part of a hybrid whose ranking a test writes by hand."""

    name = "fixed"

    def __init__(self, items: list[str]):
        self.items = items

    def search(self, queries, k, cached=True):
        return {q: {item: float(len(self.items) - r) for r, item in enumerate(self.items[:k])}
                for q in queries}


def write_tree(base: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under ``base``; return ``base``."""
    for rel, text in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return base


def jsonl(records: list) -> str:
    """One JSON value per line (strings are written verbatim, for deliberately broken lines)."""
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


# One ragexp session per test (ragexp.session): what a test's runs, stage memory, loaded models
# and sweep leave in the process does not reach the next test, as in a new process.
@pytest.fixture(autouse=True)
def ragexp_session():
    """A fresh ``Session``, made the current one for this test; a test that plays a new
    process part-way (``ragexp serve`` after a sweep) calls ``Session.start()`` again."""
    from ragexp.session import Session

    return Session.start()
