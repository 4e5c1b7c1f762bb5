"""``ragexp confirm RUN_ID [--baseline RUN_ID]``: the held-out check of a choice made on dev.

Both configurations (the run's and the baseline's, read from their ``config.yaml`` artifacts)
are evaluated again with ``split=test``; each evaluation is an ordinary logged run, so a second
confirm reuses it (identical config on the same data is skipped). The held-out difference is
tested per question (``stats.py``: BCa interval, randomisation p, Holm over the measures x
(all + each kind)) and logged on the confirmed run as

- metrics ``confirm.<key>`` (the run on test), ``confirm.baseline.<key>`` (the baseline on test)
  and ``confirm.vs_baseline.<key>[.<kind>].{delta,ci_low,ci_high,p,p_adj,n_needed}``;
- tags ``ragexp.confirm.test_run``, ``ragexp.confirm.baseline``,
  ``ragexp.confirm.baseline_test_run``.

Default baseline: the job of the run's sweep whose ablation is the config key ``baseline``
(``default``), else the champion. Refused in one line: a sweep's parent run as run or baseline
(``tracking.refuse_sweep_parent``, as every command refuses one), and (``ConfirmError``) a run
selected on ``split=all`` (nothing is held out) and a baseline evaluated on other data
(``corpus_hash`` or ``golden_hash`` differ, as ``ragexp gate`` refuses it). With questions from
several sources, the numbers and tests are the run's ``objective_source`` questions'
(``decide.sources``), as the sweep's choice was.
"""

from __future__ import annotations

import pandas as pd
from omegaconf import OmegaConf, open_dict

from ragexp import legacy
from ragexp.decide import compare, labels, sources
from ragexp.decide.selection import objective, vs_baseline_metrics
from ragexp.errors import RagexpError
from ragexp.evaluation import significance, stats
from ragexp.evaluation.measures import measure_key
from ragexp.records import HAND
from ragexp.run.app import run_logged
from ragexp.tracking import failures
from ragexp.tracking import store as tracking


class ConfirmError(RagexpError, RuntimeError):
    pass


def sweep_baseline(run) -> str | None:
    """The run id of the baseline job in the run's sweep, if there is one."""
    parent = run.data.tags.get("mlflow.parentRunId")
    name = run.data.params.get("baseline", "default")
    if not parent:
        return None
    found = tracking.client().search_runs(
        [run.info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent}' and tags.`ragexp.ablation` = '{name}' and "
        f"attributes.status = 'FINISHED'", max_results=1)
    return found[0].info.run_id if found else None


def runner_up(run) -> str | None:
    """The run id of the best other finished run of ``run``'s sweep by the run's objective on
    its ``objective_source`` questions (the report's runner-up: what a sweep's baseline that
    won is confirmed against), or None outside a sweep or without another run."""
    parent = run.data.tags.get("mlflow.parentRunId")
    if not parent:
        return None
    name = run.data.params.get("objective", "nDCG@10")
    source = run.data.params.get("objective_source", HAND)
    others = [r for r in tracking.client().search_runs(
        [run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}' and "
        f"attributes.status = 'FINISHED'", max_results=50000)
        if r.info.run_id != run.info.run_id and measure_key(name) in r.data.metrics]
    if not others:
        return None
    return max(others, key=lambda r: objective(r.data.metrics, name, source)).info.run_id


def on_test(run_id: str, label: str | None = None) -> str:
    """Id of the finished run that evaluates ``run_id``'s configuration on the test split
    (created, or reused when it already exists); ``label`` names a created one on the console
    and in MLflow (``run_logged``)."""

    c = tracking.client()
    run = c.get_run(run_id)
    if run.info.status != "FINISHED":
        raise ConfirmError(f"run {run_id} is {run.info.status}, not FINISHED")
    if "split" not in run.data.params:
        raise ConfirmError(f"run {run_id} predates dev/test splits (no 'split' param): rerun "
                           f"its configuration, then confirm the new run")
    if run.data.params["split"] == "test":
        return run_id
    cfg = legacy.upgrade(OmegaConf.load(c.download_artifacts(run_id, "config.yaml")))
    cfg.split, cfg.force, cfg.progress = "test", False, False
    with open_dict(cfg):
        cfg.pop("sweep", None)  # a sweep job's parent (``sweep.parent``): this run is no job of it
    try:
        out = run_logged(cfg, label)
    except RagexpError:
        raise
    except Exception as exc:  # e.g. a relative path of the run's config that is not here
        raise ConfirmError(f"cannot evaluate run {run_id[:8]}'s configuration on test: "
                           f"{failures.describe(exc)}") from exc
    return out["run_id"]


def _chosen_on_dev(who: str, run) -> None:
    """Raise ``ConfirmError`` unless ``run`` was evaluated on dev: on ``split=all`` nothing is
    held out, and a ``split=test`` run's test score would stand in the table's dev column
    (0.510 printed as "run dev" for a run whose dev nDCG@10 is 0.482)."""
    split, rid = run.data.params.get("split"), run.info.run_id[:8]
    if split == "all":
        raise ConfirmError(f"{who} {rid} was selected on all questions (split=all), so nothing "
                           f"is held out to confirm it on: run the sweep with split=dev, then "
                           f"confirm its choice")
    if split == "test":
        raise ConfirmError(f"{who} {rid} was evaluated on the test split (split=test), not "
                           f"chosen on dev: confirm the run of its configuration with split=dev")


