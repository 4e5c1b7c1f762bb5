"""Run the ``ragexp`` CLI in a child process on a throwaway store: the tracking URI, cache and
environment every subprocess test needs, in one place; or a module's command line
(``run_here``) or ragexp's Hydra app (``run_app``) in this process, where a child would show
nothing more."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Callable, Iterator

import pytest

from workspaces import migrated_store, store_uri, tracking_store

ROOT = Path(__file__).resolve().parents[1]


def cli_env(tmp: Path, uri: str | None = None) -> dict[str, str]:
    """The environment of a child ``ragexp``: the sqlite store in ``tmp`` (``store_uri``) or
    the store at ``uri``, offline."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri or store_uri(tmp),
           "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}
    return env


# Hydra's output folders: a run's (``outputs/<date>/<time>`` by default) and a sweep's
# (``multirun/<date>/<time>``), relative to the launch folder.
OUTPUT_DIRS = {"hydra.run.dir": "outputs", "hydra.sweep.dir": "multirun"}


def own_dirs(tmp: Path, args: tuple[str, ...] | list[str]) -> list[str]:
    """``hydra.run.dir=`` and ``hydra.sweep.dir=`` folders of one launch in ``tmp``, each one
    not there yet (``tmp/outputs/N``, ``tmp/multirun/N``), as Hydra's dated default is new to
    each launch; for the keys ``args`` does not set itself. Hydra's default, relative to the
    repository root, gave two tests started in the same second (pytest-xdist) one folder,
    which a refused run then removed under the other (conftest's ``_shared_outputs`` refuses
    a launch of the app whose folders are not the test's own)."""
    given = {arg.split("=", 1)[0].lstrip("+") for arg in args if "=" in arg}
    dirs = []
    for key, name in OUTPUT_DIRS.items():
        if key not in given:
            n = 0
            while (tmp / name / str(n)).exists():
                n += 1
            dirs.append(f"{key}={tmp / name / str(n)}")
    return dirs


def run_ragexp(tmp: Path, *args: str, timeout: int = 900,
               migrated: bool = True) -> subprocess.CompletedProcess:
    """``python -m ragexp ARGS cache_dir=TMP/cache progress=false`` from the repository root,
    on the ``migrated_store`` in ``tmp`` (``migrated=False``: on a store not created yet, for a
    test that the command creates none), its Hydra folders in ``tmp`` (``own_dirs``) unless
    ``ARGS`` set them."""
    uri = migrated_store(tmp) if migrated else store_uri(tmp)
    return subprocess.run([sys.executable, "-m", "ragexp", *args, *own_dirs(tmp, args),
                           f"cache_dir={tmp / 'cache'}", "progress=false"], cwd=ROOT,
                          env=cli_env(tmp, uri), capture_output=True, text=True,
                          timeout=timeout)


def run_here(main: Callable[[list[str]], int | None], argv: list[str],
             cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``main(argv)`` (a module's command line, e.g. ``ragexp.data.golden.main``) run in this
    process from ``cwd``, reported as ``subprocess.run(..., capture_output=True, text=True)``
    reports ``python -m MODULE ARGV``: the exit code (returned, or a ``SystemExit``'s, whose
    message goes to stderr with code 1 as Python's would), stdout and stderr. For a command
    whose process shows nothing more: no signal, no start-up, no console script."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err):
        mp.chdir(cwd)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
            if isinstance(code, str):
                print(code, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess(argv, code or 0, out.getvalue(), err.getvalue())


@contextmanager
def process_kept() -> Iterator[None]:
    """What a child's process keeps to itself, put back after ragexp's Hydra app ran in this
    one: the root logger's handlers and level (Hydra's job logging replaces them, a file
    handler on the job's log among them), the SIGINT/SIGTERM handlers
    (``lifecycle.install_signal_handlers``), Hydra's global state (``GlobalHydra``,
    ``HydraConfig``, which ``run.app.run_logged`` reads), ``sys.argv``, the environment (a
    sweep sets ``MLFLOW_TRACKING_URI``) and the current folder."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    argv, environ, cwd = sys.argv[:], dict(os.environ), os.getcwd()
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        for sig, handler in signals.items():
            signal.signal(sig, handler)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
        sys.argv[:] = argv
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)


def run_app(tmp: Path, *args: str, cwd: Path = ROOT,
            migrated: bool = True) -> subprocess.CompletedProcess:
    """``run_ragexp`` in this process: ragexp's Hydra app (``run.app.entry``, what ``python -m
    ragexp ARGS`` runs) from ``cwd`` on the store in ``tmp`` (``migrated_store``; with
    ``migrated=False`` one not created yet), its Hydra folders in ``tmp`` (``own_dirs``),
    ``cache_dir=TMP/cache progress=false`` unless ``ARGS`` set them; reported as
    ``subprocess.run(..., capture_output=True, text=True)`` reports the child: the exit code
    (a ``SystemExit``'s; 1 after a traceback), stdout and stderr. It runs in a
    ``ragexp.session`` of its own, as a child would (its stage memory, models and sweep are
    neither the test's nor the next ``run_app``'s), and leaves the process as it was
    (``process_kept``). For a run or sweep whose process shows nothing more: no signal, no
    start-up, no console script, no variable read at import."""
    from ragexp.run import app
    from ragexp.session import Session

    defaults = [f"{key}={value}" for key, value in (("cache_dir", tmp / "cache"),
                                                    ("progress", "false"))
                if not any(arg.startswith(f"{key}=") for arg in args)]
    argv = [*args, *own_dirs(tmp, args), *defaults]
    with tracking_store(tmp, migrated=migrated), process_kept(), \
            pytest.MonkeyPatch.context() as mp:
        os.environ.update({"MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"})
        sys.argv[:] = ["ragexp", *argv]
        mp.setattr(Session, "_current", None)  # the child's own session; the test's after
        Session.start()
        return run_here(lambda _: _as_python_exits(app.entry), argv, cwd=cwd)


def _reopened_handlers() -> None:
    """Point every plain logging stream handler whose stream an earlier in-process run closed (a
    library's own default handler, Optuna's, bound to the stderr that run captured) at this
    run's stderr, as a new process would find it: else its first record prints ``--- Logging
    error ---`` with a traceback."""
    loggers = [v for v in logging.Logger.manager.loggerDict.values()
               if isinstance(v, logging.Logger)]
    for handler in (h for lg in loggers for h in lg.handlers):
        # a plain StreamHandler only: pytest's capture handlers (subclasses) are its own
        if type(handler) is logging.StreamHandler and getattr(handler.stream, "closed", False):
            handler.stream = sys.stderr  # not setStream: it flushes the closed stream first


def _as_python_exits(main: Callable[[], None]) -> None:
    """``main()``; an exception it raises (not ``SystemExit``) printed as Python prints one
    that ends a process, which then exits 1."""
    _reopened_handlers()
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
