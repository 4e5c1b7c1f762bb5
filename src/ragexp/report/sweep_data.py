"""What the HTML report of a sweep reads from MLflow: the MLflow edge of ``report.html``.

- **the sweep**: its parent run and the finished runs of its jobs (children, and finished runs it
  skipped to, as ``compare.runs_frame(parent=...)`` lists them), each with its per-question
  table and abstain curve (``abstain_curve.json``);
- **the previous sweep**: the latest sweep parent run of the same experiment started before
  this one that has finished runs; each run is matched to the previous sweep's run of the same
  configuration (same params, ignoring bookkeeping keys), else of the same label;
- **the champion**: the run behind the registered model's ``champion`` alias, if any;
- **the objective and baseline**: the jobs' ``objective`` and ``baseline`` config keys; the
  baseline run is the job whose ablation is ``baseline`` (else none);
- **the failed jobs**: every job that did not finish or skip, with its overrides, status and
  error, from the job status files in the parent's ``ragexp.sweep_dir`` (a job that failed
  before its run existed left only that) and the FAILED or KILLED child runs none of those
  files names (a killed worker);
- **the questions that decide**: with questions from several sources, ``tables`` hold the rows
  of the jobs' ``objective_source`` (``decide.sources.deciding``) and ``every_table`` all rows.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from ragexp.decide import compare, sources
from ragexp.errors import NotFound
from ragexp.tracking import store as tracking

log = logging.getLogger(__name__)

SWEEP_ROLE = "tags.`ragexp.role` = 'sweep'"
# params that are bookkeeping, not configuration (where and how a run went, not what it measured)
IGNORED_PARAMS = compare.HIDDEN_PARAMS


class FailedJob(NamedTuple):
    """A sweep job that neither finished nor was skipped: its Hydra ``overrides`` (one string),
    ``status`` (``FAILED``, ``KILLED``, ``PENDING_SYNC``, ...), one-line ``error`` (the run's
    ``ragexp.error``; empty when none was recorded) and ``run_id`` (``None`` when the job failed
    before its run existed)."""

    overrides: str
    status: str
    error: str
    run_id: str | None


@dataclass
class SweepData:
    """A sweep as the report needs it. ``runs``: one row per finished run (an MLflow
    ``search_runs`` frame) with a ``label`` column; ``tables``/``curves``: per run id, its
    per-question table and abstain curve (``None`` when it has none); ``previous``: the
    previous sweep's runs (same shape) or ``None``; ``previous_match``: ``{run id: previous
    run id}``; ``champion``: one-row frame or ``None``."""

    parent_id: str
    experiment: str
    runs: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    curves: dict[str, dict | None]
    objective: str
    baseline_id: str | None
    previous_id: str | None = None
    previous_status: str | None = None  # FINISHED, or FAILED/KILLED/RUNNING: not whole
    previous: pd.DataFrame | None = None
    previous_match: dict[str, str] = field(default_factory=dict)
    champion: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    every_table: dict[str, pd.DataFrame] = field(default_factory=dict)
    parent_tags: dict[str, str] = field(default_factory=dict)  # the cheapest tied, the fronts
    failed_jobs: list[FailedJob] = field(default_factory=list)
    never_ran: int = 0  # jobs the sweep launched no run for (``never_ran``)


def sweep_parents(experiment: str) -> pd.DataFrame:
    """Every sweep parent run of ``experiment``, newest first."""
    # defer heavy import
    import mlflow

    ids = tracking.experiment_ids(experiment)
    if not ids:  # as search_runs answers an experiment without runs
        return pd.DataFrame()
    return mlflow.search_runs(experiment_ids=ids, filter_string=SWEEP_ROLE,
                              order_by=["attributes.start_time DESC"])


def latest_sweep(experiment: str) -> str:
    """The newest sweep parent run of ``experiment`` whose status is ``FINISHED`` (every job
    finished or skipped: ``run.sweep.end_parent``); a newer ``FAILED``/``KILLED`` or running
    one is passed over. Raises ``NotFound`` naming the experiment when it has no sweep, and the
    latest sweep with its status (render it with ``--parent ID``) when none finished."""
    parents = sweep_parents(experiment)
    if parents.empty:
        raise tracking.no_runs(experiment, "sweep")
    done = parents[parents["status"] == "FINISHED"]
    if done.empty:
        latest = parents.iloc[0]
        raise NotFound(f"no finished sweep in experiment {experiment!r}: the latest, "
                       f"{latest['run_id']}, is {latest['status']}; render it anyway with "
                       f"--parent {latest['run_id']}")
    return str(done["run_id"].iloc[0])


def labels(df: pd.DataFrame) -> list[str]:
    """A short name per run, in ``df``'s order, unique: ``compare.run_labels``, the one rule
    (``decide.labels``) ``compare`` and the sweep's console lines use too."""
    names = compare.run_labels(df)
    return [names[r] for r in df["run_id"]]


