"""Time a sweep's page, ``ragexp.report.html.write``, as the sweep's own process writes it.

    python -m tools.bench_page PARENT_RUN_ID [--sweep-dir multirun/DAY/TIME] [--profile OUT]

Run from the workspace whose ``mlruns/`` holds the sweep. The process first imports what a
sweep's process holds when its last job ends (MLflow, pandas, the report) and opens the store;
with ``--sweep-dir`` it also runs ``decide.selection.summarise_sweep`` as the sweep does just
before its page (the comparisons whose bootstraps the page reuses), with the baseline, objective
and deciding source the jobs recorded, and prints its seconds (it logs its metrics and tags on
the sweep's runs again, the same values). Then it times one ``write`` (the page logged on the
parent, as ``SweepCallback._report`` logs it) and prints the seconds; ``--profile`` also writes
its cProfile stats and prints the 40 most expensive calls by cumulative time. Each measurement
needs its own process: the per-process caches would serve a second call.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("parent", help="the sweep's parent run id")
    p.add_argument("--sweep-dir", help="the sweep's Hydra folder: run summarise_sweep first")
    p.add_argument("--profile", metavar="OUT", help="write cProfile stats here")
    args = p.parse_args(argv)

    # defer heavy import
    import mlflow  # noqa: F401  - held by the sweep's process already
    import pandas  # noqa: F401

    from ragexp.decide import compare
    from ragexp.report.html import write
    from ragexp.tracking import store as tracking

    tracking.client()
    if args.sweep_dir:
        # defer heavy import
        from ragexp.decide.selection import summarise_sweep

        experiment = tracking.client().get_experiment(
            tracking.client().get_run(args.parent).info.experiment_id).name
        first = compare.runs_frame(experiment, parent=args.parent).iloc[0]
        statuses = tracking.read_statuses(args.sweep_dir)
        start = time.perf_counter()
        summarise_sweep(args.parent, statuses, str(first["params.baseline"]),
                        str(first["params.objective"]),
                        objective_source=str(first["params.objective_source"]))
        print(f"summarise_sweep {time.perf_counter() - start:.3f} s")
    profile = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profile:
        profile.enable()
    line = write(args.parent)
    if profile:
        profile.disable()
    print(f"html.write {time.perf_counter() - start:.3f} s: {line}")
    if profile:
        profile.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
