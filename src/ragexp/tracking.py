"""MLflow side of ragexp: where runs go, what each run records, and one owner of a run's life.

Tracking URI: ``MLFLOW_TRACKING_URI`` when set, else a sqlite store ``mlruns/mlflow.db`` with
artifacts under ``mlruns/artifacts``. Creating or migrating a local store, and creating an
experiment, happen under a file lock beside the store (``filelock``), so processes started
at the same moment do not race MLflow's migrations. HTTP stores get bounded retries and
timeouts (``HTTP_DEFAULTS``) unless the user set them.

``tracked_run`` owns one run from creation to its end: it tags the owning process, writes the
job's ``ragexp_status.json`` and its on-disk record (``outbox``), and ends the run ``FINISHED``,
``FAILED`` (error tag + ``error.txt``) or ``KILLED`` (SIGTERM/SIGINT), always with an end time.
A multirun's parent run belongs to ``ragexp.sweep.SweepCallback``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

from ragexp import lifecycle
from ragexp.outbox import Outbox

log = logging.getLogger(__name__)

PARENT_ENV = "RAGEXP_PARENT_RUN_ID"
MODEL_NAME = "ragexp-serving"  # registered model whose alias ALIAS is served
ALIAS = "champion"
STATUS_FILE = "ragexp_status.json"
# A tracking server that is down fails a call within about a minute, not after MLflow's
# default of 7 retries with exponential back-off and 120 s timeouts (many minutes).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
_READY: set[str] = set()
# Keys that change how a run is shown or forced, or where caches live, not what it measures
# (a dotted key is nested: the embedder's model cache follows ``cache_dir``).
VOLATILE_KEYS = ("force", "progress", "cache_dir", "experiment", "verbose", "objective",
                "baseline", "embedder.cache_dir", "reuse_stages", "sweep_report", "traces",
                "llm")  # llm.* counts through the answer.* and judge.* keys it resolves into


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    Path("mlruns").mkdir(exist_ok=True)
    return f"sqlite:///{Path('mlruns/mlflow.db').resolve()}"


class TrackingError(RuntimeError):
    """The tracking store could not be reached or did not take a write."""


def store_lock(uri: str | None = None):
    """A cross-process lock for a local store (``<db>.lock`` beside a sqlite file, or in a file
    store's folder); a no-op for servers, which serialise writes themselves."""
    from filelock import FileLock

    uri = uri or tracking_uri()
    if uri.startswith("sqlite:///"):
        return FileLock(uri[len("sqlite:///"):] + ".lock", timeout=600)
    if "://" not in uri or uri.startswith("file:"):
        folder = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(folder / ".ragexp.lock"), timeout=600)
    return nullcontext()


