"""A stop while ``python -m ragexp`` or the ``ragexp`` script is still starting (``ragexp``'s
start-up guard): exit 128 + the signal, one line, no traceback, as a stop anywhere later.
Before, a Ctrl-C in the first 20-40 ms (``ragexp/__init__``, ``cli.process``,
``tracking.lifecycle``, the script's import of ``cli.main``) printed Python's
``KeyboardInterrupt`` traceback and the process died by the signal (exit -2).

The stop comes from inside the process at a chosen import (a ``sitecustomize`` hook that
signals its own process when that module is looked up), so each case is exact rather than a
matter of timing; a loop of delays after the start checks the same from outside."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runs import cli_env

import ragexp

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(ragexp.__file__).resolve().parent
# The stop hook: on the first look-up of module $STOP_AT, send $STOP_SIGNAL to this process;
# with $RECORD set, write every module looked up there, in order.
HOOK = """
import os, sys

class _Hook:
    fired = False

    def find_spec(self, name, path=None, target=None):
        if os.environ.get("RECORD"):
            with open(os.environ["RECORD"], "a") as fh:
                fh.write(name + "\\n")
        if name == os.environ.get("STOP_AT") and not _Hook.fired:
            _Hook.fired = True
            open(os.environ["FIRED"], "w").close()
            os.kill(os.getpid(), int(os.environ.get("STOP_SIGNAL", "2")))
        return None

sys.meta_path.insert(0, _Hook())
"""
# What pip writes for ``[project.scripts] ragexp = "ragexp.cli.main:program"``.
SCRIPT = """import sys
from ragexp.cli.main import program
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(program())
"""


def command(tmp: Path, entry: str, *args: str) -> list[str]:
    """``python -m ragexp ARGS`` (``entry`` "module") or the console script (``script``)."""
    if entry == "module":
        return [sys.executable, "-m", "ragexp", *args]
    script = tmp / "bin" / "ragexp"
    script.parent.mkdir(exist_ok=True)
    script.write_text(SCRIPT)
    return [sys.executable, str(script), *args]


def hooked_env(tmp: Path, **extra: str) -> dict[str, str]:
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    env = cli_env(tmp)
    env["PYTHONPATH"] = ":".join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    return {**env, "FIRED": str(tmp / "fired"), **extra}


def stopped_at(tmp: Path, entry: str, module: str, *args: str,
               sig: int = signal.SIGINT) -> subprocess.CompletedProcess:
    (tmp / "fired").unlink(missing_ok=True)
    done = subprocess.run(command(tmp, entry, *args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=hooked_env(tmp, STOP_AT=module,
                                                      STOP_SIGNAL=str(int(sig))))
    assert (tmp / "fired").exists(), f"{module} was never imported: {done.stderr[-1000:]}"
    return done


def start_imports(tmp: Path, entry: str) -> list[str]:
    """The modules ``ragexp --version`` looks up once ragexp's own code runs (after the
    look-up of ``ragexp`` itself: what comes before is the interpreter's)."""
    record = tmp / f"imports-{entry}.txt"
    done = subprocess.run(command(tmp, entry, "--version"), cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=hooked_env(tmp, RECORD=str(record)))
    assert done.returncode == 0, done.stderr[-2000:]
    names = record.read_text().split()
    first = max(i for i, n in enumerate(names) if n == "ragexp")
    return list(dict.fromkeys(names[first + 1:]))


def assert_one_stop_line(done: subprocess.CompletedProcess, name: str = "SIGINT") -> None:
    assert done.returncode == 128 + signal.Signals[name], (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ragexp: stopped by {name}"), done.stderr


@pytest.mark.parametrize("entry", ["module", "script"])
def test_a_stop_at_each_first_import_of_ragexp_exits_130_in_one_line(tmp_path, entry):
    """Every ragexp module the start looks up (``ragexp.legacy`` first, inside
    ``ragexp/__init__``) and the standard ones between them: exit 130, one line."""
    names = start_imports(tmp_path, entry)
    ours = [n for n in names if n.startswith("ragexp.")][:8]
    assert "ragexp.legacy" in ours and "ragexp.cli.main" in ours
    others = [n for n in names[:names.index(ours[-1])] if not n.startswith("ragexp")][::6]
    for module in ours + others:
        assert_one_stop_line(stopped_at(tmp_path, entry, module, "--version"))


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["module", "script"])
def test_a_stop_at_any_import_of_a_command_exits_130_in_one_line(tmp_path, entry):
    """The whole of ``ragexp --version``'s imports, one in every four (hundreds: argparse,
    Hydra, numpy and its C extensions, where a ``KeyboardInterrupt`` may come out as another
    error): exit 130, one line, wherever it lands."""
    for module in start_imports(tmp_path, entry)[::4]:
        assert_one_stop_line(stopped_at(tmp_path, entry, module, "--version"))


def test_sigterm_while_starting_exits_143_in_one_line(tmp_path):
    done = stopped_at(tmp_path, "module", "ragexp.tracking.lifecycle", "--version",
                      sig=signal.SIGTERM)
    assert_one_stop_line(done, "SIGTERM")
    assert done.stderr.strip().endswith("no run was created, nothing was run")