def config_key(row: pd.Series) -> tuple:
    """The run's configuration as comparable data: its params minus bookkeeping keys."""
    return tuple(sorted((c, str(row[c])) for c in row.index
                        if c.startswith("params.") and c[len("params."):] not in IGNORED_PARAMS
                        and not pd.isna(row[c])))


def match_runs(runs: pd.DataFrame, previous: pd.DataFrame) -> dict[str, str]:
    """``{run id: previous run id}``: same configuration first, else same label."""
    by_config = {config_key(r): r["run_id"] for _, r in previous.iterrows()}
    by_label = dict(zip(previous["label"], previous["run_id"]))
    out = {}
    for _, r in runs.iterrows():
        match = by_config.get(config_key(r)) or by_label.get(r["label"])
        if match:
            out[r["run_id"]] = match
    return out


def _frame(experiment: str, parent: str) -> pd.DataFrame:
    df = compare.runs_frame(experiment, parent=parent)
    df = df.drop_duplicates("run_id").reset_index(drop=True)
    return df.assign(label=labels(df))


def _previous(experiment: str, parent_id: str,
              started) -> tuple[str | None, pd.DataFrame | None, str | None]:
    """``(run id, runs, status)`` of the latest sweep before this one with finished runs,
    ``(None, None, None)`` without one."""
    parents = sweep_parents(experiment)
    older = parents[(parents["start_time"] < started) & (parents["run_id"] != parent_id)]
    for prev, status in zip(older["run_id"].head(20), older["status"].head(20)):
        try:
            return str(prev), _frame(experiment, prev), str(status)
        except NotFound:  # a sweep whose jobs all failed: look further back
            continue
    return None, None, None


def _champion() -> pd.DataFrame | None:
    c = tracking.client()
    try:
        run_id = c.get_model_version_by_alias(tracking.MODEL_NAME, tracking.ALIAS).run_id
    except Exception:
        return None
    try:
        return compare.runs_frame("", run_ids=[run_id])
    except NotFound:
        return None


def failed_jobs(parent_id: str, runs: list | None = None) -> list[FailedJob]:
    """The jobs of sweep ``parent_id`` that did not finish or skip, in job order: first those
    the job status files (``tracking.STATUS_FILE``) in the parent's ``ragexp.sweep_dir`` say
    so (when that folder is still there), then its ``FAILED`` or ``KILLED`` child runs that no
    file names as done or failed (a worker killed before it wrote one), oldest first.
    ``runs``: the sweep's runs as ``tracking.sweep_runs`` lists them, when the caller holds
    them (``load``: one search of the store for this and ``never_ran``); else searched."""
    c = tracking.client()
    parent = c.get_run(parent_id)
    out, seen = [], set()
    folder = parent.data.tags.get("ragexp.sweep_dir")
    for s in tracking.read_statuses(folder, skip_unreadable=True) if folder else []:
        if s.get("status") == "RUNNING":  # its run's final status is in the store
            continue
        seen.add(s.get("run_id"))
        if s.get("status") not in ("FINISHED", "SKIPPED"):
            out.append(FailedJob(str(s.get("overrides", "")), str(s.get("status")),
                                 str(s.get("error", "")), s.get("run_id")))
    for run in reversed(tracking.sweep_runs(parent) if runs is None else runs):
        if (run.data.tags.get("mlflow.parentRunId") == parent_id
                and run.info.status in ("FAILED", "KILLED") and run.info.run_id not in seen):
            tags = run.data.tags
            out.append(FailedJob(tags.get("ragexp.overrides", ""), run.info.status,
                                 tags.get("ragexp.error", ""), run.info.run_id))
    return out


