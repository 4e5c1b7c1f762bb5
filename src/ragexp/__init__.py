"""ragexp: measure which retrieval configuration of a RAG system actually works, and by how much.

Packages by role, in the order data flows (``LAYERS``, bottom first). A module may import the
shared records, errors, settings and session here and any package before its own, never one after it
(``tests/unit/test_architecture.py`` holds this): ``text`` -> ``data`` -> ``index`` -> ``stages`` ->
``answer`` -> ``generate`` -> ``evaluation`` -> ``tracking`` -> ``config`` -> ``decide`` ->
``report`` -> ``run`` -> ``serving`` -> ``cli``. Module paths of ragexp before that layout
(``ragexp.retrievers``, ...) stay loadable through ``ragexp.legacy``, so recorded runs and
champions keep working.

A command (``python -m ragexp``, ``-m ragexp.cli.main``, the ``ragexp`` script) stopped while
it is still starting exits 128 + the signal with one line, as a stop does later: this file's
first lines set that (a module of its own would be imported in a window without it), until the
command takes a stop itself (``handed_over``). A process that only imports ragexp keeps its
handlers.
"""

# Before this guard, a Ctrl-C in the first 20-40 ms (these imports, ``cli.process``,
# ``tracking.lifecycle``, the script's ``cli.main``) printed Python's traceback and the process
# died by the signal (exit -2). What runs before this file is the interpreter's own: a stop
# before Python handles SIGINT ends the process without a word (a shell says 130 all the same),
# one in a ``.pth`` file of site-packages (an editable install's finder) in Python's traceback.
# ``_signal``, not ``signal``: signal.py imports ``enum`` (1.5-4 ms), time without the guard;
# ``_signal``, ``os`` and ``sys`` are loaded before any package is.
import _signal
import os
import sys

NOTHING_RUN = "no run was created, nothing was run"
# The modules whose start ``handed_over`` ends: ``-m`` names, and the console script's name.
COMMAND_MODULES, SCRIPT = ("ragexp", "ragexp.cli.main"), "ragexp"
_STOPS = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}


def starting_command() -> str | None:
    """Which ragexp command this process is starting as: the ``-m`` module (one of
    ``COMMAND_MODULES``: while Python imports it, ``sys.argv[0]`` is ``-m`` and the name stands
    where ``sys.argv`` begins in ``sys.orig_argv``) or ``SCRIPT`` (the main module is a file of
    that name); else None: ragexp imported as a library, or by a worker that multiprocessing
    started (its main module is ``-c``'s while it runs the script as ``__mp_main__``)."""
    argv, orig = sys.argv, getattr(sys, "orig_argv", [])
    if argv and argv[0] == "-m" and len(orig) >= len(argv):
        name = orig[-len(argv)]
        name = name.split("m", 1)[1] if name.startswith("-") else name  # -mragexp, -Imragexp
        return name if name in COMMAND_MODULES else None
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if os.path.basename(main_file) in (SCRIPT, SCRIPT + ".exe"):
        return SCRIPT
    return None


def _stopped_while_starting(signum: int, frame) -> None:
    """The one line on stderr, written to the descriptor (a stream may be mid-write under a
    handler), and exit 128 + ``signum`` at once: no run, file or exit hook of ragexp's exists
    yet. Raising instead could come out of a C extension's import as an ``ImportError``."""
    os.write(2, f"\nragexp: stopped by {_STOPS[signum]}; {NOTHING_RUN}\n".encode())
    os._exit(128 + signum)


def handed_over() -> bool:
    """The command takes a stop itself from here (a run replaces the guard with
    ``tracking.lifecycle.install_signal_handlers``; ``cli.main.main`` does too): SIGINT and
    SIGTERM get back the handlers they had before the guard (Python's ``KeyboardInterrupt``,
    the default) where the guard is still set. Returns whether it was set: False in a process
    the guard left alone (a library import, a test calling ``cli.main.main``) or already
    handed over."""
    guarded = False
    for sig, before in _BEFORE_GUARD:
        if _signal.getsignal(sig) is _stopped_while_starting:
            _signal.signal(sig, before)
            guarded = True
    return guarded


# (signal, its handler before the guard) for each signal the guard took: none unless starting
_BEFORE_GUARD = tuple((sig, _signal.signal(sig, _stopped_while_starting)) for sig in _STOPS) \
    if starting_command() is not None else ()

from ragexp import legacy  # noqa: E402

__version__ = "0.1.0"
LAYERS = ("text", "data", "index", "stages", "answer", "generate", "evaluation", "tracking",
          "config", "decide", "report", "run", "serving", "cli")

legacy.install()
