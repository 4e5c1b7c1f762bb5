"""One piece of work in a forked child process while this process does another (issue #21).

A command's fixed costs come in two kinds that need nothing from each other: Hydra composing
and checking a sweep's jobs, and MLflow's imports (about 1.5 s a process, before its store can
open). On a machine with a second core, ``Beside`` runs the first in a child forked from this
process while this process does the second, and hands back the child's result as if it had run
here: the value, or the exception it raised, pickled through a pipe.

Forking copies the process as it stands, so the child needs no imports or set-up of its own;
it is safe only where the child shares no lock with a thread of the parent. ``Beside`` forks
only on Linux, in a process whose only Python thread is the one calling it (never under a
server or a test harness that runs threads); anywhere else the work runs in this process when
its result is asked for, with the same result. The child leaves with ``os._exit``: no exit hook
of the parent's (ending runs, removing folders) runs twice.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sys
import threading
import traceback
from typing import Callable, Generic, Iterable, TypeVar

from ragexp.errors import RagexpError

T = TypeVar("T")


class ChildLost(RagexpError):
    """The forked child ended without handing back a result (killed by a signal, or out of
    memory)."""


def can_fork() -> bool:
    """Whether ``Beside`` forks here: Linux, and no Python thread but the calling one."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and threading.active_count() == 1)


class Beside(Generic[T]):
    """``work`` running in a forked child from construction on (``can_fork``), else waiting to
    run here; ``result()`` returns what it returned or raises what it raised. Use it as a
    context manager: leaving the block before ``result()`` (an error in this process's own
    work) kills and reaps the child."""

    def __init__(self, work: Callable[[], T], what: str, fork: bool = True):
        """``what``: the work, as the error names it should the child die (``composing the
        sweep's jobs``). ``fork=False`` runs ``work`` here whatever ``can_fork`` says: for a
        caller whose work would use what a child must not share (an open SQLite connection)."""
        self._work, self._what, self._pid, self._read = work, what, None, None
        self.forked = fork and can_fork()  # whether ``work`` runs in a child process
        if self.forked:
            sys.stdout.flush()
            sys.stderr.flush()
            parent = os.getpid()
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _die_with(parent)
                _child(work, write)  # never returns
            os.close(write)
            self._pid, self._read = pid, read

    def result(self) -> T:
        """The work's return value; raises the exception it raised (``ChildLost`` when the
        child died without a word)."""
        if not self.forked:
            return self._work()
        if self._pid is None:
            raise RagexpError("Beside.result: the child's result was already read")
        with os.fdopen(self._read, "rb") as pipe:
            self._read = None
            data = pipe.read()
        pid, self._pid = self._pid, None
        _, status = os.waitpid(pid, 0)
        if not data:
            code = os.waitstatus_to_exitcode(status)
            how = (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
            raise ChildLost(f"the child process {self._what} (pid {pid}) ended without a result "
                            f"({how}): nothing of its work was kept")
        ok, value = pickle.loads(data)
        if ok:
            return value
        raise value

    def meanwhile(self, steps: Iterable[Callable[[], object]]) -> int:
        """Run ``steps`` here, in order, while the child works, and return how many ran: each
        starts only if the child has not finished yet (its pipe is readable once it writes its
        result or dies), so this process fills the time it would spend waiting in ``result``
        and gives up what it cannot fit. Meant for work this process will do anyway (imports
        it uses later): a step under way when the child finishes runs to its end, a step not
        begun is left for later. Runs none where nothing was forked (``work`` has not run yet
        and runs at ``result``) or the result was already read. A step's exception is
        raised."""
        if not self.forked or self._read is None:
            return 0
        ran = 0
        for step in steps:
            if select.select([self._read], [], [], 0)[0]:
                break
            step()
            ran += 1
        return ran

    def __enter__(self) -> "Beside[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._pid = None


def _die_with(parent: int) -> None:
    """In the child: be killed when the parent dies (Linux's ``PR_SET_PDEATHSIG``), so a
    parent ended by SIGTERM or SIGKILL leaves no child composing on for tens of seconds; and
    leave now if it is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (AttributeError, OSError):  # no prctl in this C library: the pipe still breaks
        pass
    if os.getppid() != parent:
        os._exit(1)


def _child(work: Callable[[], object], write: int) -> None:
    """In the child: run ``work``, write ``(ok, value or exception)`` pickled to ``write``,
    leave with ``os._exit``. The exception carries the child's traceback as a note (a pickled
    exception has none of its own); one that does not pickle is handed back as a
    ``RagexpError`` with its type and text (as is one that pickles but does not load back)."""
    try:
        try:
            payload = pickle.dumps((True, work()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
            if hasattr(exc, "add_note"):  # Python 3.11+: the child's traceback, for its reader
                exc.add_note("raised in a child process (run.forked.Beside):\n"
                             + "".join(traceback.format_exception(exc)).rstrip())
            try:
                payload = pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
                pickle.loads(payload)  # an exception whose __init__ takes other arguments
            except Exception:  # noqa: BLE001 - pickles but does not load back
                payload = pickle.dumps((False, RagexpError(f"{type(exc).__name__}: {exc}")))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)
