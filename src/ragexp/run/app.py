"""Hydra entry point: ``python -m ragexp [overrides]`` runs one experiment and logs it to MLflow;
``python -m ragexp -m ...`` sweeps (one child run per job under one parent run)."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, OverrideParseException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ragexp.config import build as stages
from ragexp.config import schema, validation
from ragexp.config.compose import task_overrides, warn_shadowed
from ragexp.data import shipped, split
from ragexp.data.readers import DataError
from ragexp.decide import figures, labels, selection, sources
from ragexp.errors import InvalidValue, MissingInput, NotFound, RagexpError, WouldOverwrite
from ragexp.evaluation import measures
from ragexp.generate import circularity
from ragexp.report.abstain_svg import abstain_svg
from ragexp.run import inputs as run_inputs
from ragexp.run import repeats, run_folder
from ragexp.run.console import say
from ragexp.run.pipeline import RunResult, run_experiment
from ragexp.run.sweep import SKIP_LINK, parent_run, refuse, refuse_unresolved, validated
from ragexp.session import Session
from ragexp.tracking import failures, lifecycle, provenance, runs
from ragexp.tracking import store as tracking

log = logging.getLogger("ragexp")
# Errors that refuse what the user gave (a value, a file, a name): exit code 2, as the CLI's.
REFUSED_INPUT = (InvalidValue, MissingInput, NotFound, WouldOverwrite, DataError)
schema.register()


def build_and_run(cfg: DictConfig, dataset, answerer=None, judge=None) -> RunResult:
    """Build every stage from the composed config (``stages.build``) and run the experiment
    (``answerer`` and ``judge`` when already built: they check their API keys before any work)."""
    built = stages.build(cfg)
    if answerer is not None:
        built = replace(built, answerer=answerer)
    return run_experiment(
        dataset, built, measures=measures.resolve(cfg.measures, cfg.k),
        judge=judge or instantiate(cfg.judge), k=cfg.k, budget=cfg.abstain.budget,
        folds=cfg.abstain.folds, progress=cfg.progress, store=stages.stage_store(cfg),
        objective=cfg.objective, latency_sample=cfg.latency_sample)


def write_artifacts(out: Path, cfg: DictConfig, result: RunResult) -> None:
    """The run's artifact files, written into ``out``."""
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    tracking.write_per_question(result.per_question, out)
    provenance.trec_files(out, result.judged, result.qrels, tag=cfg.ablation)
    if result.abstain is not None:
        (out / "abstain_curve.json").write_text(json.dumps(result.abstain.to_json(), indent=1))
        (out / "abstain_curve.svg").write_text(abstain_svg(result.abstain))


def dataset_source(resolved: dict) -> str:
    """Where the evaluation data lives, as absolute paths (for the run's dataset input)."""
    ds = resolved["dataset"]
    paths = [p for k in ("path", "corpus_dir", "questions")
             for p in (ds.get(k) if isinstance(ds.get(k), list) else [ds.get(k)])
             if isinstance(p, str)]
    return " ".join(str(Path(p).resolve()) for p in paths)


@dataclass
class Job:
    """What one composed config will measure, and where its outcome goes."""

    resolved: dict
    experiment_id: str
    dataset: Any
    data: dict[str, str]
    load_error: Exception | None
    config_hash: str
    output_dir: str | None
    overrides: str
    parent: str | None
    answerer: Any = None  # built before the data loads: an LLM answerer checks its API key
    judge: Any = None


def choose_split(cfg: DictConfig) -> tuple[str, str | None]:
    """Write the split ``cfg`` scores into ``cfg.split`` (``split.effective``: ``auto`` becomes
    ``all`` or ``dev``), so a run records, and is identified by, what it scored; return the
    split asked for and the dataset's own (``dataset.split``, None without one). Every config
    hashed as a run identity goes through it first."""
    requested, own_split = cfg.split, OmegaConf.select(cfg, "dataset.split", default=None)
    cfg.split = split.effective(requested, own_split)
    return requested, own_split


