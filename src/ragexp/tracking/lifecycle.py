"""Which process owns a run, what happens to its open runs when it is stopped, and how runs
left ``RUNNING`` by a process that is gone are found and closed.

- Signals: ``install_signal_handlers`` turns SIGTERM into ``Interrupted`` (a ``BaseException``,
  like ``KeyboardInterrupt`` for SIGINT), so the run context manager in ``tracking`` sees it and
  ends its run ``KILLED``; runs that no context manager owns (a sweep's parent) are registered
  with ``opened`` and closed by an exit hook, ``KILLED`` after a signal, ``FAILED`` otherwise.
- Ownership: every run is tagged with the pid, the host and the process start time
  (``/proc/<pid>/stat``, so a reused pid is not mistaken for the owner). ``owner_state`` says
  whether that process is alive, gone, or not checkable from here (another host).
- Clean-up: ``close_abandoned`` marks ``FAILED`` every ``RUNNING`` run whose owner is gone, with
  the reason as the ``ragexp.error`` tag and an end time; runs of a live process, or of another
  host, are left alone and listed.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ragexp import NOTHING_RUN
from ragexp.session import Session

log = logging.getLogger(__name__)

PID_TAG, HOST_TAG, START_TAG = "ragexp.pid", "ragexp.host", "ragexp.pid_start"


class Interrupted(BaseException):
    """SIGTERM, raised in the main thread (not an ``Exception``: no handler meant for job
    failures may swallow it)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def interruption(exc: BaseException) -> bool:
    """True when ``exc`` is, or was caused by, a stop request (SIGTERM, SIGINT/Ctrl-C)."""
    return isinstance(exc, (Interrupted, KeyboardInterrupt)) or signal_received() is not None


def _on_signal(signum, frame) -> None:
    Session.current().signals.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signum)


def install_signal_handlers() -> None:
    """SIGTERM/SIGINT raise in the main thread; an exit hook closes the runs still registered
    in the current session. Once per session; outside the main thread (a launcher's worker
    thread) only the hook is set. Replaces the start-up guard (``ragexp.handed_over``): from
    here a stop is the run's."""
    session = Session.current()
    if session.handlers_installed:
        return
    session.handlers_installed = True
    atexit.register(close_open_runs, session)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)


def signal_received() -> int | None:
    """The first stop signal this process received, if any. A signal can surface as another
    exception (raised inside a C extension's import it becomes ``ImportError``), so the run's
    end status is decided by this, not by the exception's type."""
    received = Session.current().signals
    return received[0] if received else None


