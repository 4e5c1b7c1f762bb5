"""The start-up row of ``make bench`` (issue #41): what ``ragexp search`` and ``ask`` import
before they answer, ``import ragexp.serving.engine`` in a fresh interpreter, against what the
engine imported when serving borrowed the runner's ranking: the same plus ``ragexp.run`` (its
pipeline) and pandas. Both are fresh processes, run side by side (ABBA), each measured by the
CPU seconds it used (user + sys, ``RUSAGE_CHILDREN``): an import is one thread's work, so on an
idle machine that is its wall time, while on a shared one the wall time is mostly the wait for a
core. The row keeps each one's least, and checks first that the engine alone loads neither (a
test holds that too: ``tests/unit/test_architecture.py``).

``python -m tools.bench --only imports`` runs this row alone.
"""

from __future__ import annotations

import resource
import subprocess
import sys

from tools.bench_wall import _env

NOW = "import ragexp.serving.engine"
# what the engine's import loaded before serving stopped importing the runner
BEFORE = "import ragexp.serving.engine, ragexp.run.pipeline, pandas"
LOADED = ("import sys\n" + NOW + "\nprint(sorted(m for m in sys.modules if m.split('.')[0] == "
          "'pandas' or m == 'ragexp.run' or m.startswith('ragexp.run.')))")


def _python(code: str) -> tuple[str, float]:
    """Run ``code`` in a fresh interpreter (this checkout's ``src`` first); its stdout and the
    CPU seconds (user + sys) it used. Raises ``RuntimeError`` when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"python -c {code!r} failed ({done.returncode}): "
                           f"{done.stderr[-800:]}")
    return done.stdout, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def least_cpu(codes: dict[str, str], repeats: int) -> dict[str, float]:
    """The least CPU seconds of each code's fresh interpreter over ``repeats`` rounds, after one
    warm-up of each (the page cache warm for all), in alternating order (ABBA...)."""
    for code in codes.values():
        _python(code)
    least = {name: float("inf") for name in codes}
    for r in range(repeats):
        for name in (list(codes) if r % 2 == 0 else list(reversed(codes))):
            least[name] = min(least[name], _python(codes[name])[1])
    return least


def import_rows(make_row, repeats: int = 7, target: float = 0.85) -> list:
    """The row: least CPU seconds of ``NOW`` against ``BEFORE`` (``least_cpu``); target: the
    ratio at most ``target``. Raises ``RuntimeError`` when the engine's import loads pandas or
    a module of ``ragexp.run``."""
    loaded = _python(LOADED)[0].strip()
    if loaded != "[]":
        raise RuntimeError(f"{NOW} loads {loaded}: serving must import neither")
    least = least_cpu({"now": NOW, "before": BEFORE}, repeats)
    ratio = least["now"] / least["before"]
    return [make_row("start-up of `ragexp search`/`ask`: `import ragexp.serving.engine` vs the "
                     "same + `ragexp.run` and pandas (what it imported before), CPU s",
                     f"{least['now']:.2f} s", f"{least['before']:.2f} s", f"{ratio:.2f}",
                     f"<= {target:g}", ratio <= target)]
