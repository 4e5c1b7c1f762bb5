"""MLflow side of ragexp: where runs go and what each run records (``runs.tracked_run`` owns a
run's life).

Tracking URI: ``MLFLOW_TRACKING_URI`` when set, else a sqlite store ``mlruns/mlflow.db`` in the
folder ragexp was launched from (whatever ``hydra.job.chdir`` is) with artifacts under
``mlruns/artifacts``. Creating or migrating a local store, and creating an
experiment, happen under a file lock beside the store (``filelock``), so processes started
at the same moment do not race MLflow's migrations. HTTP stores get bounded retries and
timeouts (``HTTP_DEFAULTS``) unless the user set them.

A multirun's parent run belongs to ``ragexp.run.sweep.SweepCallback``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock

from ragexp.errors import NotFound, RagexpError, listed
from ragexp.session import Session
from ragexp.tracking import lifecycle
from ragexp.tracking.failures import describe

log = logging.getLogger(__name__)
PACKAGE = Path(__file__).resolve().parents[1]  # .../ragexp

MODEL_NAME = "ragexp-serving"  # registered model whose alias ALIAS is served
ALIAS = "champion"
STATUS_FILE = "ragexp_status.json"
# A tracking server that is down fails a call within about a minute, not after MLflow's
# default of 7 retries with exponential back-off and 120 s timeouts (many minutes).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
# Keys that change how a run is shown or forced, or where caches live, not what it measures
# (a dotted key is nested: the embedder's model cache follows ``cache_dir``).
VOLATILE_KEYS = ("force", "progress", "cache_dir", "experiment", "verbose", "objective",
                "objective_source",
                "baseline", "embedder.cache_dir", "reuse_stages", "sweep_report", "traces",
                "llm",  # llm.* counts through the answer.* and judge.* keys it resolves into
                "chunking.cache_dir", "chunking.embedder.cache_dir",  # chunking=semantic
                # how texts are batched, never what vectors they get
                # (tests/unit/test_embedders.py); batch_size stays in: recorded runs keep
                # their hashes
                "embedder.batch_tokens", "chunking.embedder.batch_tokens",
                "latency_sample")  # how many questions are timed alone: a latency, not a score


def launch_dir() -> Path:
    """The folder ragexp was started in, against which every relative path resolves: Hydra's
    ``runtime.cwd`` inside a Hydra job (with ``hydra.job.chdir=true`` the job runs in its output
    folder), else the current folder."""
    # defer heavy import
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.cwd)
    except ValueError:  # outside a Hydra job: the CLI, tests, notebooks
        return Path.cwd()


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` when set, else the sqlite store ``mlruns/mlflow.db`` of the launch
    folder (``launch_dir``), created if absent."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    folder = launch_dir() / "mlruns"
    folder.mkdir(exist_ok=True)
    return f"sqlite:///{(folder / 'mlflow.db').resolve()}"


class TrackingError(RagexpError, RuntimeError):
    """The tracking store could not be reached or did not take a write."""


def preload() -> None:
    """Import what opening the store imports (mlflow and, for a database URI, its SQL store:
    about 1.5 s of a process), opening and creating nothing: for a process with other work
    under way meanwhile (``run.forked``: a sweep's jobs composed in a child)."""
    _mlflow_settings()
    # defer heavy import
    import mlflow.tracking  # noqa: F401

    scheme = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:").split(":", 1)[0].split("+")[0]
    if scheme in ("sqlite", "postgresql", "mysql", "mssql"):
        # defer heavy import
        import mlflow.store.model_registry.sqlalchemy_store  # noqa: F401
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


def _mlflow_settings() -> None:
    """ragexp's defaults for MLflow's settings, where the user set none: no telemetry, no
    progress bars, bounded HTTP retries (``HTTP_DEFAULTS``). Before mlflow is imported."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)


def opened() -> bool:
    """Whether this session has opened a store (``client``): a process forked from it would
    share that store's database connections, which SQLite forbids using in a child."""
    return bool(Session.current().clients)


def store_lock(uri: str | None = None):
    """A cross-process lock for a local store (``<db>.lock`` beside a sqlite file, or in a file
    store's folder); a no-op for servers, which serialise writes themselves."""

    uri = uri or tracking_uri()
    if uri.startswith("sqlite:///"):
        return FileLock(uri[len("sqlite:///"):] + ".lock", timeout=600)
    if "://" not in uri or uri.startswith("file:"):
        folder = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(folder / ".ragexp.lock"), timeout=600)
    return nullcontext()


