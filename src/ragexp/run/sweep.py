"""A multirun's parent MLflow run, from before the first job to after the last.

``SweepCallback.on_multirun_start`` composes and validates every job's config first (a typo, a
value a job would refuse in any sweep option, or a sweep that expands to no job at all, such as
an ``ablation=glob(...)`` matching no ablation, stops the sweep with exit code 2 before anything
is created; for an Optuna search, whose trials are drawn as it runs, its fixed overrides with
each choice value and range bound: ``search_points``), then
delivers results a previous run of this sweep folder kept on disk (``outbox``), closes runs of
the experiment whose process is gone (``lifecycle.close_abandoned``), and only then creates the
parent run. ``on_multirun_end`` compares the jobs and writes the page when any job finished or
was skipped, then ends the parent ``FINISHED`` (every job finished or skipped) or
``FAILED``, with the tag ``ragexp.jobs`` counting finished, failed, killed and skipped jobs, after
logging the sweep's page ``report.html`` on it (``ragexp.report.html``; ``sweep_report=false`` skips
it; a failure to build it is the tag ``ragexp.report_error``, never a failed sweep); a
stop signal ends it ``KILLED`` through ``lifecycle``'s exit hook, and a sweeper's own error
(``stopped``) ``FAILED``. Errors here stop the sweep
(``SystemExit``): Hydra only warns about an ``Exception`` raised in a callback and would run
the jobs without a parent.

The overrides of the jobs ``check_jobs`` validated are the session's (``Session.validated``).
A job finds its parent run in its own composed config, ``sweep.parent`` (``parent_run``): once
the parent exists, every job config the launcher composes holds its id (``jobs_under``), in this
process or in another (joblib, submitit compose each job where it runs, from the same loader),
and the job's ``.hydra/config.yaml`` records it; it is no setting, so no part of a run's
identity or params (``tracking.store.as_recorded``). How each job ended is read from the store,
the jobs' status files standing in where it cannot say (``job_outcomes``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import ValueType
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ragexp.config import validation
from ragexp.config.compose import task_overrides
from ragexp.errors import InvalidValue, RagexpError
from ragexp.run import forked
from ragexp.run.console import say
from ragexp.session import Session
from ragexp.tracking import lifecycle, outbox
from ragexp.tracking import store as tracking

log = logging.getLogger(__name__)

SKIP_LINK = "ragexp.in_sweep."  # tag on a finished run a sweep reused: <prefix><parent id>


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides for a discrete sweep, in job order; ``None`` for sweeps the basic
    sweeper cannot expand (ranges, optimisers), whose jobs are validated as each starts.
    Raises ``HydraException`` for a sweep that expands to no job (``no_jobs``), and Hydra's own
    error for an override that does not parse."""
    # defer heavy import
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(sweep_arguments(config))
    try:
        batches = BasicSweeper.split_arguments(parsed, None)[0]
    except HydraException:
        return None
    if not batches:
        raise HydraException(no_jobs(parsed, loader))
    return [list(ov) for ov in batches]


def sweep_arguments(config: DictConfig) -> list[str]:
    """The sweep's overrides as its sweeper reads them: ``hydra.sweeper.params`` as typed
    (``key=value``), then the command's."""
    params = config.hydra.sweeper.get("params") or {}
    params = OmegaConf.to_container(params, resolve=False) if params else {}  # as typed
    return [f"{k}={v}" for k, v in params.items()] + task_overrides(config.hydra)


OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def search_points(config: DictConfig) -> list[list[str]]:
    """The configs that stand for an Optuna search (``hydra/sweeper=optuna``) before its first
    trial, as override lists in the form its trials take (search values, then the fixed
    overrides: the sweeper's own ``_configure_trials``): point #0 sets each search dimension
    to its first value, each further point changes one dimension to another of its values. A
    dimension's values are a ``choice``'s every value and a range's or interval's two bounds
    (Optuna draws both; an interval's are floats unless cast, ``int(interval(1,100))``, so an
    integer key refuses them as it would every trial's value). So a fixed override, a choice
    value or a bound that every trial, or the trials that draw it, would refuse is refused
    before anything runs: the search ran trial after trial, each failing, to "No trials are
    completed yet". A refusal only of a combination of two dimensions' values is left to the
    trials that draw it (each trial is validated as it starts). Raises ``InvalidValue`` naming
    an override the sweeper cannot search (``range(50, 0, -10)``: Optuna's own error, at the
    search's start, named no key)."""
    # optuna imports alembic, which logs its plugins' setup at INFO under Hydra's log format;
    # mlflow, imported after, sets the level it sets here (its loggers' configuration)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # defer heavy import
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides
    from optuna.distributions import CategoricalDistribution

    space, fixed = {}, {}
    for arg in sweep_arguments(config):  # one at a time, to name the one it cannot search
        try:
            dimension, value = create_params_from_overrides([arg])
        except Exception as exc:
            raise InvalidValue(f"{arg}: Optuna's sweeper cannot search it: "
                               f"{' '.join(str(exc).split()) or type(exc).__name__}") from exc
        space.update(dimension)
        fixed.update(value)
    values = {}
    for name, dist in space.items():
        if name not in fixed:  # a fixed override takes the dimension out, as the sweeper does
            drawn = dist.choices if isinstance(dist, CategoricalDistribution) else (
                dist.low, dist.high)
            values[name] = list(dict.fromkeys(drawn))
    first = {name: vals[0] for name, vals in values.items()}
    points = [first] + [{**first, name: v} for name, vals in values.items() for v in vals[1:]]
    return [[f"{k}={v}" for k, v in {**point, **fixed}.items()] for point in points]


def compose_job(config: DictConfig, name: str, overrides: list[str]) -> DictConfig:
    """The config of job ``name`` (``job #3``) for its ``overrides`` (``sweep_jobs``), composed
    the way the launcher will compose it. Raises ``HydraException`` naming the job when it
    does not compose. Pure: what it composed answers Hydra only once ``compose_once`` hands
    it over."""
    # defer heavy import
    from hydra.errors import HydraException

    try:
        return GlobalHydra.instance().config_loader().load_sweep_config(
            master_config=config, sweep_overrides=overrides)
    except Exception as exc:
        raise HydraException(f"{name} ({' '.join(overrides)}) does not compose: "
                             f"{validation.composition_error(exc)}") from exc


def no_jobs(parsed: list, loader) -> str:
    """Why a sweep expands to no job: each sweep override that yields no value (a ``glob``
    matching no option names the options its group has, ``*_schema`` left out)."""
    reasons = []
    for o in parsed:
        if not o.is_discrete_sweep() or list(o.sweep_string_iterator()):
            continue
        group = o.key_or_group
        options = [n for n in loader.get_group_options(group) if not n.endswith("_schema")]
        known = (f" (the {group} options are: {', '.join(options)})" if options else
                 f" ({group} has no options here: is its folder under --config-dir?)")
        reasons.append(f"{o.input_line} matches nothing"
                       f"{known if o.value_type == ValueType.GLOB_CHOICE_SWEEP else ''}")
    return ("the sweep would launch no job: " + ("; ".join(reasons) or "its overrides expand "
            "to no combination"))


def compose_once(loader, master: DictConfig, jobs: list[tuple[list[str], DictConfig]]) -> None:
    """Hand the jobs' configs composed here to Hydra's basic sweeper (which composes every job
    once to check the batch) and launcher (once more to run it), instead of composing each
    twice again: ``loader.load_sweep_config`` answers these overrides of this master config
    with the config composed here, and composes anything else as before. A job's config is
    thus composed once (0.07-0.2 s each; a sweep of 12 composed 36 times)."""
    composed = {tuple(ov): cfg for ov, cfg in jobs}
    compose = type(loader).load_sweep_config.__get__(loader)

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        cfg = composed.get(tuple(sweep_overrides)) if master_config is master else None
        return cfg if cfg is not None else compose(master_config, sweep_overrides)

    loader.load_sweep_config = load_sweep_config