def never_ran(parent, runs: list | None = None) -> int:
    """How many of sweep ``parent``'s jobs (its ``ragexp.n_jobs`` tag) left no record: no
    status file in its ``ragexp.sweep_dir`` (a job writes one when its run starts, is
    skipped or is refused) and no run among ``tracking.sweep_runs`` (a worker killed before
    it wrote its file; ``runs``: that list, when the caller holds it). A sweep killed after
    its first jobs showed "1 job did not finish" of 4 whose 2 never ran."""
    tags = parent.data.tags
    if not str(tags.get("ragexp.n_jobs", "")).isdigit():
        return 0
    folder = tags.get("ragexp.sweep_dir")
    statuses = (tracking.read_statuses(folder, skip_unreadable=True)
                if folder and Path(folder).is_dir() else [])
    named = {s.get("run_id") for s in statuses}
    unnamed = [r for r in (tracking.sweep_runs(parent) if runs is None else runs)
               if r.info.run_id not in named]
    return max(0, int(tags["ragexp.n_jobs"]) - len(statuses) - len(unnamed))


def incomplete(parent) -> str | None:
    """One line saying that sweep ``parent`` (its MLflow ``Run``) is not whole: it did not end
    ``FINISHED`` (a job failed, the sweep was stopped, or it is still running) or some of its
    jobs never ran (``never_ran``), with its jobs by outcome (its ``ragexp.jobs`` tag); None for
    a whole sweep. Its best and its cheapest tied are then chosen among the runs that finished,
    which ``compare --parent`` says and ``promote --cheapest-tied`` refuses."""
    status, missing = parent.info.status, never_ran(parent)
    if status == "FINISHED" and not missing:
        return None
    try:
        jobs = json.loads(parent.data.tags.get("ragexp.jobs", "{}"))
    except ValueError:
        jobs = {}
    counts = ", ".join(f"{n} {k}" for k, n in sorted(jobs.items())) if isinstance(
        jobs, dict) else ""
    never = (f"; {missing} of its {parent.data.tags.get('ragexp.n_jobs')} jobs never ran"
             if missing else "")
    return (f"sweep {parent.info.run_id[:8]} is incomplete: it is {status}"
            + (f" (jobs: {counts})" if counts else "") + never
            + ": its best and its cheapest tied are chosen among the runs that finished")


def _curve(run_id: str) -> dict | None:
    try:
        with open(tracking.artifact_path(run_id, "abstain_curve.json")) as fh:
            return json.load(fh)
    except (tracking.RunNotFound, OSError, ValueError):
        return None


def load(parent_id: str) -> SweepData:
    """Everything the report shows about sweep ``parent_id`` (see the module docstring).
    Raises ``NotFound`` when the run is unknown or has no finished runs."""
    c = tracking.client()
    parent = c.get_run(parent_id)
    experiment = c.get_experiment(parent.info.experiment_id).name
    runs = _frame(experiment, parent_id)
    every = {r: compare.per_question(r) for r in runs["run_id"]}
    curves = {r: _curve(r) for r in runs["run_id"]}
    first = runs.iloc[0]
    source = compare.deciding_source(runs, dict(parent.data.tags))
    tables = {r: sources.deciding(t, source) for r, t in every.items()}
    objective = str(first.get("params.objective") or "nDCG@10")
    baseline = first.get("params.baseline")
    base = runs[runs.get("tags.ragexp.ablation", pd.Series(dtype=str)) == baseline]
    of_sweep = tracking.sweep_runs(parent)
    data = SweepData(parent_id, experiment, runs, tables, curves, objective,
                     str(base["run_id"].iloc[0]) if len(base) else None, every_table=every,
                     parent_tags=dict(parent.data.tags),
                     failed_jobs=failed_jobs(parent_id, of_sweep),
                     never_ran=never_ran(parent, of_sweep))
    if data.baseline_id is None:
        data.notes.append(f"no job with ablation {baseline!r} (config key baseline): the "
                          f"per-kind tests compare every run with the best one instead")
    started = pd.to_datetime(parent.info.start_time, unit="ms", utc=True)
    data.previous_id, data.previous, data.previous_status = _previous(experiment, parent_id,
                                                                      started)
    if data.previous is not None:
        data.previous_match = match_runs(runs, data.previous)
    data.champion = _champion()
    return data