def resolve(cfg: DictConfig) -> Job:
    """Resolve the config (``choose_split`` first), load the data (a loading error is kept: it
    fails the run), log how many questions it scores and by which rule, and compute the run
    identity: config, data fingerprint, the other files it reads (``run.inputs``) and code."""
    requested, own_split = choose_split(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    exp_id = tracking.ensure_experiment(resolved["experiment"])
    dataset, data, early, answerer, judge = None, {}, None, None, None
    try:  # loading validates the golden set against the corpus; a failure fails the run below
        answerer, judge = instantiate(cfg.answer), instantiate(cfg.judge)  # API keys, first
        whole = instantiate(cfg.dataset)
        dataset = split.select(whole, cfg.split, cfg.split_seed, cfg.split_test_share)
        log.info("%s", split.rule(requested, cfg.split, own_split, len(dataset.queries()),
                                  len(whole.queries()), cfg.split_seed, cfg.split_test_share))
        data = dataset.fingerprint()
        inputs = run_inputs.hashes(cfg)  # the other files it reads: part of its identity
    except Exception as exc:
        early, inputs = exc, {}
    try:
        hc = HydraConfig.get()
        output_dir, overrides = hc.runtime.output_dir, " ".join(task_overrides(hc))
        multirun = hc.mode == RunMode.MULTIRUN
    except ValueError:  # called outside Hydra (tests, notebooks): no job folder, no status
        output_dir, overrides, multirun = None, "", False
    parent = parent_run(cfg)
    if multirun and not parent:
        raise RagexpError("a multirun job without a sweep parent run: ragexp.run.sweep."
                           "SweepCallback must be among hydra.callbacks")
    return Job(resolved, exp_id, dataset, data, early,
               tracking.config_hash(resolved, {**data, **inputs}),
               output_dir, overrides, parent, answerer, judge)


def already_finished(cfg: DictConfig, job: Job) -> str | None:
    """The finished run with this job's identity, unless ``force`` or the data did not load;
    a sweep links the reused run to its own parent (``sweep.SKIP_LINK``)."""
    if cfg.force or job.load_error is not None:
        return None
    done = tracking.find_finished(job.experiment_id, job.config_hash)
    if done and job.parent:
        tracking.client().set_tag(done, f"{SKIP_LINK}{job.parent}", "skipped")
    return done


def warn_circular(job: Job) -> list[str]:
    """Warn, once a process, of each model that wrote some of the questions the job scores and
    is also its answerer's, judge's or embedder's (``generate.circularity``); return the
    warnings said now."""
    said = Session.current().said
    lines = [line for line in circularity.warnings(circularity.writers(job.dataset.queries()),
                                                   circularity.system_models(job.resolved))
             if ("circular", line) not in said]
    for line in lines:
        said.add(("circular", line))
        log.warning("%s", line)
    return lines


def run_logged(cfg: DictConfig, label: str | None = None) -> dict:
    """Resolve, skip-check, run, log: one job, owned from start to end by
    ``tracking.tracked_run``. ``label`` names it on the console and as its MLflow run (what
    ``confirm`` gives a test run: its dev run's label, ``decide.labels``); else its ablation,
    or for a run of overrides only its overrides (``labels.of_overrides``). Raises
    ``ConfigRangeError`` before anything is created when a value is one the job would refuse
    (``validation.validate``), and whatever failed the run after marking it. Relative paths are
    the launch folder's (``stages.anchor_paths``), with ``hydra.job.chdir=true`` too."""
    stages.anchor_paths(cfg, tracking.launch_dir())
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    if hc is None or not validated(task_overrides(hc)):
        validation.validate(cfg)
    if hc is not None:
        warn_shadowed(tuple((s.provider, s.schema, s.path) for s in hc.runtime.config_sources))
    job = resolve(cfg)
    if job.load_error is None:
        sources.refuse_unknown(cfg.objective_source, job.dataset.queries())
    done = already_finished(cfg, job)
    if done:
        log.warning("skipping: identical config, data and code already finished as run %s "
                    "(force=true reruns it)", done)
        tracking.write_status(job.output_dir, status="SKIPPED", run_id=done,
                              overrides=job.overrides)
        return {"status": "SKIPPED", "run_id": done}
    stages.check_vectors(cfg)  # whole matrices: after the skip check, before the run exists
    tags = {"ragexp.config_hash": job.config_hash, "ragexp.ablation": cfg.ablation,
            "ragexp.overrides": job.overrides, "ragexp.code": tracking.code_identity(),
            "git.commit": tracking.git_commit(), **tracking.versions(),
            **provenance.stage_tags(job.resolved)}
    tags.update(stages.locations(cfg))  # serving finds the data wherever it is started
    if job.parent:
        tags["mlflow.parentRunId"] = job.parent
    # repeated log lines are said once with a count, before the run (and its app.log) ends
    label = label or (cfg.ablation if cfg.ablation != labels.CUSTOM else
                      labels.of_overrides(task_overrides(hc) if hc is not None else []))
    with runs.tracked_run(job.experiment_id, tags=tags,
                          run_name=label if label != labels.CUSTOM else None,
                          params=tracking.params(job.resolved), output_dir=job.output_dir,
                          overrides=job.overrides) as run, repeats.collapsed():
        log.info("MLflow run %s (experiment %s)", run.run_id, job.resolved["experiment"])
        if job.load_error is not None:
            raise job.load_error
        warn_circular(job)
        run.log_inputs([provenance.dataset_input(
            str(cfg.dataset.name), job.data, job.dataset.queries(),
            source=dataset_source(job.resolved))])
        result = build_and_run(cfg, job.dataset, job.answerer, job.judge)
        ident = result.identity
        tags = {"embedder.backend": ident.backend if ident else "none (no stage used it)",
                "embedder.model": ident.model if ident else "",
                "embedder.model_file": ident.model_file if ident else "",
                "embedder.model_sha256": ident.model_sha256 if ident else "", **job.data,
                **result.tags, **tracking.TABLE_TAGS}
        run.log(result.metrics, tags, lambda out: write_artifacts(out, cfg, result))
    say(f"run {run.run_id} [{label}] {run_line(result, cfg)}")
    return {"status": "FINISHED", "run_id": run.run_id, **result.metrics}


def run_line(result: RunResult, cfg: DictConfig) -> str:
    """What a run's console line says it measured: the retrieval measures of the questions
    that decide (``figures.figure`` of ``cfg.objective_source``), labelled with their source and
    count (``(hand, 45 q) ... ndcg_at_10=0.517``), then the abstain AUC, over every source's
    questions (said when there are several). The line printed every question's mean while
    the sweep's decision line used the hand-written ones' (0.556 against the best's 0.517)."""
    m = result.metrics
    keys = [ms.key for ms in measures.parse_all(cfg.measures)]
    fig = figures.figure(result.per_question, str(cfg.objective_source), keys[0])
    shown = "  ".join(f"{k}={m[fig.key(k)]:.3f}" for k in keys if fig.key(k) in m)
    auc = f"abstain.auc={m['abstain.auc']:.3f}" if "abstain.auc" in m else ""
    if auc and len(sources.sources_of(result.per_question)) > 1:
        auc = f"every source: {auc}"
    return "; ".join(s for s in (f"({fig.tag}) {shown}" if shown else "", auc) if s)


# The config groups ship with the package (``data.shipped``), so an installed ragexp composes its
# configs from any folder; a user's own folder adds to them with --config-dir.
CONF_DIR = shipped.conf_dir()


def refused_input(exc: BaseException) -> bool:
    """Whether ragexp's own error behind ``exc`` (the outermost ``RagexpError`` among its
    causes: Hydra wraps a constructor's error, and a ragexp error may wrap a library's) refuses
    what the user gave (``REFUSED_INPUT``)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, RagexpError):
        cause = cause.__cause__
    return isinstance(cause, REFUSED_INPUT)


def failed_before_its_run(exc: BaseException, error: str) -> None:
    """Write the status file of a sweep's job that failed before a run of it existed (a value
    the job refuses, a precomputed folder whose rows are refused before the run is created):
    ``FAILED`` with no run, so the sweep counts it, prints it and fails (a job whose run ended
    ``FAILED`` has its status file written by ``tracking.runs``). Before, such a job left no
    status file, and a sweep of one finished and one such job said "1 finished" and exited 0."""
    hc = HydraConfig.get()
    tracking.write_status(hc.runtime.output_dir, status="FAILED", run_id=None,
                          overrides=" ".join(task_overrides(hc)), error=error)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one job; returns its objective (``cfg.objective`` on ``cfg.split``), so a sweeper
    such as Optuna can drive ragexp. A skipped job returns its recorded objective; a failed job
    in a sweep returns None (Optuna records a failed trial) and the sweep goes on."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    lifecycle.install_signal_handlers()
    in_sweep = parent_run(cfg) is not None
    try:
        out = run_logged(cfg)
    except validation.ConfigRangeError as exc:
        if not in_sweep:
            run_folder.remove_if_refused()
            refuse(f"{exc}\nnothing was run")
        failed_before_its_run(exc, str(exc))
        log.error("%s", exc)
        return None
    except tracking.TrackingError as exc:  # no store: stop, in a sweep too
        raise SystemExit(f"error: {exc}") from None
    except Exception as exc:
        lifecycle.reraise_if_stopped()
        failures.report(exc, verbose=cfg.verbose)
        if in_sweep and getattr(exc, failures.FAILED_RUN, None) is None:
            failed_before_its_run(exc, tracking.error_summary(exc)[:500])
        if in_sweep:
            log.error("the sweep goes on and reports failed jobs at the end")
            return None
        if refused_input(exc):
            run_folder.remove_if_refused()  # only where no run left anything in it
        if cfg.verbose:
            raise
        # a refused input exits 2: the message said what and where, nothing more to show
        raise SystemExit(2 if refused_input(exc) else 1) from None
    return selection.objective(out, cfg.objective, cfg.objective_source)


# Overrides that can set ``hydra.mode`` or bring in configs that might (``mode_known``).
MODE_SOURCES = ("hydra.mode", "hydra.searchpath", "hydra/")


def mode_known(argv: list[str]) -> bool:
    """Whether ``argv`` (a command's arguments) leaves ``hydra.mode`` unset, as every shipped
    config does (tests/unit/test_perf.py holds that): no ``--config-dir``/``--config-path``/
    ``--config-name`` (a user's configs could set it) and no override of ``hydra.mode``,
    ``hydra.searchpath`` or a ``hydra/`` group. False where Hydra's parser stops on ``argv``
    (``--version``, a malformed option: Hydra's own parse then prints what it prints)."""
    # defer heavy import
    from hydra._internal.utils import get_args_parser

    try:  # quietly: Hydra's own parse of the same argv prints what this one would (--version)
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            args, _ = get_args_parser().parse_known_args(argv)
    except SystemExit:
        return False
    if args.config_path or args.config_name or args.config_dir:
        return False
    return not any(o.lstrip("+~").startswith(MODE_SOURCES) for o in args.overrides)


@contextmanager
def composed_once(argv: list[str]) -> Iterator[None]:
    """Hydra composes a command's whole config twice: once only to read ``hydra.mode``
    (``Hydra.get_mode``, which answers None when no config sets it; ``--multirun`` or its
    absence then decides), once to run it. Where ``mode_known(argv)``, the first is answered
    None without composing (0.13-0.19 s of a 3 s run, measured with ``tools.bench_wall``);
    anything else goes through Hydra's own ``get_mode``."""
    # defer heavy import
    from hydra._internal.hydra import Hydra

    if not mode_known(argv):
        yield
        return
    original = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = original


def entry() -> None:
    """``python -m ragexp``: ``main``, with Hydra's own composition errors (an unknown option,
    a misspelt key, an override that does not parse) reported in one line
    (``validation.composition_error``), exit 2, nothing run. Hydra re-raises them to us under
    its documented ``HYDRA_FULL_ERROR=1``; a user who set that variable gets Hydra's full
    report as before; a config file that is not YAML is refused so too (the parser's file,
    line and column). The config is composed once where ``composed_once`` allows it. A
    sweeper that raises while its sweep is under way (Optuna when no trial finished) ends the
    sweep ``FAILED`` with every job's outcome printed (``SweepCallback.stopped``), exit 1; a
    ``hydra.*`` setting that does not resolve (``hydra.run.dir=${nosuch}``, which Hydra
    resolves as it launches a job) is refused naming it, exit 2 (1 in a sweep under way)."""
    with composed_once(sys.argv[1:]):
        if os.environ.get("HYDRA_FULL_ERROR"):
            main()
            return
        os.environ["HYDRA_FULL_ERROR"] = "1"
        session = Session.current()
        session.sweep = None  # an earlier call's sweep in this session (tests) is not this one's
        try:
            main()
        except (ConfigCompositionException, OverrideParseException) as exc:
            refuse(f"{validation.composition_error(exc)}\nnothing was run")
        except yaml.YAMLError as exc:  # a config file Hydra reads by name does not parse
            refuse(f"{' '.join(str(exc).split())}\nnothing was run")
        except OmegaConfBaseException as exc:  # Hydra's own settings: hydra.run.dir=${nosuch}
            if session.sweep is not None:
                session.sweep.stopped(exc)
            refuse_unresolved(exc)
        except Exception as exc:  # a sweeper's own error, its sweep under way: end it
            if session.sweep is None:
                raise
            session.sweep.stopped(exc)
        finally:
            os.environ.pop("HYDRA_FULL_ERROR", None)
