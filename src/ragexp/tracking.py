"""MLflow side of ragexp: where runs go, what each run records, and the sweep's parent run.

Tracking URI: ``MLFLOW_TRACKING_URI`` when set, else a sqlite store ``mlruns/mlflow.db`` with
artifacts under ``mlruns/artifacts``. A multirun gets one parent run (created, with the store
and experiment, by ``SweepCallback`` before any job starts: sqlite migrations race otherwise)
and each job is a child run of it. Each job leaves a ``ragexp_status.json`` in its Hydra
output folder, which is how the sweep's end-of-run summary knows what failed or was skipped,
whatever the launcher.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)

PARENT_ENV = "RAGEXP_PARENT_RUN_ID"
STATUS_FILE = "ragexp_status.json"
# Keys that change how a run is shown or forced, or where caches live, not what it measures
# (a dotted key is nested: the embedder's model cache follows ``cache_dir``).
VOLATILE_KEYS = ("force", "progress", "cache_dir", "experiment", "verbose", "embedder.cache_dir")


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    Path("mlruns").mkdir(exist_ok=True)
    return f"sqlite:///{Path('mlruns/mlflow.db').resolve()}"


def client():
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


def ensure_experiment(name: str) -> str:
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None  # a server or other store decides for itself
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):  # artifacts beside the database, never in the cwd
        location = (Path(uri[len("sqlite:///"):]).parent / "artifacts").resolve().as_uri()
    try:
        return c.create_experiment(name, artifact_location=location)
    except Exception:  # created meanwhile by another process
        return c.get_experiment_by_name(name).experiment_id


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


def config_hash(resolved: dict, data: dict[str, str]) -> str:
    """Identity of what a run measures: resolved config (minus volatile keys) + data hashes."""
    measured = {k: v for k, v in resolved.items() if k not in VOLATILE_KEYS}
    for key in (k for k in VOLATILE_KEYS if "." in k):
        group, name = key.split(".", 1)
        if isinstance(measured.get(group), dict) and name in measured[group]:
            measured[group] = {k: v for k, v in measured[group].items() if k != name}
    payload = json.dumps([measured, data], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


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


class SweepCallback(Callback):
    """Creates store, experiment and parent run before a multirun; reports failures after."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        name = str(config.experiment)
        exp_id = ensure_experiment(name)
        parent = client().create_run(exp_id, run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                     tags={"ragexp.role": "sweep",
                                           "ragexp.sweep_dir": str(config.hydra.sweep.dir),
                                           "ragexp.overrides": " ".join(
                                               config.hydra.overrides.task)})
        os.environ[PARENT_ENV] = parent.info.run_id
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri()
        self.parent_id = parent.info.run_id
        log.info("MLflow parent run %s in experiment %r (%s)", parent.info.run_id, name,
                 tracking_uri())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        statuses = []
        for f in sorted(Path(str(config.hydra.sweep.dir)).glob(f"*/{STATUS_FILE}"),
                        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
            statuses.append(json.loads(f.read_text()))
        counts: dict[str, int] = {}
        for s in statuses:
            counts[s["status"]] = counts.get(s["status"], 0) + 1
        failed = [s for s in statuses if s["status"] == "FAILED"]
        c = client()
        c.set_tag(self.parent_id, "ragexp.jobs", json.dumps(counts))
        c.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")
        summary = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items()))
        print(f"\nsweep done: {summary} (parent run {self.parent_id})")
        for s in statuses:
            if s["status"] == "SKIPPED":
                print(f"  skipped {s['overrides']}: identical config already finished as run "
                      f"{s['run_id']} (force=true reruns it)")
        for s in failed:
            print(f"  FAILED {s['overrides']}: {s['error']} (run {s['run_id']})")
        if failed:
            print(f"{len(failed)} job(s) failed", file=sys.stderr)
            raise SystemExit(1)


# The MLflow registered model whose alias names the run that is served (``promote`` moves it).
MODEL_NAME = "ragexp-serving"
ALIAS = "champion"
RUN_ID_CHARS = frozenset("0123456789abcdef")


class RunNotFound(LookupError):
    """A run reference that matches no run, or more than one."""


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
