"""What a failed job tells its user.

One line a user can act on goes to the console, the sweep's summary and the run's
``ragexp.error`` tag; the full traceback goes to the run's ``error.txt`` and to the job's log
file, and to the console only with ``verbose=true``. The line is the error a stage raised, with
Hydra's instantiation wrapper taken off but not the stage's own message: ragexp's errors carry
the hint (``embedder.model_path=DIR``) and chain the library error they explain.
"""

from __future__ import annotations

import logging
import os
import traceback

from hydra.errors import InstantiationException

log = logging.getLogger("ragexp")
FAILED_RUN = "ragexp_failed_run"  # set on an exception a run was ended FAILED with (its id)


def unwrapped(exc: BaseException) -> BaseException:
    """The error under any Hydra ``InstantiationException`` wrappers (a stage's constructor's
    own), or ``exc`` itself."""
    root = exc
    while isinstance(root, InstantiationException) and root.__cause__ is not None:
        root = root.__cause__
    return root


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line, for the error under any Hydra instantiation wrappers."""
    root = unwrapped(exc)
    return f"{type(root).__name__}: {' '.join(str(root).split())}"


def to_log_files(text: str) -> list[str]:
    """Write ``text`` to every file handler of the root logger (Hydra's ``<job>.log``), not to
    the console; returns the files written."""
    record = logging.LogRecord("ragexp", logging.ERROR, __file__, 0, "%s", (text,), None)
    files = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.baseFilename != os.devnull:
            handler.handle(record)
            files.append(handler.baseFilename)
    return files


def report(exc: BaseException, verbose: bool) -> str:
    """Log a job's failure: the ``describe`` line on the console, the traceback in the log
    file(s) (and on the console when ``verbose``). Returns the line."""
    line = describe(exc)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if verbose:
        log.error("job failed: %s\n%s", line, trace)
        return line
    files = to_log_files(trace)
    run_id = getattr(exc, FAILED_RUN, None)  # set by tracking.runs when a run ended with it
    places = ([f"run {run_id[:8]}'s error.txt"] if run_id else []) + files
    where = f"; traceback in {' and '.join(places)}" if places else ""
    log.error("job failed: %s%s (verbose=true prints it)", line.rstrip("."), where)
    return line