def check_jobs(config: DictConfig) -> list | None:
    """Compose and validate every job; print the first bad job and every bad value in it, a
    line for each other bad job (``composed_and_checked``), or why the sweep has no job, and
    raise ``SystemExit(2)``. Returns the jobs as ``(overrides, config)`` (``None`` when the
    sweep cannot be expanded), composed once for the whole sweep (``compose_once``). An Optuna
    search's jobs are drawn as it runs: its ``search_points`` are checked the same way
    instead, and it returns ``None``. Anything
    else that stops the check (the child composing them killed) is ``SystemExit`` too, exit 1,
    naming it: Hydra would only warn of an ``Exception`` raised in a callback and launch the
    jobs without a parent run.

    The composing runs in a child process (``forked.Beside``) while this one imports what
    opening the MLflow store will need (``tracking.preload``), then, while the child still
    composes, what the jobs and the sweep's end will import (``later_imports``), where the
    process can fork: for the 12-ablation sweep the two took 1.8 s and 1.4 s one after the
    other. The jobs come back pickled, the same configs (``tests/e2e/test_forked.py``); the
    refusals are the same."""
    validated_jobs = Session.current().validated
    validated_jobs.clear()
    search = config.hydra.sweeper.get("_target_") == OPTUNA
    try:
        overrides = search_points(config) if search else sweep_jobs(config)
    except Exception as exc:
        refuse(f"{' '.join(str(exc).split())}\nnothing was run")
    if overrides is None:
        return None
    n_jobs = int(config.hydra.sweeper.n_trials) if search else len(overrides)
    try:
        with forked.Beside(lambda: composed_and_checked(
                config, overrides, "search point" if search else "job"),
                           "composing the sweep's jobs") as checking:
            if checking.forked:
                tracking.preload()
                checking.meanwhile(import_step(m) for m in later_imports(config, n_jobs))
            jobs, refusal = checking.result()
    except Exception as exc:
        raise SystemExit(f"error: the sweep could not start, nothing was run: "
                         f"{tracking.error_summary(exc)}") from None
    if refusal is not None:
        refuse(f"{refusal}\n{SEARCH_POINTS if search else ''}nothing was run")
    if search:  # its trials are drawn as it goes: each is validated as it starts
        return None
    compose_once(GlobalHydra.instance().config_loader(), config, jobs)
    validated_jobs.update(tuple(ov) for ov, _ in jobs)
    return jobs


def later_imports(config: DictConfig, jobs: int) -> list[str]:
    """The modules a sweep of ``jobs`` jobs on the base ``config`` imports only once under way,
    which ``check_jobs`` imports while its child composes (time it would spend waiting): the
    embedding library of a fastembed embedder in the base config (``fastembed``, 0.46 s, at
    the first text a job embeds), the end-of-sweep paired tests' ``scipy.stats`` (0.34 s;
    two jobs or more) and the page's builder (``sweep_report``). Measured on the 12-ablation
    sweep with py-spy: the parent waited 0.35-0.7 s for the child, and these 0.9 s of imports
    came after it. A job's override of the embedder is not read: the child is composing it."""
    wanted = []
    if "FastEmbedEmbedder" in str(OmegaConf.select(config, "embedder._target_", default="")):
        wanted.append("fastembed")
    if jobs > 1:
        wanted.append("scipy.stats")
        if config.get("sweep_report", True):
            wanted.append("ragexp.report.html")
    return wanted


def import_step(module: str) -> Callable[[], None]:
    """A step of ``forked.Beside.meanwhile`` importing ``module``; one that is not installed is
    left for its user to report (a job's embedder names the missing package and how to
    install it), not raised here."""
    def step() -> None:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    return step


MORE_REFUSED = 10  # jobs listed after the first refused one, one line each
SEARCH_POINTS = ("(checked before the first trial: the fixed overrides with every search dimension "
                 "at its first value, search point #0, then with one other choice value or range "
                 "bound at a time)\n")


