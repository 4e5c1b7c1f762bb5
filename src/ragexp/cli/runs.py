"""``ragexp runs cleanup`` and ``ragexp runs sync``: close runs whose process is gone, and log
results that were kept on disk while the store was unreachable."""

from __future__ import annotations

import sys

from ragexp.cli import helptext
from ragexp.errors import MissingInput, path_problem
from ragexp.tracking import lifecycle, outbox
from ragexp.tracking import store as tracking

SYNCED = ("outputs", "multirun")  # the run and sweep folders Hydra writes by default


def cmd_cleanup(args) -> int:
    """Close (FAILED, reason tagged) RUNNING runs whose process is gone; list the others."""
    c = tracking.client()
    if args.experiment:
        exps = [c.get_experiment_by_name(n) for n in args.experiment]
        unknown = [n for n, e in zip(args.experiment, exps) if e is None]
        if unknown:
            print(f"error: no experiment {', '.join(map(repr, unknown))} in "
                  f"{tracking.tracking_uri()}", file=sys.stderr)
            return 2
    else:
        exps = c.search_experiments()
    closed, left = lifecycle.close_abandoned(c, [e.experiment_id for e in exps], args.dry_run)
    verb = "would close" if args.dry_run else "closed"
    for run in closed:
        print(f"{verb} {run.info.run_id} ({run.info.run_name or '-'}) as FAILED: process "
              f"{run.data.tags.get(lifecycle.PID_TAG)} on {run.data.tags.get(lifecycle.HOST_TAG)}"
              f" is gone")
    for run, why in left:
        print(f"left RUNNING {run.info.run_id} ({run.info.run_name or '-'}): {why}")
    print(f"{len(closed)} run(s) {verb}, {len(left)} still running "
          f"({tracking.tracking_uri()})")
    return 0


def cmd_sync(args) -> int:
    """Deliver pending on-disk records under the given folders to the current store."""
    uri = tracking.tracking_uri()
    given, args.paths = bool(args.paths), args.paths or list(SYNCED)
    wrong = [f"{p}: {why}" for p in args.paths
             if (why := path_problem(p, "dir")) and (given or "no such" not in why)]
    if wrong:  # a folder named but not there said "0 record(s) synced"
        raise MissingInput("runs sync: " + "; ".join(wrong))
    waiting = outbox.pending(args.paths)
    other = [b for b in waiting if b.read().get("tracking_uri") != uri]
    done = outbox.sync(args.paths, uri)
    for box, run_id in done:
        print(f"logged {box.root} as run {run_id} (FINISHED)")
    for box in other:
        print(f"left {box.root}: meant for {box.read().get('tracking_uri')}, not {uri} "
              f"(set MLFLOW_TRACKING_URI to sync it)")
    print(f"{len(done)} record(s) synced to {uri}")
    return 0


def add_parser(sub) -> None:
    """The ``runs`` command group, added to ``ragexp``'s subcommands."""
    r = sub.add_parser("runs", help="close abandoned runs; log results kept on disk",
                       description="Close abandoned runs and log results kept on disk. To list "
                       "runs with their measures: ragexp compare (--parent SWEEP_RUN for one "
                       "sweep's), or ragexp ui.")
    rsub = r.add_subparsers(dest="runs_cmd", required=True, metavar="{cleanup,sync}")
    cl = rsub.add_parser("cleanup", help="mark FAILED the RUNNING runs whose process is gone",
                         formatter_class=helptext.Defaults)
    cl.add_argument("--experiment", nargs="+", help="experiment names (default: all)")
    cl.add_argument("--dry-run", action="store_true", help="list, change nothing")
    cl.set_defaults(fn=cmd_cleanup)
    sy = rsub.add_parser("sync", help="log results a run kept on disk when the store was down",
                         formatter_class=helptext.Defaults)
    sy.add_argument("paths", nargs="*",
                    help=f"folders searched for mlflow_record/record.json (default: "
                         f"{', '.join(SYNCED)}, those of them that exist)")
    sy.set_defaults(fn=cmd_sync)
