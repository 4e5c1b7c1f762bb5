"""``python -m ragexp [overrides]``: one experiment, or a sweep with ``-m`` (``run.app``); a stop by
SIGTERM or Ctrl-C exits 128 + the signal with the runs it started ended KILLED (before any run,
while importing or composing, it says nothing was run; once every run it started has ended, it
says so), without a traceback; a stop once the work is done (after "sweep done") changes
nothing.

``python -m ragexp COMMAND ...`` where COMMAND is one of ``ragexp``'s (``embed``, ``compare``,
...) runs that command, as ``ragexp COMMAND ...`` does: a bare word is never a Hydra override
(those are ``key=value``), and Hydra read ``embed`` as one that does not parse. A bare word
close to a command (``compar``) is refused naming it, exit 2; ``--version`` is ragexp's."""

import signal
import sys

from ragexp.cli import process
from ragexp.session import Session

process.own()  # before the heavy imports below: they are what the collector's settings are for
Session.start()  # this process's state, before anything records a run or a signal in it

from ragexp.tracking.lifecycle import (  # noqa: E402
    finishing,
    install_signal_handlers,
    signal_received,
    stop_summary,
)


class _Done(SystemExit):
    """A command's exit code, its stop (if any) already said by ``cli.main.main``."""


def _run() -> None:
    """A ``ragexp`` command, or the Hydra app (``run.app.entry``); imported in here, so a
    Ctrl-C during their imports is the one line below, not a traceback."""
    # defer heavy import
    from ragexp.cli import main as cli
    from ragexp.errors import path_problem

    if len(sys.argv) > 1 and (cli.is_command(sys.argv[1]) or sys.argv[1:] == ["--version"]):
        code = cli.main(sys.argv[1:])  # --version: ragexp's, not Hydra's; a stop is said there
        finishing()
        raise _Done(code)
    if len(sys.argv) > 1 and (meant := cli.near_command(sys.argv[1])):
        print(f"error: no command {sys.argv[1]!r} (did you mean {meant!r}? `ragexp --help` "
              f"lists them); an override is key=value", file=sys.stderr)
        sys.exit(2)
    for i, arg in enumerate(sys.argv[1:], 1):  # Hydra's own check of it ends in a traceback
        if arg in ("--config-dir", "-cd") or arg.startswith("--config-dir="):
            folder = arg.split("=", 1)[1] if "=" in arg else (
                sys.argv[i + 1] if i + 1 < len(sys.argv) else None)
            if folder is not None and (problem := path_problem(folder, "dir")):
                print(f"error: --config-dir {folder}: {problem}", file=sys.stderr)
                sys.exit(2)
    install_signal_handlers()  # a Ctrl-C in the imports below is recorded, whatever it becomes
    # defer heavy import
    from ragexp.run.app import entry

    entry()
    finishing()  # a stop from here on, the work done, changes nothing


try:
    _run()
except _Done:
    raise
except BaseException as exc:
    # A library may turn the KeyboardInterrupt into its own error (OmegaConf an AttributeError):
    # the signal recorded by lifecycle's handler says what stopped the process.
    sig = signal_received() or (signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
    if sig is None:
        finishing()  # an error or an exit code on its way out: a stop now changes nothing
        raise
    name = signal.Signals(sig).name
    print(f"\nragexp: stopped by {name}; {stop_summary()}",
          file=sys.stderr)  # on a line of its own, after a progress bar's
    sys.exit(128 + sig)  # open runs are ended by lifecycle's exit hook on the way out