def composed_and_checked(config: DictConfig, overrides: list[list[str]], noun: str = "job"
                         ) -> tuple[list | None, str | None]:
    """``(jobs, None)``: each job's ``(overrides, config)`` (``compose_job``), every one
    validated; or ``(None, why)`` when any job does not compose or holds a value its run would
    refuse. ``why`` is the first such job's refusal in full (one line for a composition
    error), then, when other jobs are refused too, one line for each (its first problem the
    first job's did not say, or "the same"; at most ``MORE_REFUSED``, then how many more): a
    sweep with two bad jobs said only the first, and its user met the second on the next try,
    and a job refused for the first job's bad value and one of its own said "the same".
    ``noun`` names the jobs (``search point`` for an Optuna search's ``search_points``)."""
    # defer heavy import
    from hydra.errors import HydraException

    jobs, refused = [], []
    for i, ov in enumerate(overrides):
        where = f"{noun} #{i}: {' '.join(ov)}"
        try:
            cfg = compose_job(config, f"{noun} #{i}", ov)
            validation.validate(cfg, where=where)
            jobs.append((ov, cfg))
        except HydraException as exc:
            text = " ".join(str(exc).split())
            refused.append((where, text, [text.split(" does not compose: ", 1)[-1]], True))
        except validation.ConfigRangeError as exc:
            head, *problems = str(exc).splitlines()
            refused.append((where, str(exc), [p.strip() for p in problems] or [head], False))
    if not refused:
        return jobs, None
    (_, first, said, _), more = refused[0], refused[1:]
    if not more:
        return None, first
    lines = [f"{first}\n{len(more)} more of the {len(overrides)} {noun}s are refused too:"]
    for where, text, problems, composed in more[:MORE_REFUSED]:
        new = [p for p in problems if p not in said]
        if not new:
            lines.append(f"  {where}: the same")
        else:  # a composition error names its job already
            lines.append(f"  {text}" if composed else f"  {where}: {new[0]}")
    if len(more) > MORE_REFUSED:
        lines.append(f"  ... and {len(more) - MORE_REFUSED} more")
    return None, "\n".join(lines)


def validated(overrides: list[str]) -> bool:
    """Whether the job with these overrides was composed and validated by ``check_jobs`` for
    the sweep this process runs: its config is the one composed there (``compose_once``), so
    validating it again in the job repeated the work (issue #21: compose and validate once). A
    job of another process (a joblib worker) or of an optimiser's sweep is not, and is
    validated as it starts."""
    return tuple(overrides) in Session.current().validated


PARENT_KEY = "sweep.parent"  # where a sweep job's config holds its parent run's id


def parent_run(cfg: DictConfig) -> str | None:
    """The parent run of the sweep the job of config ``cfg`` belongs to (``sweep.parent``, which
    ``jobs_under`` gives it); None outside a sweep."""
    return OmegaConf.select(cfg, PARENT_KEY, default=None)


def jobs_under(loader, parent_id: str) -> None:
    """Give every job config ``loader`` composes from now on (``load_sweep_config``: the basic
    launcher's here, a joblib or submitit worker's where it runs) its sweep's parent run,
    ``sweep.parent=<parent_id>`` (``parent_run``): the job reads it from its own config, which
    records it, instead of from state the callback carried."""
    compose = loader.load_sweep_config

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        cfg = compose(master_config, sweep_overrides)
        with open_dict(cfg):
            OmegaConf.update(cfg, PARENT_KEY, parent_id, force_add=True)
        return cfg

    loader.load_sweep_config = load_sweep_config


def parent_experiment(jobs: list[str], own: str) -> tuple[str, str | None]:
    """The experiment of a sweep's parent run, and a warning when its jobs go to more than one.
    ``jobs``: each job's ``experiment``, in job order; ``own``: the sweep config's. The parent
    lives where its children do: when every job resolves to one experiment (ablations that
    override the dataset, say), that one; else ``own``, and the warning counts the jobs of each
    experiment (a sweep mixing a project's ablation with a shipped one split its runs between
    two experiments without a word, and ``ragexp report`` shows one experiment at a time)."""
    counts: dict[str, int] = {}
    for name in jobs:
        counts[name] = counts.get(name, 0) + 1
    if len(counts) == 1:
        return jobs[0], None
    if not counts:
        return own, None
    where = ", ".join(f"{n} job(s) to {e!r}" for e, n in counts.items())
    return own, (f"this sweep's jobs go to {len(counts)} experiments ({where}); its parent run "
                 f"is in {own!r}: set experiment=NAME to keep them together")