def test_a_stop_while_a_run_starts_says_nothing_was_run(tmp_path):
    """``python -m ragexp`` (a run, not a command): stopped as it imports its Hydra app."""
    done = stopped_at(tmp_path, "module", "ragexp.run.app", "embedder=hash", "retriever=bm25",
                      f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_stop_line(done)
    assert done.stderr.strip().endswith("no run was created, nothing was run")


@pytest.mark.parametrize("entry", ["module", "script"])
def test_ctrl_c_at_small_delays_after_the_start_never_shows_a_traceback_of_ragexp(
        tmp_path, entry):
    """SIGINT 0-60 ms (and more) after the process starts, from outside. A stop that lands in ragexp's
    code exits 130 with one line; one that lands before the interpreter runs ragexp's first
    line is the interpreter's own (before Python handles SIGINT: death by the signal without a
    word; in a ``.pth`` file of site-packages, such as an editable install's finder: Python's
    traceback), and no frame of it is in ragexp's source. A stop after the command ended
    changes nothing (exit 0)."""
    args, env = command(tmp_path, entry, "--version"), cli_env(tmp_path)
    ours = 0
    # every 3 ms up to 60 ms, then further out (a loaded machine starts slower) until three
    # stops have landed in ragexp's code
    for delay in [d / 1000 for d in [*range(0, 61, 3), *range(100, 1001, 50)]]:
        if delay > 0.06 and ours >= 3:
            break
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(args, proc.returncode, out, err)
        if proc.returncode == 130:
            assert_one_stop_line(done)
            ours += 1
        elif proc.returncode == 0:
            assert out.strip() == f"ragexp {ragexp.__version__}"
        else:
            assert str(SRC) not in err and "ragexp: stopped" not in err, (delay, err[-2000:])
    assert ours >= 3, "too few stops landed in ragexp's start to say anything"


def test_only_a_command_sets_the_start_up_guard(monkeypatch):
    """``python -m ragexp``, ``-m ragexp.cli.main`` (also written ``-mragexp``) and the
    script are commands; ``python -m`` of anything else, a script of another name and a
    library import are not, and keep their handlers."""
    def as_started(argv, orig, main_file=None):
        monkeypatch.setattr(sys, "argv", argv)
        monkeypatch.setattr(sys, "orig_argv", orig)
        monkeypatch.setattr(sys.modules["__main__"], "__file__", main_file, raising=False)
        return ragexp.starting_command()

    assert as_started(["-m", "embedder=hash"], ["py", "-m", "ragexp", "embedder=hash"]) == "ragexp"
    assert as_started(["-m", "x"], ["py", "-X", "dev", "-mragexp.cli.main", "x"]) == \
        "ragexp.cli.main"
    assert as_started(["-m", "-q"], ["py", "-m", "pytest", "-q"]) is None
    assert as_started(["-m"], ["py", "-m", "ragexp.run.app"]) is None
    assert as_started(["/venv/bin/ragexp", "compare"], ["py", "/venv/bin/ragexp", "compare"],
                      "/venv/bin/ragexp") == "ragexp"
    assert as_started(["/venv/bin/pytest"], ["py", "/venv/bin/pytest"], "/venv/bin/pytest") is None
    assert as_started(["/venv/bin/ragexp"], ["py", "-c", "..."], None) is None  # a spawned worker


def test_importing_ragexp_keeps_the_interpreters_handlers(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import signal, ragexp, ragexp.cli.main; "
                           "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
                           " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"],
                          cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]


@pytest.mark.parametrize("entry", ["module", "script"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_a_command_s_work_is_one_line_and_128_plus_the_signal(tmp_path, entry,
                                                                              sig):
    """Past the start-up guard a command took a Ctrl-C with Python's own handler and SIGTERM
    not at all: SIGTERM ended ``ragexp questions check`` by the signal (-15) without a word."""
    done = stopped_at(tmp_path, entry, "ragexp.data.golden", "questions", "check", sig=sig)
    assert done.returncode == 128 + sig, done.stderr
    assert done.stderr.strip().splitlines() == [f"ragexp: stopped by {signal.Signals(sig).name}"]
    assert "Traceback" not in done.stderr and not done.stdout


def test_a_stop_a_library_swallowed_or_wrapped_still_ends_the_command(monkeypatch, capsys):
    """A Ctrl-C raised inside a garbage-collection callback is printed as "Exception ignored"
    and lost: ``ragexp compare`` printed its whole table and exited 0. Raised in a class body's
    ``__set_name__`` it came out as a ``RuntimeError``: exit 1 with a traceback. The recorded
    signal decides."""
    from ragexp.cli import main as cli
    from ragexp.session import Session

    monkeypatch.setattr(Session.current(), "signals", [signal.SIGINT])
    assert cli.main(["questions", "check"]) == 130  # the work ran on to its end
    assert capsys.readouterr().err.strip().splitlines()[-1] == "ragexp: stopped by SIGINT"

    def wrapped(args, pyfunc=False):
        raise RuntimeError("Error calling __set_name__ on 'PydanticDescriptorProxy'")

    monkeypatch.setattr(cli, "_engine", wrapped)
    monkeypatch.setattr(Session.current(), "signals", [signal.SIGTERM])
    assert cli.main(["search", "x", "--run", "r1"]) == 143
    assert capsys.readouterr().err.strip() == "ragexp: stopped by SIGTERM"
    monkeypatch.setattr(Session.current(), "signals", [])
    with pytest.raises(RuntimeError):  # no stop: the error is the error
        cli.main(["search", "x", "--run", "r1"])