def client():
    """An ``MlflowClient`` on ``tracking_uri()``; the first call per process creates (or
    migrates) a local store under ``store_lock``. Raises ``TrackingError`` if unreachable."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    if uri in _READY:
        return MlflowClient(tracking_uri=uri)
    try:  # constructing the client opens (and creates or migrates) the store
        with store_lock(uri):
            c = MlflowClient(tracking_uri=uri)
            c.search_experiments(max_results=1)
            c.search_registered_models(max_results=1)
    except Exception as exc:
        raise TrackingError(f"tracking store {uri} is not usable: "
                            f"{' '.join(str(exc).split())[:500]}") from exc
    _READY.add(uri)
    return c


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


def write_per_question(table, folder: Path) -> None:
    """The per-question table as ``per_question.csv`` in ``folder`` (the run's artifacts, uploaded
    with the others): one file whatever the number of questions."""
    table.to_csv(folder / "per_question.csv", index=False)


def log_per_question_table(run_id: str, table) -> None:
    """The same table as the MLflow table ``per_question.json`` (``log_table``: browsable in the
    UI's artifact view, read back with ``mlflow.load_table``): one artifact, any size."""
    client().log_table(run_id, data=table, artifact_file="per_question.json")


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


def config_hash(resolved: dict, data: dict[str, str], code: str | None = None) -> str:
    """Identity of what a run measures: resolved config (minus volatile keys), data hashes and
    the code that measures (``code_identity()`` unless given)."""
    measured = {k: v for k, v in resolved.items() if k not in VOLATILE_KEYS}
    for key in (k for k in VOLATILE_KEYS if "." in k):
        group, name = key.split(".", 1)
        if isinstance(measured.get(group), dict) and name in measured[group]:
            measured[group] = {k: v for k, v in measured[group].items() if k != name}
    payload = json.dumps([measured, data, code or code_identity()], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def code_identity() -> str:
    """``<ragexp version>+src.<sha256[:12] of ragexp's own .py files>``.

    A hash of the source that runs rather than the git commit: a commit changes on edits that
    measure nothing (README), and a ``-dirty`` marker hides which uncommitted edit ran."""
    try:
        version = metadata.version("ragexp")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    return f"{version}+src.{source_hash(Path(__file__).parent)}"


def source_hash(package_dir: Path) -> str:
    """sha256[:12] over the relative paths and bytes of the ``.py`` files under a folder."""
    h = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        h.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes()
                 + b"\0")
    return h.hexdigest()[:12]


def find_finished(experiment_id: str, chash: str) -> str | None:
    runs = client().search_runs(
        [experiment_id], f"tags.`ragexp.config_hash` = '{chash}' and attributes.status = "
                         f"'FINISHED'", max_results=1)
    return runs[0].info.run_id if runs else None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).parent)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True,
                               timeout=5, cwd=Path(__file__).parent).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("ragexp", "numpy", "faiss-cpu", "fastembed", "onnxruntime", "regex",
                "mlflow", "hydra-core"):
        try:
            out[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    out["version.python"] = sys.version.split()[0]
    return out


def log_batch(run_id: str, metrics: dict[str, float] | None = None,
              params: dict[str, Any] | None = None, tags: dict[str, str] | None = None) -> None:
    """Metrics, params and tags in as few calls as MLflow's per-call limits allow."""
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


def error_summary(exc: BaseException) -> str:
    """``Type: message`` on one line, for the error under Hydra's instantiation wrappers; the
    stage's own message is kept, with its hint (``failures.describe``)."""
    from ragexp.failures import describe

    return describe(exc)


# The MLflow registered model whose alias names the run that is served (``promote`` moves it).
MODEL_NAME = "ragexp-serving"
ALIAS = "champion"
RUN_ID_CHARS = frozenset("0123456789abcdef")


class RunNotFound(LookupError):
    """A run reference that matches no run, or more than one."""


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
    from mlflow.entities import ViewType

    c = client()
    exp_ids = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]
    found = c.search_runs(exp_ids, f"attributes.run_id LIKE '{ref}%'",
                          run_view_type=ViewType.ALL, max_results=20) if exp_ids else []
    if not found:
        raise RunNotFound(f"no run id starts with {ref!r} in {tracking_uri()}")
    if len(found) > 1:
        listed = "; ".join(f"{r.info.run_id} ({r.data.tags.get('mlflow.runName', '')}, "
                           f"{r.info.status})" for r in found[:10])
        raise RunNotFound(f"run id prefix {ref!r} is ambiguous: {len(found)} runs match "
                          f"({listed}{'; ...' if len(found) > 10 else ''}); give more "
                          f"characters")
    return found[0].info.run_id


def artifact_path(run_id: str, name: str) -> str:
    """Local path of artifact ``name`` of a run, or ``RunNotFound`` saying why the run has
    none: its status and, for a failed run, its ``ragexp.error`` tag."""
    c = client()
    try:
        return c.download_artifacts(run_id, name)
    except Exception as exc:
        try:
            run = c.get_run(run_id)
        except Exception:
            raise RunNotFound(f"no run {run_id} in {tracking_uri()}") from None
        error = run.data.tags.get("ragexp.error")
        why = (f"it is {run.info.status}" + (f" ({error})" if error else "")
               if run.info.status != "FINISHED" else f"it is FINISHED but has no {name} "
               f"artifact (not a ragexp evaluation run?)")
        raise RunNotFound(f"run {run_id} has no {name}: {why}") from exc