def refuse(message: str) -> NoReturn:
    """Print ``error: MESSAGE`` to stderr and stop with exit code 2 (a refused input)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def refuse_unresolved(exc: OmegaConfBaseException) -> NoReturn:
    """``refuse`` a setting of Hydra's own (``hydra.run.dir``, ``hydra.sweep.dir``) that does
    not resolve, naming its key: Hydra resolves them as it launches, outside any job's config
    and so outside ``validation.unresolvable``."""
    refuse(f"invalid config:\n  {exc.full_key}: {str(exc).splitlines()[0]}\nnothing was run")


# A job's outcome that only its status file knows: its run is an earlier one it reused, or its
# results are only on disk (the store holds its run as it was left).
FILE_ONLY = ("SKIPPED", "PENDING_SYNC")


def job_outcomes(parent_id: str, sweep_dir: str | Path, skip_unreadable: bool = False
                 ) -> list[dict]:
    """Each job's outcome, ``{"status", "run_id", "overrides", "error", ...}``, in job order. The
    store says how each job's run ended (the children of ``parent_id``); a job's status file
    (``tracking.write_status``) is the fallback for what the store cannot say (``FILE_ONLY``, a
    job that failed before its run was created) and gives the job order and overrides. A child
    run that left no status file (a killed worker) comes last, from its tags. An unreadable
    status file raises ``OSError``/``ValueError``, or is passed over with ``skip_unreadable``."""
    c = tracking.client()
    children = {run.info.run_id: run for run in c.search_runs(
        [c.get_run(parent_id).info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'",
        max_results=50000)}
    out, seen = [], set()
    for s in tracking.read_statuses(sweep_dir, skip_unreadable=skip_unreadable):
        seen.add(s.get("run_id"))
        run = children.get(s.get("run_id"))
        out.append(s if run is None or s["status"] in FILE_ONLY else
                   {**s, "status": run.info.status})
    out += [{"status": run.info.status, "run_id": run_id,
             "overrides": run.data.tags.get("ragexp.overrides", ""),
             "error": run.data.tags.get("ragexp.error", "")}
            for run_id, run in children.items() if run_id not in seen]
    return out


def job_counts(parent_id: str, sweep_dir: str | Path) -> dict[str, int]:
    """Jobs by outcome (``finished``, ``failed``, ``killed``, ``skipped``, ``pending_sync``,
    ...), of ``job_outcomes``."""
    counts: dict[str, int] = {}
    for s in job_outcomes(parent_id, sweep_dir):
        key = s["status"].lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def end_parent(parent_id: str, sweep_dir: str | Path, status: str | None = None,
               reason: str = "") -> dict[str, int]:
    """Close children still ``RUNNING`` (only when the sweep itself is being stopped), count
    the jobs, tag the parent with the counts and end it: ``status`` if given, else ``FAILED``
    when any job did not finish or is only on disk, else ``FINISHED``."""
    c = tracking.client()
    if status is not None:
        exp = c.get_run(parent_id).info.experiment_id
        for run in c.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent_id}' and "
                                        f"attributes.status = 'RUNNING'", max_results=50000):
            c.set_tag(run.info.run_id, "ragexp.error", f"{status}: sweep {reason}")
            c.set_terminated(run.info.run_id, status)
    counts = job_counts(parent_id, sweep_dir)
    bad = sum(n for k, n in counts.items() if k not in ("finished", "skipped"))
    c.set_tag(parent_id, "ragexp.jobs", json.dumps(counts, sort_keys=True))
    if reason:
        c.set_tag(parent_id, "ragexp.error", reason)
    c.set_terminated(parent_id, status or ("FAILED" if bad else "FINISHED"))
    return counts


class SweepCallback(Callback):
    """Validates every job, then creates store, experiment and parent run before a multirun;
    reports and ends the parent after it (see the module docstring)."""

    parent_id: str | None = None  # the parent run, once created

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        jobs = check_jobs(config)
        try:
            experiments = [str(cfg.experiment) for _, cfg in jobs or []]
            own_experiment = str(config.experiment)
            # Likewise the baseline: the ablations of a starter (ragexp init) each name theirs.
            baselines = {str(cfg.baseline) for _, cfg in jobs or []}
            own_baseline = str(config.baseline)
        except OmegaConfBaseException as exc:  # ${hydra:job.num}: known once a job launches
            refuse(f"{exc.full_key}: {str(exc).splitlines()[0]}: a sweep's experiment and "
                   f"baseline must resolve before its jobs launch (the parent run is created "
                   f"first, and Hydra sets a job's own settings as it launches it)\n"
                   f"nothing was run")
        name, split_note = parent_experiment(experiments, own_experiment)
        if split_note:
            log.warning("%s", split_note)
        self.baseline = baselines.pop() if len(baselines) == 1 else own_baseline
        try:
            self._start(config, None if jobs is None else len(jobs), name)
        except (SystemExit, KeyboardInterrupt, lifecycle.Interrupted):
            raise
        except OmegaConfBaseException as exc:  # hydra.sweep.dir=${nosuch}
            refuse_unresolved(exc)
        except BaseException as exc:
            raise SystemExit(f"error: the sweep could not start, nothing was run: "
                             f"{tracking.error_summary(exc)}") from None

    def _start(self, config: DictConfig, n_jobs: int | None, name: str) -> None:
        lifecycle.install_signal_handlers()
        sweep_dir = str(config.hydra.sweep.dir)
        exp_id = tracking.ensure_experiment(name)
        for box, run_id in outbox.sync([sweep_dir], tracking.tracking_uri()):
            say(f"synced results kept on disk in {box.root} to run {run_id}")
        c = tracking.client()
        closed, _ = lifecycle.close_abandoned(c, [exp_id])
        for run in closed:
            say(f"closed abandoned run {run.info.run_id} ({run.info.run_name}) as FAILED: "
                f"its process {run.data.tags.get(lifecycle.PID_TAG)} is gone")
        tags = {tracking.ROLE_TAG: tracking.SWEEP_ROLE, "ragexp.sweep_dir": sweep_dir,
                "ragexp.overrides": " ".join(task_overrides(config.hydra)),
                "ragexp.code": tracking.code_identity(), **lifecycle.process_tags()}
        if n_jobs is not None:
            tags["ragexp.n_jobs"] = str(n_jobs)
        parent = c.create_run(exp_id, run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
                              tags=tags)
        self.parent_id = parent.info.run_id
        lifecycle.opened(self.parent_id, lambda status, reason: end_parent(
            self.parent_id, sweep_dir, status, reason))
        os.environ["MLFLOW_TRACKING_URI"] = tracking.tracking_uri()
        self.sweep_dir = sweep_dir
        Session.current().sweep = self
        jobs_under(GlobalHydra.instance().config_loader(), self.parent_id)
        log.info("MLflow parent run %s in experiment %r (%s)", self.parent_id, name,
                 tracking.tracking_uri())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Compare the jobs (``_select``), write the sweep's page (``_report``), end the parent
        run and print what every job did. Raises ``SystemExit(1)`` when a job did not finish."""
        sweep_dir = str(config.hydra.sweep.dir)
        outcomes = job_outcomes(self.parent_id, sweep_dir, skip_unreadable=True)
        if any(s["status"] in ("FINISHED", "SKIPPED") for s in outcomes):
            self._select(config, outcomes)
            self._report(config)
        else:  # nothing to compare or show: the lines below say why each job did not finish
            say("no comparison and no report.html: no job of this sweep finished")
        self._end(sweep_dir)

    def stopped(self, exc: BaseException) -> NoReturn:
        """End the sweep that its sweeper stopped with ``exc`` (Optuna's, when no trial
        finished: ``No trials are completed yet``, after every trial's config was refused):
        the parent ``FAILED`` with the reason, each job's outcome printed as at a sweep's end,
        ``SystemExit(1)``. Before, a traceback through Optuna hid why each trial failed."""
        why = f"the sweeper stopped: {tracking.error_summary(exc)}"
        print(f"error: {why}", file=sys.stderr)
        self._end(self.sweep_dir, "FAILED", why)
        raise SystemExit(1)

    def _end(self, sweep_dir: str, status: str | None = None, reason: str = "") -> None:
        """End the parent (``end_parent``, a stop signal held meanwhile) and print what every
        job did; ``SystemExit(1)`` when a job did not finish. The parent leaves the exit hook's
        list only once ended, or once the store refused to end it: a stop that cut the end short
        (a second signal) leaves it to the hook, which ends it ``KILLED`` (before, it was taken
        off the list first, and a stop there left the parent ``RUNNING``)."""
        try:
            with lifecycle.signals_deferred():
                counts = end_parent(self.parent_id, sweep_dir, status, reason)
                lifecycle.closed(self.parent_id)
        except Exception as exc:
            lifecycle.closed(self.parent_id)
            raise SystemExit(f"error: could not end sweep run {self.parent_id}: "
                             f"{tracking.error_summary(exc)}") from None
        finally:
            session = Session.current()
            session.validated.clear()
            session.sweep = None
        done = job_outcomes(self.parent_id, sweep_dir)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no job ran"
        say(f"\nsweep {'done' if status is None else status}: {summary} "
            f"(parent run {self.parent_id})")
        for s in done:
            if s["status"] == "SKIPPED":
                say(f"  skipped {s['overrides']}: identical config, data and code already "
                    f"finished as run {s['run_id']} (force=true reruns it)")
        failed = [s for s in done if s["status"] not in ("FINISHED", "SKIPPED")]
        for s in failed:
            run = (f"run {s['run_id']}" if s.get("run_id") else
                   "no run: the job failed before its run was created")
            say(f"  {s['status']} {s['overrides']}: {s.get('error', '')} ({run})")
        if failed:
            print(f"{len(failed)} job(s) did not finish", file=sys.stderr)
            raise SystemExit(1)

    def _select(self, config: DictConfig, outcomes: list[dict]) -> None:
        """Each job vs the sweep's baseline (the one every job names, else the sweep config's),
        the best run and those tied with it
        (``selection.summarise_sweep``), printed. A failure is logged and tagged
        ``ragexp.selection_error`` on the parent: the sweep's own outcome is still recorded."""
        try:
            # defer heavy import
            from ragexp.decide.selection import summarise_sweep

            for line in summarise_sweep(self.parent_id, outcomes,
                                        self.baseline, str(config.objective),
                                        objective_source=str(config.objective_source)):
                say(line)
        except Exception as exc:
            log.exception("sweep comparisons failed")
            tracking.client().set_tag(self.parent_id, "ragexp.selection_error",
                                      tracking.error_summary(exc)[:5000])

    def _report(self, config: DictConfig) -> None:
        """The sweep's page, ``report.html`` on the parent (``report.html.write``), unless
        ``sweep_report=false``. A report never fails the sweep: anything but a stop is logged
        and tagged ``ragexp.report_error``."""
        try:
            # defer heavy import
            from ragexp.report.html import write

            if config.get("sweep_report", True):
                say(write(self.parent_id))
            else:
                say(f"no report.html (sweep_report=false); later: ragexp report --html "
                    f"report.html --parent {self.parent_id}")
        except (KeyboardInterrupt, lifecycle.Interrupted):
            raise
        except BaseException as exc:  # noqa: BLE001 - a report never fails the sweep
            log.warning("no report.html for sweep %s: %s", self.parent_id,
                        tracking.error_summary(exc),
                        exc_info=not isinstance(exc, (SystemExit, RagexpError)))
            tracking.client().set_tag(self.parent_id, "ragexp.report_error",
                                      tracking.error_summary(exc)[:5000])