def client():
    """The session's ``MlflowClient`` on ``tracking_uri()`` (one per URI, reused by every job
    of a sweep); the first call per URI creates (or migrates) a local store under
    ``store_lock``. Raises ``TrackingError`` if unreachable."""
    _mlflow_settings()
    # defer heavy import
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)  # for the fluent calls (mlflow.search_runs) after this one
    ready = Session.current().clients
    if uri in ready:
        return ready[uri]
    try:  # constructing the client opens (and creates or migrates) the store
        # a stop while MLflow creates or migrates a sqlite file left it half-made for good; a
        # server's store is not held (a Ctrl-C must still cut a wait for one that is down)
        with store_lock(uri), (lifecycle.signals_deferred() if uri.startswith("sqlite:")
                               else nullcontext()):
            c = MlflowClient(tracking_uri=uri)
            c.search_experiments(max_results=1)
            c.search_registered_models(max_results=1)
    except Exception as exc:
        raise TrackingError(f"tracking store {uri} is not usable: "
                            f"{' '.join(str(exc).split())[:500]}{_half_created(uri, exc)}"
                            ) from exc
    ready[uri] = c
    return c


def _half_created(uri: str, exc: BaseException) -> str:
    """A hint for a sqlite store whose creation was cut short (MLflow's migrations left a
    ``_alembic_tmp_`` table, or a table that already exists): since ``client`` creates stores
    with SIGINT/SIGTERM held, only a process killed outright (SIGKILL, power loss) while it
    created the file leaves one. Empty for anything else."""
    text = str(exc)
    if not uri.startswith("sqlite:///") or not ("_alembic_tmp_" in text or
                                                "already exists" in text):
        return ""
    return (f". It looks half-created (a process stopped while creating it): if it holds no "
            f"run you need, remove {uri[len('sqlite:///'):]} and run again")


def ensure_experiment(name: str) -> str:
    """The experiment's id, created under ``store_lock`` if it does not exist yet."""
    c = client()
    with store_lock():
        exp = c.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        location = None  # a server or other store decides for itself
        uri = tracking_uri()
        if uri.startswith("sqlite:///"):  # artifacts beside the database, never in the cwd
            location = (Path(uri[len("sqlite:///"):]).parent / "artifacts").resolve().as_uri()
        try:
            return c.create_experiment(name, artifact_location=location)
        except Exception:  # created meanwhile by a process on another machine
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id


SWEEP_REPORT = "report.html"  # the sweep's page, an artifact of its parent run (report.html)
SWEEP_CERTIFICATE = "certificate.json"  # its question sets' certificate (decide.sources)
SWEEP_ARTIFACTS = (SWEEP_REPORT, SWEEP_CERTIFICATE)  # the artifacts a sweep's parent run logs
TABLE_FILE = "per_question.json"
# The tag MLflow's ``log_table`` sets, which ``mlflow.load_table`` searches runs by.
TABLE_TAGS = {"mlflow.loggedArtifacts": json.dumps([{"path": TABLE_FILE, "type": "table"}])}


