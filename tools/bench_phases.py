"""Where a run's and a sweep's wall time goes (issue #21): the commands of ``bench_wall.py``,
each in a fresh process of its own, with the functions below timed in real time (not a
profiler's: cProfile and sampling profilers inflate per-call Python work and hide the imports'
share) and each second given to one phase only: a timed call's own time, less the timed calls
inside it (a call to MLflow inside the end-of-sweep tests counts as MLflow's).

``python -m tools.bench_phases [--readme docs/benchmarks.md]`` prints one table: seconds per
phase for the warm one-run (``embedder=hash retriever=bm25 force=true``) and the warm
12-ablation sweep (``force=true``, page included), the sweep's per job, and the same twelve
configurations computed through the library (``bench_wall._library_sweep``) beside them. Exits
2 if that page lacks its ``<!-- phases:start -->`` / ``<!-- phases:end -->`` markers.
"""

from __future__ import annotations

import os

os.environ.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from tools.bench_wall import ABLATIONS, _env, _library_sweep, _timed  # noqa: E402
from tools.readme import has_block, replace_block  # noqa: E402

# (module, attribute, phase): every call of the attribute is timed and its own time (less the
# timed calls inside it) is the phase's. Order is the table's.
MLFLOW_START = "MLflow: import and open the store"
IMPORTS = "imports: ragexp, Hydra, pandas (before the first line of work)"
COMPUTE = "retrieval, answers, measures (compute)"
# A sweep composes its jobs in a forked child while it imports MLflow (``run.forked``): its
# "compose" is then what the child's composing took beyond those imports (``Beside.result``
# waiting), and the imports are MLflow's (``store.preload``).
TIMED = (
    ("ragexp.tracking.store", "client", MLFLOW_START),
    ("ragexp.tracking.store", "preload", MLFLOW_START),
    ("hydra._internal.config_loader_impl", "ConfigLoaderImpl.load_configuration",
     "Hydra: compose configs"),
    ("hydra._internal.config_loader_impl", "ConfigLoaderImpl.load_sweep_config",
     "Hydra: compose configs"),
    ("ragexp.run.forked", "Beside.result", "Hydra: compose configs"),
    ("ragexp.run.forked", "Beside.meanwhile",
     "imports a sweep uses later (fastembed, scipy.stats), while its jobs compose"),
    ("ragexp.config.validation", "validate", "validate configs"),
    ("ragexp.run.app", "resolve", "load data, run identity"),
    ("ragexp.run.app", "build_and_run", COMPUTE),
    ("ragexp.run.pipeline", "_latency", "latency sample"),
    ("ragexp.run.app", "write_artifacts", "artifact files"),
    ("mlflow.tracking.client", "MlflowClient.create_run", "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.log_batch", "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.log_artifacts",
     "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.log_artifact", "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.log_inputs", "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.set_terminated",
     "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.set_tag", "MLflow: runs, params, metrics, files"),
    ("mlflow.tracking.client", "MlflowClient.get_run", "MLflow: reads"),
    ("mlflow.tracking.client", "MlflowClient.search_runs", "MLflow: reads"),
    ("mlflow.tracking.client", "MlflowClient.download_artifacts", "MLflow: reads"),
    ("ragexp.decide.selection", "summarise_sweep", "end-of-sweep paired tests"),
    ("ragexp.report.html", "write", "the sweep's page"),
)
OTHER = "the rest (Hydra's job set-up, tags, status files)"
# The phases no sweep of Hydra-composed jobs, each its own MLflow run, can skip.
FLOOR = (IMPORTS, MLFLOW_START, "Hydra: compose configs", COMPUTE,
         "MLflow: runs, params, metrics, files")