@dataclass(frozen=True)
class TrackedRun:
    """The run ``tracked_run`` yields: its id and its on-disk record."""

    run_id: str
    outbox: Outbox

    def log(self, metrics: dict[str, float], tags: dict[str, str],
            write_artifacts: Callable[[Path], None]) -> None:
        """Write metrics, tags and artifacts to the record on disk, then to the store.
        Raises ``TrackingError`` (naming the record folder) when the store does not take them."""
        self.outbox.update(metrics=metrics, tags=tags, state="pending")
        write_artifacts(self.outbox.artifacts)
        try:
            log_batch(self.run_id, metrics=metrics, tags=tags)
            client().log_artifacts(self.run_id, str(self.outbox.artifacts))
        except Exception as exc:
            raise TrackingError(
                f"could not record run {self.run_id} in {tracking_uri()}: "
                f"{' '.join(str(exc).split())[:300]}. Its metrics, params, tags and artifacts "
                f"are kept in {self.outbox.root}; `ragexp runs sync {self.outbox.root}` logs "
                f"them when the store is back") from exc
        self.outbox.update(state="logged")


    def log_inputs(self, inputs: list) -> None:
        """MLflow dataset inputs; ``TrackingError`` when the store does not take them.

        MLflow's SQL store looks a dataset up and inserts it when missing, so two jobs logging
        the same dataset at once can both insert and one hits the unique key on (experiment,
        name, digest). Local stores log under ``store_lock``; any store gets up to three
        retries on a unique-key clash, which find the row the other job wrote."""
        for attempt in range(4):
            try:
                c = client()  # its first call takes store_lock itself: not reentrant
                with store_lock():
                    c.log_inputs(self.run_id, inputs)
                return
            except Exception as exc:
                if attempt < 3 and _unique_clash(exc):
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise TrackingError(
                    f"could not record the inputs of run {self.run_id} in {tracking_uri()}: "
                    f"{' '.join(str(exc).split())[:300]}") from exc


def _unique_clash(exc: BaseException) -> bool:
    """Whether a store error is a unique-key violation (sqlite, PostgreSQL, MySQL wording)."""
    text = str(exc).lower()
    return any(s in text for s in ("unique constraint", "duplicate key", "duplicate entry",
                                   "integrityerror"))


def _end(run_id: str, status: str, error: str = "", trace: str = "") -> None:
    """End a run with an end time; ``error``/``trace`` become the tag and ``error.txt``."""
    c = client()
    if error:
        c.set_tag(run_id, "ragexp.error", error[:5000])
    if trace:
        c.log_text(run_id, trace, "error.txt")
    c.set_terminated(run_id, status)


@contextmanager
def tracked_run(experiment_id: str, *, run_name: str | None, tags: dict[str, str],
                params: dict[str, Any], output_dir: str | None = None,
                overrides: str = "") -> Iterator[TrackedRun]:
    """Create a run (params, tags, owning process), yield it, end it.

    Ends ``FINISHED`` when the block completes, ``KILLED`` on SIGTERM/SIGINT (``lifecycle``),
    ``FAILED`` on any other exception (``ragexp.error`` tag, ``error.txt``); the exception
    propagates. The job's status file follows each step (``RUNNING`` -> final status, or
    ``PENDING_SYNC`` when the results are only on disk). Raises ``TrackingError`` when the
    store cannot create the run."""
    lifecycle.install_signal_handlers()
    c = client()
    try:
        run_id = c.create_run(experiment_id, run_name=run_name,
                              tags={**tags, **lifecycle.process_tags()}).info.run_id
        log_batch(run_id, params=params)
    except Exception as exc:
        raise TrackingError(f"could not create a run in {tracking_uri()}: "
                            f"{' '.join(str(exc).split())[:500]}") from exc
    box = Outbox.create(output_dir)
    box.update(run_id=run_id, run_name=run_name, experiment_id=experiment_id,
               experiment=c.get_experiment(experiment_id).name, tracking_uri=tracking_uri(),
               params=params, tags=tags, state="open")
    lifecycle.opened(run_id, lambda status, reason: _end(run_id, status, reason))
    write_status(output_dir, status="RUNNING", run_id=run_id, overrides=overrides)
    try:
        yield TrackedRun(run_id, box)
    except BaseException as exc:
        with lifecycle.signals_deferred():
            status = "KILLED" if lifecycle.interruption(exc) else "FAILED"
            sig = lifecycle.signal_received() or getattr(exc, "signum", signal.SIGINT)
            error = (error_summary(exc) if status == "FAILED"
                     else f"stopped by {signal.Signals(sig).name}")
            trace = traceback.format_exc()
            (box.root / "error.txt").write_text(trace)
            try:
                _end(run_id, status, error, trace)
            except Exception as end_exc:  # the store may be why we are here
                log.error("could not mark run %s %s: %s", run_id, status, end_exc)
            pending = box.read().get("state") == "pending"
            write_status(output_dir, status="PENDING_SYNC" if pending else status,
                         run_id=run_id, overrides=overrides, error=error[:500],
                         record=str(box.root))
            lifecycle.closed(run_id)
        raise
    with lifecycle.signals_deferred():
        try:
            _end(run_id, "FINISHED")
        except Exception as exc:
            raise TrackingError(f"run {run_id} is logged but could not be ended in "
                                f"{tracking_uri()}: {exc}") from exc
        finally:
            lifecycle.closed(run_id)
        write_status(output_dir, status="FINISHED", run_id=run_id, overrides=overrides)