def write_per_question(table, folder: Path) -> None:
    """The per-question table twice in ``folder`` (the run's artifacts, uploaded with the others
    in one ``log_artifacts``): ``per_question.csv``, and ``per_question.json`` as MLflow's
    ``log_table`` writes it (pandas ``to_json(orient="split", index=False, date_format="iso")``,
    mlflow 3.x ``MlflowClient.log_table``), which the UI's artifact view browses and
    ``mlflow.load_table`` reads back on a run logged with ``TABLE_TAGS``. Writing it here instead
    of calling ``log_table`` saves the run an upload and three store calls (a listing, a
    ``get_run`` and a ``set_tag``)."""
    table.to_csv(folder / "per_question.csv", index=False)
    table.to_json(folder / TABLE_FILE, orient="split", index=False, date_format="iso")


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"retriever.name": "dense", ...}``, without ``_target_`` keys."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if str(key).startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


ENDPOINT_STAGES = ("answer", "judge", "generator")  # the stages that may call an ``llm``
SWEEP_NODE = "sweep"  # a sweep job's ``sweep.parent`` (``run.sweep.jobs_under``)


def as_recorded(resolved: dict) -> dict:
    """``resolved`` in the shape runs have always been identified and logged by: each stage's
    endpoint keys (``answer.llm.model``) as the stage's own (``answer.model``), as configs held
    them before the endpoint was one ``llm`` node, so a run keeps its ``config_hash`` and its
    params' names (``measured`` and ``params`` read it), and without ``SWEEP_NODE`` (a sweep
    job's parent run, ``sweep.parent``: where the job belongs, no setting; the same job in
    another sweep is the same run). Copied where it changes; a config without a stage's ``llm``
    node or a sweep's is returned as is."""
    out = {k: v for k, v in resolved.items() if k != SWEEP_NODE} if SWEEP_NODE in resolved \
        else resolved
    for stage in ENDPOINT_STAGES:
        node = out.get(stage)
        if isinstance(node, dict) and isinstance(node.get("llm"), dict):
            endpoint = {k: v for k, v in node["llm"].items() if k != "_target_"}
            out = {**out, stage: {**endpoint, **{k: v for k, v in node.items() if k != "llm"}}}
    return out


def params(resolved: dict) -> dict[str, Any]:
    """A run's params: its resolved config ``as_recorded``, ``flatten``ed."""
    return flatten(as_recorded(resolved))


def measured(resolved: dict) -> dict:
    """The part of a (nested) config a run measures: without ``VOLATILE_KEYS``, and without the
    ``fusion`` group unless the retriever has hybrid parts (``retriever.parts``). What
    ``config_hash`` hashes, and the settings a run's label may name (``decide.labels``), read
    ``as_recorded``."""
    kept = as_recorded(resolved)
    for key in VOLATILE_KEYS:
        kept = _without(kept, key.split("."))
    if not (kept.get("retriever") or {}).get("parts"):
        # only hybrid parts are fused: a dense or BM25 run under another fusion is the same run
        # (else a sweep over retriever x fusion measures it twice and Holm counts it twice)
        kept = _without(kept, ["fusion"])
    return kept