def reraise_if_stopped() -> None:
    """Raise ``Interrupted`` when a stop signal was received: in a handler for job failures
    (the failure was really a stop, so a sweep stops instead of going on to the next job), and
    where a run begins or ends (a stop raised inside a weakref callback or ``__del__`` is only
    printed by Python, and the process went on to finish its run and exit 0)."""
    sig = signal_received()
    if sig is not None:
        raise Interrupted(sig)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGTERM/SIGINT while a run is being ended or a store created, so neither is cut
    short; the first signal that arrived meanwhile is delivered on leaving, to the handlers
    there were before. Python runs signal handlers in the main thread, so this swaps them
    there (elsewhere it holds nothing): blocking the signals in the main thread did not hold
    them, as the kernel hands a process's signal to any thread that does not block it (the
    native threads numpy's BLAS starts at import), whose C handler makes the main thread raise
    all the same. A Ctrl-C while MLflow created a new sqlite store left it half-made. A second
    signal is not held: whoever sends it insists (a store that does not answer can keep a
    run's end waiting a minute), and the handlers there were before take it at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def hold(signum, frame) -> None:
        held.append(signum)
        if len(held) > 1:
            restore()
            signal.raise_signal(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        restore()
        if len(held) == 1:
            signal.raise_signal(held[0])


def opened(run_id: str, close: Callable[[str, str], None]) -> None:
    """Register a run this session must end; ``close(status, reason)`` ends it."""
    session = Session.current()
    session.open_runs[run_id] = close
    session.opened_runs.append(run_id)


def closed(run_id: str, status: str = "") -> None:
    """Take a run off the exit hook's list: its owner ended it, ``status`` says how (a run
    ended ``KILLED`` counts in ``stopped_runs``)."""
    _closed(Session.current(), run_id, status)


def _closed(session: Session, run_id: str, status: str) -> None:
    session.open_runs.pop(run_id, None)
    if status == "KILLED":
        session.killed_runs.append(run_id)


def stop_summary() -> str:
    """What a stop did to the runs this process registered (``opened``: a sweep's parent and
    each job's), for its last line: how many a stop ends KILLED (``stopped_runs``) of how many
    it started. A stop between a sweep's last job and its end said "the runs it started are
    ended KILLED" of a parent KILLED and jobs FINISHED."""
    killed, started = stopped_runs(), len(Session.current().opened_runs)
    if not started:
        return NOTHING_RUN
    if not killed:
        return "every run it started had ended before the stop (none is ended KILLED)"
    if killed >= started:
        return "the runs it started are ended KILLED"
    return (f"{killed} of the {started} runs it started {'is' if killed == 1 else 'are'} ended "
            f"KILLED; the others had ended before the stop")


def stopped_runs() -> int:
    """How many of this process's runs a stop ends ``KILLED``: those already ended so, and those
    still registered, which the exit hook ends so. A stop that comes once every run has ended
    (a sweep's page written, its parent ended) ends none, and saying "the runs it started are
    ended KILLED" then misled: they were ``FINISHED``."""
    session = Session.current()
    return len(session.killed_runs) + len(session.open_runs)


def finishing() -> None:
    """From here this process only exits, its work done and its runs ended: a stop signal now
    changes nothing, neither a run nor the exit status; a second takes the default action at
    once (a teardown that hangs can still be stopped). Before, a Ctrl-C in the last
    milliseconds (after "sweep done") escaped the entry point as a ``KeyboardInterrupt``: the
    process died by the signal without a word, or printed "Exception ignored" from an exit
    hook. In the main thread only (Python runs handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        return
    late: list[int] = []

    def after_the_work(signum, frame) -> None:
        late.append(signum)
        if len(late) > 1:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, after_the_work)
    Session.current().finishing = True


def _ignore_stops_while_python_exits() -> None:
    """The last exit hook (registered when this module is first imported, before any other
    of ragexp's or MLflow's): after ``finishing``, ignore stop signals for what is left of the
    interpreter's exit. Python then puts back the default action of every signal it handles
    and frees its modules (10-50 ms for ragexp's), and a Ctrl-C meanwhile killed the process by
    the signal (exit -2, said nowhere) however its work had ended. Ignored signals stay
    ignored there."""
    if Session.current().finishing and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


atexit.register(_ignore_stops_while_python_exits)


def close_open_runs(session: Session | None = None) -> None:
    """Exit hook: end every run still registered in ``session`` (the current one unless
    given), ``KILLED`` after a stop signal, else ``FAILED`` (the process is exiting on an
    error before the run's owner could end it)."""
    session = session or Session.current()
    sig = session.signals[0] if session.signals else None
    status, reason = ("KILLED", f"stopped by {signal.Signals(sig).name}") if sig else \
        ("FAILED", "the process exited before the run was ended")
    for run_id, close in list(session.open_runs.items()):
        try:
            close(status, reason)
        except Exception as exc:  # the store may be the reason we are exiting
            log.error("could not end run %s as %s: %s", run_id, status, exc)
        _closed(session, run_id, status)


def _start_ticks(pid: int) -> str:
    """Process start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_tags() -> dict[str, str]:
    """Tags naming the process that owns a run."""
    pid = os.getpid()
    return {PID_TAG: str(pid), HOST_TAG: socket.gethostname(), START_TAG: _start_ticks(pid)}


def owner_state(tags: dict[str, str]) -> str:
    """``"alive"``, ``"gone"``, or ``"unknown"`` (no owner tags, or another host)."""
    pid, host = tags.get(PID_TAG), tags.get(HOST_TAG)
    if not pid or host != socket.gethostname():
        return "unknown"
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:  # exists, owned by another user
        pass
    start = tags.get(START_TAG)
    if start and _start_ticks(int(pid)) not in ("", start):
        return "gone"  # the pid was reused by a later process
    return "alive"


def close_abandoned(client, experiment_ids: list[str], dry_run: bool = False):
    """Close (``FAILED``, reason tagged, end time now) the ``RUNNING`` runs of these experiments
    whose owning process is gone. Returns ``(closed, left)``: the runs closed (or that would be,
    with ``dry_run``) and ``(run, why)`` for the ``RUNNING`` runs left alone."""
    runs = client.search_runs(experiment_ids, "attributes.status = 'RUNNING'", max_results=50000)
    closed_runs, left = [], []
    for run in runs:
        state = owner_state(run.data.tags)
        if state != "gone":
            why = ("its process is alive" if state == "alive" else
                   f"owner not checkable from here (host {run.data.tags.get(HOST_TAG, '?')}, "
                   f"pid {run.data.tags.get(PID_TAG, '?')})")
            left.append((run, why))
            continue
        closed_runs.append(run)
        if dry_run:
            continue
        reason = (f"abandoned: process {run.data.tags[PID_TAG]} on "
                  f"{run.data.tags[HOST_TAG]} ended without closing the run (hard kill or crash);"
                  f" closed at {time.strftime('%Y-%m-%d %H:%M:%S')}")
        client.set_tag(run.info.run_id, "ragexp.error", reason)
        client.set_tag(run.info.run_id, "ragexp.closed_by", "cleanup")
        client.set_terminated(run.info.run_id, "FAILED")
    return closed_runs, left