MEANS = ("run dev", "run test", "baseline dev", "baseline test")  # the table's measure means


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """``confirm``'s table as ``ragexp confirm`` prints it: every mean (``MEANS``) with three
    decimals, as its Δ column and the report's confirm table print them, blank where the run
    logged none (``round(4)`` printed ``0.875`` beside ``0.9262``)."""
    out = table.copy()
    for col in MEANS:
        out[col] = ["" if v is None or pd.isna(v) else f"{v:.3f}" for v in table[col]]
    return out


def confirm(run_id: str, baseline_id: str | None = None,
            measures: tuple[str, ...] = significance.DEFAULT_MEASURES,
            method: str = "holm") -> tuple[pd.DataFrame, list[stats.Paired], str]:
    """Evaluate run and baseline on test, test the difference, log it on the run. Returns the
    dev-vs-test table, the adjusted tests and the baseline's run id. A sweep's parent run as
    either is refused first (``tracking.SweepParentRun``), then the refusals of the module
    docstring (``ConfirmError``)."""

    c = tracking.client()
    run = c.get_run(run_id)
    tracking.refuse_unusable(run)
    base = c.get_run(baseline_id) if baseline_id is not None else None
    if base is not None:  # a given baseline: refused as early
        tracking.refuse_unusable(base)
    _chosen_on_dev("run", run)
    if base is not None:
        _chosen_on_dev("baseline", base)
    if baseline_id is None:
        baseline_id = sweep_baseline(run)
        if baseline_id is None:
            champion = tracking.champion()
            if champion is None:
                raise ConfirmError(f"no baseline: run {run_id[:8]} has no sweep job with "
                                   f"ablation {run.data.params.get('baseline', 'default')!r} "
                                   f"and there is no champion; pass --baseline RUN_ID")
            baseline_id = champion.run_id
    if baseline_id == run_id:
        other = runner_up(run)
        raise ConfirmError(f"run {run_id[:8]} is its own baseline: pass --baseline "
                           + (f"{other} (the runner-up of its sweep)" if other else "RUN_ID"))
    if base is None:  # the sweep's baseline job or the champion
        base = c.get_run(baseline_id)
        tracking.refuse_unusable(base)
        _chosen_on_dev("baseline", base)
    differ = compare.data_differs(run, base)
    if differ:
        raise ConfirmError(f"run {run_id[:8]} and baseline {baseline_id[:8]} were evaluated on "
                           f"different data ({', '.join(differ)} differ): confirm cannot "
                           f"compare them; pass --baseline RUN_ID of a run on the same data")
    # each test run is named as its dev run is beside the other (``decide.labels``): a run of
    # overrides by the settings that tell it apart, not as ``custom``
    names = labels.of_runs({run_id: run, baseline_id: base}, ids=False)
    test_run, test_base = on_test(run_id, names[run_id]), on_test(baseline_id, names[baseline_id])
    source = run.data.params.get("objective_source", HAND)
    try:
        tests = stats.adjust_family(significance.tests_against(
            sources.deciding(compare.per_question(test_run), source),
            sources.deciding(compare.per_question(test_base), source), measures,
            (run_id[:8], baseline_id[:8])), method)
    except significance.NotPaired as exc:
        raise ConfirmError(str(exc)) from None
    runs = {k: c.get_run(r) for k, r in (("run", run_id), ("base", baseline_id),
                                         ("run_test", test_run), ("base_test", test_base))}
    def value(which: str, m: str) -> float | None:  # the objective_source questions' mean
        metrics = runs[which].data.metrics
        return objective(metrics, m, source) if measure_key(m) in metrics else None

    rows = []
    for m in measures:
        t = next(x for x in tests if x.measure == m and x.kind == stats.ALL)
        rows.append({"measure": m,
                     "run dev": value("run", m), "run test": value("run_test", m),
                     "baseline dev": value("base", m), "baseline test": value("base_test", m),
                     "Δ test [95% CI]": significance.format_delta(t),
                     "p": significance.format_p(t.p),
                     "p_adj": significance.format_p_adj(t.p_adj), "n": t.n})
    metrics = {f"confirm.{k}": v for k, v in vs_baseline_metrics(tests).items()}
    for m in measures:
        key = measure_key(m)
        metrics[f"confirm.{key}"] = value("run_test", m)
        metrics[f"confirm.baseline.{key}"] = value("base_test", m)
    tracking.log_batch(run_id, metrics=metrics,
                       tags={"ragexp.confirm.test_run": test_run,
                             "ragexp.confirm.baseline": baseline_id,
                             "ragexp.confirm.baseline_test_run": test_base})
    return pd.DataFrame(rows), tests, baseline_id