CHILD = r'''
import functools, importlib, json, sys, time
MLFLOW = sys.argv[2]
T0 = time.perf_counter()
from ragexp.cli import process
process.own()
import ragexp.run.app as app
imported = time.perf_counter() - T0
own, stack = {}, []

def timed(phase, f):
    @functools.wraps(f)
    def call(*a, **k):
        stack.append(0.0)
        start = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            took = time.perf_counter() - start
            inner = stack.pop()
            own[phase] = own.get(phase, 0.0) + took - inner
            if stack:
                stack[-1] += took
    return call

for module, attr, phase in json.loads(sys.argv[1]):
    start = time.perf_counter()
    owner = importlib.import_module(module)  # mlflow's import, had the command not made it yet
    key = MLFLOW if module.split(".")[0] == "mlflow" else None
    if key:
        own[key] = own.get(key, 0.0) + time.perf_counter() - start
    else:
        imported += time.perf_counter() - start
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, name, timed(phase, getattr(owner, name)))
sys.argv = ["ragexp", *sys.argv[3:]]
try:
    app.entry()
except SystemExit as exc:
    if exc.code not in (None, 0):
        raise
print("PHASES " + json.dumps({"imports": imported, "wall": time.perf_counter() - T0,
                              "own": own}))
'''


def phases(args: list[str], cwd: Path) -> dict:
    """``{"imports": s, "wall": s, "own": {phase: s}}`` of ``python -m ragexp ARGS`` run in a
    fresh process in ``cwd`` with ``TIMED`` wrapped (wall: from the child's first line to
    ``main``'s return, interpreter start and exit left out). Raises when it fails."""
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(TIMED), MLFLOW_START, *args],
                          cwd=cwd, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ragexp {' '.join(args)} failed ({done.returncode}): "
                           f"{done.stderr[-800:]}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("PHASES ")][-1]
    return json.loads(line[len("PHASES "):])


def table(one: dict, sweep: dict, library_s: float) -> str:
    """Markdown rows: each phase's seconds in the run and the sweep, the sweep's per job."""
    order = [IMPORTS, *dict.fromkeys(p for _, _, p in TIMED), OTHER]

    def split(m: dict) -> dict[str, float]:
        out = {IMPORTS: m["imports"], **m["own"]}
        out[OTHER] = m["wall"] - sum(out.values())
        return out

    a, b = split(one), split(sweep)
    n = len(ABLATIONS)
    rows = ["| phase | one run (s) | 12-ablation sweep (s) | sweep, per job (s) |",
            "|---|---|---|---|"]
    for p in order:
        if p in a or p in b:
            rows.append(f"| {p} | {a.get(p, 0):.2f} | {b.get(p, 0):.2f} | "
                        f"{b.get(p, 0) / n:.3f} |")
    rows.append(f"| **wall** (first line to exit of main) | **{one['wall']:.2f}** | "
                f"**{sweep['wall']:.2f}** | **{sweep['wall'] / n:.3f}** |")
    rows.append(f"| the same {n} configurations through the library (compute only, "
                f"`bench_wall._library_sweep`) | | {library_s:.2f} | {library_s / n:.3f} |")
    floor = sum(b.get(p, 0) for p in FLOOR)
    rows.append(f"\n- the sweep's floor, what a sweep of Hydra-composed jobs each logged as its "
                f"own MLflow run cannot skip ({'; '.join(FLOOR)}), with everything else at zero: "
                f"{floor:.2f} s = {floor / library_s:.2f}x its library compute (target for the "
                f"whole sweep: <= 2.5x); the whole sweep: {sweep['wall'] / library_s:.2f}x")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_phases",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", help="replace the phases block of this markdown file")
    args = parser.parse_args(argv)
    if not has_block(args.readme, "phases"):  # it says why
        return 2
    one_args = ["embedder=hash", "retriever=bm25", "force=true"]
    sweep_args = ["-m", f"+ablation={','.join(ABLATIONS)}", "force=true"]
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-phases-") as tmp:
        ws = Path(tmp)
        py = [sys.executable, "-m", "ragexp"]
        _timed([*py, *one_args], ws)  # warm: caches filled, store created
        _timed([*py, *sweep_args], ws)
        one = phases(one_args, ws)
        sweep = phases(sweep_args, ws)
        library_s, _ = _library_sweep(ws)
    load = os.getloadavg()[0]
    out = (f"Measured with `python -m tools.bench_phases --readme docs/benchmarks.md` on "
           f"{datetime.date.today().isoformat()} (load average {load:.1f} at the end; "
           f"{os.cpu_count()} cores).\n\n{table(one, sweep, library_s)}")
    print(out)
    if args.readme:
        replace_block(args.readme, "phases", out)
        print(f"\nwrote the phases block of {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