def config_hash(resolved: dict, data: dict[str, str], code: str | None = None) -> str:
    """Identity of what a run measures: its ``measured`` config, data hashes and the code that
    measures (``code_identity()`` unless given)."""
    payload = json.dumps([measured(resolved), data, code or code_identity()], sort_keys=True,
                         default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _without(tree: dict, path: list[str]) -> dict:
    """``tree`` without the key at ``path`` (``["chunking", "cache_dir"]``), copied where it
    changes; ``tree`` itself when the path is not there."""
    head, *rest = path
    if head not in tree or (rest and not isinstance(tree[head], dict)):
        return tree
    if not rest:
        return {k: v for k, v in tree.items() if k != head}
    return {**tree, head: _without(tree[head], rest)}


@lru_cache(maxsize=1)
def code_identity() -> str:
    """``<ragexp version>+src.<sha256[:12] of ragexp's own .py files>``.

    A hash of the source that runs rather than the git commit: a commit changes on edits that
    measure nothing (README), and a ``-dirty`` marker hides which uncommitted edit ran."""
    try:
        version = metadata.version("ragexp")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    # defer heavy import
    from ragexp.index import stagestore  # numpy, for the stage keys

    return f"{version}+src.{stagestore.source_hash(PACKAGE)[:12]}"


def find_finished(experiment_id: str, chash: str) -> str | None:
    runs = client().search_runs(
        [experiment_id], f"tags.`ragexp.config_hash` = '{chash}' and attributes.status = "
                         f"'FINISHED'", max_results=1)
    return runs[0].info.run_id if runs else None


@lru_cache(maxsize=1)
def git_commit() -> str:
    """``git rev-parse HEAD`` of ragexp's folder, ``-dirty`` with uncommitted changes, or
    ``unknown``: read once per process (two git calls, 10 ms a job in a sweep), as the code
    that runs is the code imported at its start."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=PACKAGE)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True,
                               timeout=5, cwd=PACKAGE).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    out = {}
    for pkg in ("ragexp", "numpy", "faiss-cpu", "fastembed", "onnxruntime", "regex",
                "mlflow", "hydra-core"):
        try:
            out[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    out["version.python"] = sys.version.split()[0]
    return tuple(out.items())


def versions() -> dict[str, str]:
    """``{"version.<package>": "1.2.3", "version.python": ...}`` for the packages a run's
    numbers depend on (those installed), read once per process."""
    return dict(_versions())


def log_batch(run_id: str, metrics: dict[str, float] | None = None,
              params: dict[str, Any] | None = None, tags: dict[str, str] | None = None) -> None:
    """Metrics, params and tags in as few calls as MLflow's per-call limits allow."""
    # defer heavy import
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    m = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
    p = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
    t = [RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()]
    c = client()
    while m or p or t:
        c.log_batch(run_id, metrics=m[:1000], params=p[:100], tags=t[:100])
        m, p, t = m[1000:], p[100:], t[100:]


def write_status(output_dir: str | Path | None, **status: Any) -> None:
    """The job's outcome, for the sweep summary; nothing to do outside a Hydra job."""
    if output_dir is not None:
        Path(output_dir, STATUS_FILE).write_text(json.dumps(status, indent=2, default=str))


def read_statuses(sweep_dir: str | Path, skip_unreadable: bool = False) -> list[dict]:
    """The status files (``write_status``) a sweep's jobs left in their folders under
    ``sweep_dir``, in job order (the folders are numbered). An unreadable or half-written file
    raises ``OSError``/``ValueError``, or is passed over with ``skip_unreadable``."""
    files = sorted(Path(sweep_dir).glob(f"*/{STATUS_FILE}"),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    out = []
    for f in files:
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            if not skip_unreadable:
                raise
    return out


def error_summary(exc: BaseException) -> str:
    """``Type: message`` on one line, for the error under Hydra's instantiation wrappers; the
    stage's own message is kept, with its hint (``failures.describe``)."""

    return describe(exc)


# The MLflow registered model whose alias names the run that is served (``promote`` moves it).
RUN_ID_CHARS = frozenset("0123456789abcdef")


def champion(name: str = MODEL_NAME):
    """The registered version of ``name`` that the ``champion`` alias points to (an MLflow
    ``ModelVersion``), or None when there is none yet."""
    try:
        return client().get_model_version_by_alias(name, ALIAS)
    except Exception:
        return None


EVALUATION_RUNS = "tags.`ragexp.config_hash` != ''"  # what every ragexp evaluation run carries
HANDBOOK_EXPERIMENT = "ragexp-handbook"  # the shipped config's experiment (ragexp-${dataset.name})


def experiments_with_runs(limit: int | None = 5) -> list[str]:
    """Names of the experiments holding ragexp evaluation runs (``EVALUATION_RUNS``) in this
    store, the one with the latest run first, at most ``limit`` (None: all)."""
    # defer heavy import
    from mlflow.entities import ViewType

    c = client()
    exps = {e.experiment_id: e.name for e in c.search_experiments(view_type=ViewType.ALL)}
    found: list[tuple[int, str]] = []  # (start time of its latest run, name)
    for exp_id in exps:
        latest = c.search_runs([exp_id], EVALUATION_RUNS, max_results=1,
                               order_by=["attributes.start_time DESC"])
        if latest:
            found.append((latest[0].info.start_time, exps[exp_id]))
    return [n for _, n in sorted(found, reverse=True)[:limit]]


def default_experiment() -> str:
    """The experiment a command reads when given no ``--experiment``: the one holding this
    store's latest ragexp evaluation run, so what the runs launched from this folder use (a
    ``ragexp init`` project's runs go to ``ragexp-<its dataset>``, the handbook's to
    ``ragexp-handbook``: ``experiment: ragexp-${dataset.name}``); ``HANDBOOK_EXPERIMENT`` in a
    store without one."""
    found = experiments_with_runs(limit=1)
    return found[0] if found else HANDBOOK_EXPERIMENT


def experiment_ids(name: str) -> list[str]:
    """``[id]`` of the experiment named ``name``, ``[]`` when the store has none: searched by
    id, as ``mlflow.search_runs(experiment_names=[unknown])`` logs a WARNING line of its own
    beside ragexp's one-line error (``no_runs``)."""
    exp = client().get_experiment_by_name(name)
    return [exp.experiment_id] if exp is not None else []


def no_runs(experiment: str, what: str = "finished runs") -> NotFound:
    """The one-line error for an experiment with nothing to show: names it, the store, and the
    experiments that do hold runs (or how to make one)."""
    others = [n for n in experiments_with_runs(limit=None) if n != experiment]
    hint = (f"pick another with --experiment NAME (experiments with runs here: "
            f"{listed(others, 5)})" if others
            else "run an experiment first (python -m ragexp ...), or pick one with "
                 "--experiment NAME")
    return NotFound(f"no {what} in experiment {experiment!r} (tracking URI {tracking_uri()}); "
                    f"{hint}")


class RunNotFound(RagexpError, LookupError):
    """A run reference that matches no run, or more than one, or no run of the kind needed."""


def experiment_name_of(run_id: str) -> str:
    """Name of the experiment holding run ``run_id`` (a full id); ``RunNotFound`` if none."""
    c = client()
    try:
        return c.get_experiment(c.get_run(run_id).info.experiment_id).name
    except Exception as exc:
        raise RunNotFound(f"no run {run_id} in {tracking_uri()}") from exc


def resolve_run_id(ref: str) -> str:
    """The full id of the run that ``ref`` names: a full run id or a unique prefix of one
    (``compare`` prints 8 characters), searched in every experiment of the store.

    Raises ``RunNotFound`` when nothing matches, or when the prefix is ambiguous (listing the
    candidates with their names and statuses)."""
    ref = ref.strip().lower()
    if not ref or not set(ref) <= RUN_ID_CHARS:
        raise RunNotFound(f"{ref!r} is not a run id: run ids are hexadecimal (a full id or a "
                          f"unique prefix of one)")
    # defer heavy import
    from mlflow.entities import ViewType

    c = client()
    exp_ids = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]
    found = c.search_runs(exp_ids, f"attributes.run_id LIKE '{ref}%'",
                          run_view_type=ViewType.ALL, max_results=1000) if exp_ids else []
    if not found:
        raise RunNotFound(f"no run id starts with {ref!r} in {tracking_uri()}")
    if len(found) > 1:  # counted up to 1000: a count capped lower read as the whole count
        shown = listed((f"{r.info.run_id} ({r.data.tags.get('mlflow.runName', '')}, "
                        f"{r.info.status})" for r in found), 10, "; ")
        raise RunNotFound(f"run id prefix {ref!r} is ambiguous: "
                          f"{'1000 or more' if len(found) == 1000 else len(found)} runs match "
                          f"({shown}); give more characters")
    return found[0].info.run_id


def remember_artifact_root(run) -> None:
    """Keep the artifact root of ``run`` (an MLflow ``Run`` just created: its root is fixed
    then) for ``artifact_path``, which would otherwise read the run again to find it: at the
    end of a sweep, 12 ``get_run`` for the runs its own process created."""
    Session.current().artifact_roots[(tracking_uri(), run.info.run_id)] = run.info.artifact_uri


def artifact_path(run_id: str, name: str) -> str:
    """Local path of artifact ``name`` of a run, or ``RunNotFound`` saying why the run has
    none: its status and, for a failed run, its ``ragexp.error`` tag; ``SweepParentRun``
    (``refuse_sweep_parent``) for a sweep's parent run, whose artifacts are its page and its
    certificate (``SWEEP_ARTIFACTS``). A run whose artifacts are local files (``file:`` or
    plain-path artifact root) gives its own file, to be read, not written
    (``download_artifacts`` copied it to a temporary folder first: 80 ms a file, 36 files at the
    end of a 12-job sweep); any other store downloads it. A run's
    artifact root, fixed when the run is created, is read once per session (``get_run`` reads
    every param, metric and tag of the run)."""
    # defer heavy import
    from mlflow.utils.file_utils import local_file_uri_to_path

    c = client()
    try:
        key = (tracking_uri(), run_id)
        roots = Session.current().artifact_roots
        root = roots.get(key) or roots.setdefault(key, c.get_run(run_id).info.artifact_uri)
        if "://" not in root or root.startswith("file:"):
            local = Path(local_file_uri_to_path(root)) / name
            if local.is_file():
                return str(local)
        return c.download_artifacts(run_id, name)
    except Exception as exc:
        try:
            run = c.get_run(run_id)
        except Exception:
            raise RunNotFound(f"no run {run_id} in {tracking_uri()}") from None
        if name not in SWEEP_ARTIFACTS:  # the artifacts a sweep's parent run has
            refuse_sweep_parent(run)
        error = run.data.tags.get("ragexp.error")
        if run.info.status != "FINISHED":
            why = f"it is {run.info.status}" + (f" ({error})" if error else "")
        else:
            why = f"it is FINISHED but has no {name} artifact (not a ragexp evaluation run?)"
        raise RunNotFound(f"run {run_id} has no {name}: {why}") from exc


ROLE_TAG, SWEEP_ROLE = "ragexp.role", "sweep"  # the tag on a sweep's parent run (run.sweep)
SWEEP_RUNS_NAMED = 3  # runs a refusal names to pick from, the best first


class SweepParentRun(RunNotFound):
    """A sweep's parent run given where an evaluation run is needed: it only groups its jobs'
    runs and measured nothing itself (no metrics, ``config.yaml`` or per-question table)."""


def sweep_runs(parent) -> list:
    """Every run of sweep ``parent`` (an MLflow ``Run``), newest first: its children and the
    finished runs it reused instead of rerunning them (tagged ``ragexp.in_sweep.<parent id>``,
    ``run.sweep.SKIP_LINK``), as ``ragexp compare --parent`` lists them."""
    run_id = parent.info.run_id
    found: dict[str, Any] = {}
    for where in (f"tags.`mlflow.parentRunId` = '{run_id}'",
                  f"tags.`ragexp.in_sweep.{run_id}` = 'skipped'"):
        for run in client().search_runs([parent.info.experiment_id], where, max_results=50000):
            found.setdefault(run.info.run_id, run)
    return sorted(found.values(), key=lambda r: r.info.start_time or 0, reverse=True)


def _named(run_id: str, label: str | None) -> str:
    """``run_id[:8]``, with its label (``ragexp.ablation``) when that says something: not
    ``custom`` (a run of overrides alone) or the id itself."""
    return run_id[:8] + (f" ({label})" if label and label not in ("custom", run_id[:8]) else "")


class UnusableRun(RunNotFound):
    """A run given to be gated, confirmed, promoted or served that holds no measurement to use:
    deleted, or not FINISHED (failed, killed, still running)."""


def refuse_unusable(run) -> None:
    """``refuse_sweep_parent``, then raise ``UnusableRun`` for a deleted run (it was served
    and gated as if alive, and promoting it ended in MLflow's traceback) or one not FINISHED,
    naming its status and recorded error: a FAILED run has no data hashes, and the gate and
    confirm said it was "evaluated on different data"."""
    refuse_sweep_parent(run)
    rid = run.info.run_id
    if run.info.lifecycle_stage == "deleted":
        raise UnusableRun(f"run {rid} is deleted: restore it (mlflow runs restore --run-id "
                          f"{rid}) or pick another run")
    if run.info.status != "FINISHED":
        error = run.data.tags.get("ragexp.error")
        raise UnusableRun(f"run {rid} is {run.info.status}" + (f" ({error})" if error else "")
                          + ": it holds no finished measurement; pick a FINISHED run")


def refuse_sweep_parent(run) -> None:
    """Raise ``SweepParentRun`` when ``run`` (an MLflow ``Run``) is a sweep's parent run (tag
    ``ragexp.role=sweep``); nothing otherwise. Every command given a run id to evaluate, serve,
    promote, gate, confirm or compare calls it before any other check, so a parent is refused
    in the same one line everywhere, e.g. ``1a2b3c4d is a sweep's parent run (3 runs), not an
    evaluation run: pick one of its runs, e.g. its best 5e6f7a8b (notes_hybrid), or 9c0d1e2f
    (notes_baseline); `ragexp compare --parent 1a2b3c4d` lists them``: its best
    (``ragexp.best_run``, ``ragexp.best_label``) and its other finished runs, newest first,
    ``SWEEP_RUNS_NAMED`` in all; a run's label is its ablation unless that says nothing
    (``custom``)."""
    if run.data.tags.get(ROLE_TAG) != SWEEP_ROLE:
        return
    run_id, tags = run.info.run_id, run.data.tags
    runs = sweep_runs(run)
    finished = [r for r in runs if r.info.status == "FINISHED"]

    best = tags.get("ragexp.best_run")
    picks = [f"its best {_named(best, tags.get('ragexp.best_label'))}"] if best else []
    others = [r for r in finished if r.info.run_id != best]
    room = SWEEP_RUNS_NAMED - len(picks)
    picks += [_named(r.info.run_id, r.data.tags.get("ragexp.ablation")) for r in others[:room]]
    count = f"{len(runs)} run{'' if len(runs) == 1 else 's'}" + (
        f", {len(finished)} finished" if len(finished) != len(runs) else "")
    head = f"{run_id[:8]} is a sweep's parent run ({count}), not an evaluation run"
    if not picks:
        raise SweepParentRun(f"{head}: none of its runs finished, so there is none to pick "
                             f"instead; rerun the sweep")
    raise SweepParentRun(f"{head}: pick one of its runs, e.g. {picks[0]}"
                         + (f", or {', '.join(picks[1:])}" if picks[1:] else "")
                         + (f", ... and {len(others) - room} more" if len(others) > room
                            else "")
                         + f"; `ragexp compare --parent {run_id[:8]}` lists them")


def refuse_sweep_child(run_id: str) -> None:
    """Raise ``NotFound`` when run ``run_id`` (a full id) is one of a sweep's runs (it has an
    ``mlflow.parentRunId``), given where the sweep's parent run is needed (``compare
    --parent``, ``report --parent``, ``questions plan --parent``, ``promote --cheapest-tied``),
    naming the sweep it belongs to; nothing otherwise (an id of no run too: the caller says what
    it lacks)."""
    # defer heavy import
    from mlflow.exceptions import MlflowException

    try:
        tags = client().get_run(run_id).data.tags
    except MlflowException:
        return
    parent = tags.get("mlflow.parentRunId")
    if parent:
        raise NotFound(f"{_named(run_id, tags.get('ragexp.ablation'))} is a run of sweep "
                       f"{parent[:8]}, not a sweep's parent run: name its sweep, {parent[:8]}, "
                       f"instead (`ragexp compare --parent {parent[:8]}` lists the sweep's "
                       f"runs)")
