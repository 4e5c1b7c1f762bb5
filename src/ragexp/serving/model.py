"""The champion as an MLflow model: a pyfunc ``python_model`` that answers questions with the
serving engine of the run it was promoted from.

``ragexp promote`` logs one (``log_model``) and registers it as a version of ``ragexp-serving``;
``mlflow models serve -m models:/ragexp-serving@champion`` and ``ragexp serve`` both load it
(``load_engine``). The model's artifacts are what rebuilding the run's engine needs, and
nothing is read from the tracking store at load time:

- ``config.yaml``: the run's resolved config, as the run logged it;
- ``fingerprint.json``: the data hashes the run recorded (``corpus_hash``, ``golden_hash``); a
  model loaded on data whose hashes differ refuses to start (``serving.check_fingerprint``);
- ``serving.json``: the source run id, its abstain threshold (``abstain.threshold``, null when
  the run has none: no refusal on confidence), and the absolute locations the run recorded
  (``ragexp.path.*`` tags: data, embedding cache, model folders) that the index is rebuilt from.

The python model itself is logged as code (``model_code.py``, MLflow's models-from-code), so
nothing is pickled; loading needs ragexp installed (``mlflow models serve --env-manager
local`` in ragexp's environment).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from omegaconf import OmegaConf

from ragexp import __version__
from ragexp.answer.base import Answer
from ragexp.config import build as stages
from ragexp.errors import RagexpError
from ragexp.serving import tracing
from ragexp.serving.engine import Engine, ServingError
from ragexp.serving.inputs import BadQuestion, check_question, json_type
from ragexp.serving.recorded import RecordedRun, recorded_fingerprint
from ragexp.tracking import store as tracking

CODE_PATH = Path(__file__).with_name("model_code.py")
ARTIFACTS = {"config": "config.yaml", "fingerprint": "fingerprint.json",
             "serving": "serving.json"}
OUTPUT_COLUMNS = ("answer", "refused", "citations", "sources", "confidence")
METADATA_KEY = "ragexp_serving"  # MLmodel metadata marking a ragexp serving model
LOGGED_MODEL_NAME = "ragexp-serving"
LOCAL_STORE = "sqlite:///mlruns/mlflow.db"  # tracking.tracking_uri() without MLFLOW_TRACKING_URI


@dataclass(frozen=True)
class ServingSpec:
    """What a model needs beside ``config.yaml`` to rebuild its run's engine."""

    run_id: str
    threshold: float | None  # None: the run measured no operating point
    locations: dict[str, str]  # ``ragexp.path.<key>`` -> absolute path, as the run tagged them
    fingerprint: dict[str, str]  # ``corpus_hash``/``golden_hash`` the run recorded


def spec_of_run(run) -> ServingSpec:
    """The ``ServingSpec`` of an MLflow run. Raises ``ServingError`` when the run recorded no
    data fingerprint (it did not finish, or is not a ragexp evaluation run)."""
    tags = run.data.tags
    fingerprint = recorded_fingerprint(run)
    threshold = run.data.metrics.get("abstain.threshold")
    locations = {k: v for k, v in tags.items() if k.startswith(stages.LOCATION_TAG)}
    return ServingSpec(run.info.run_id, threshold, locations, fingerprint)


def write_artifacts(run_id: str, spec: ServingSpec, folder: Path) -> dict[str, str]:
    """Write the three artifacts into ``folder``; returns ``{artifact key: local path}`` as
    ``mlflow.pyfunc.save_model(artifacts=...)`` takes it."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = OmegaConf.load(tracking.artifact_path(run_id, "config.yaml"))
    OmegaConf.save(cfg, folder / ARTIFACTS["config"])
    (folder / ARTIFACTS["fingerprint"]).write_text(json.dumps(spec.fingerprint, indent=2))
    (folder / ARTIFACTS["serving"]).write_text(json.dumps(
        {"run_id": spec.run_id, "threshold": spec.threshold, "locations": spec.locations},
        indent=2))
    return {key: str(folder / name) for key, name in ARTIFACTS.items()}


def artifacts_record(artifacts: dict[str, str]) -> RecordedRun:
    """The record of the run a model was promoted from, as the model's artifacts hold it
    (``context.artifacts``: artifact key -> local path): what ``Engine.from_record`` rebuilds
    the engine from, with the locations the run recorded standing for its tags. Raises
    ``ServingError`` naming the artifact that is missing or does not read."""
    read: dict[str, Any] = {}
    for key in ARTIFACTS:
        path = artifacts.get(key)
        try:
            text = Path(path).read_text(encoding="utf-8") if path else None
            read[key] = text if key == "config" or text is None else json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ServingError(f"the model's {ARTIFACTS[key]} ({path}) does not read: {exc}; "
                               f"promote its run again") from None
        if read[key] is None:
            raise ServingError(f"the model has no {ARTIFACTS[key]}: promote its run again")
    serving = read["serving"]
    try:
        return RecordedRun(serving["run_id"], read["config"], serving["locations"],
                           read["fingerprint"], serving["threshold"])
    except (KeyError, TypeError) as exc:
        raise ServingError(f"the model's {ARTIFACTS['serving']} ({artifacts['serving']}) lacks "
                           f"{exc}: promote its run again") from None


def engine_from_artifacts(artifacts: dict[str, str]) -> Engine:
    """Rebuild the engine from a model's artifacts (``artifacts_record``). Raises
    ``ServingError`` when the data's fingerprint differs from the recorded one (naming both
    hashes) or the data cannot be read."""
    return Engine.from_record(artifacts_record(artifacts))


def recorded_model(name: str = tracking.MODEL_NAME,
                   version: str | None = None) -> tuple[RecordedRun, str]:
    """``(record, version)``: the record (``artifacts_record``) in registered model ``name``'s
    ``version``, else the one its champion alias points to (``model_version``, which raises
    ``ServingError`` when there is none), read from the model's files without loading the
    model: what ``RagexpModel.load_context`` rebuilds the engine from, for the one-question
    commands (``ragexp search``/``ask``); ``mlflow.pyfunc.load_model`` also runs the model's
    code and checks its environment, which ``ragexp serve`` keeps (``load_engine``)."""
    # defer heavy import
    from mlflow.models import Model

    mv = model_version(name, version)
    with tempfile.TemporaryDirectory(prefix="ragexp-model-") as tmp:
        local = Path(mlflow.artifacts.download_artifacts(f"models:/{name}/{mv.version}",
                                                         dst_path=tmp))
        flavor = Model.load(str(local / "MLmodel")).flavors["python_function"]
        record = artifacts_record({key: str(local / a["path"])
                                   for key, a in flavor["artifacts"].items()})
    return record, str(mv.version)


def questions_of(model_input: Any) -> list[str]:
    """The questions in a pyfunc input: a DataFrame with a ``question`` column, a list of
    strings, one string, or ``{"question": str | list}``; each checked and stripped by
    ``inputs.check_question``, the check ``ragexp serve`` applies to ``/answer``. Raises
    ``BadQuestion`` naming the first bad one (``question 2 is null, not a string``), the columns
    of a frame without ``question``, the type of any other input, and an input of no
    questions."""
    if isinstance(model_input, pd.DataFrame):
        cols = list(model_input.columns)
        if "question" in cols:
            raw = model_input["question"].tolist()
        elif cols == [0]:  # a list, as MLflow's schema enforcement frames it
            raw = model_input[0].tolist()
        else:
            raise BadQuestion(f"input has columns {[str(c) for c in cols]}; it needs a column "
                              f"'question'")
    elif isinstance(model_input, dict) and "question" in model_input:
        q = model_input["question"]
        raw = list(q) if isinstance(q, (list, tuple)) else [q]
    elif isinstance(model_input, str):
        raw = [model_input]
    elif isinstance(model_input, (list, tuple)):
        raw = list(model_input)
    else:
        raise BadQuestion(f"input is {json_type(model_input)}; give questions as a list of "
                          f"strings or a DataFrame with a column 'question'")
    if not raw:
        raise BadQuestion("input holds no question; give a list of one or more strings")
    return [check_question(q, f"question {i}") for i, q in enumerate(raw)]


class RefusedInput(MlflowException, RagexpError):
    """A pyfunc input the model refuses, as MLflow reports it: ``mlflow models serve`` answers
    400 (``INVALID_PARAMETER_VALUE``) with ``{"error_code", "message", ...}`` and no
    ``stack_trace``, ``message`` being ragexp's one-line message.

    MLflow's scoring server (3.x, ``scoring_server.invocations``) rewrites the ``message`` of an
    ``MlflowException`` that ``predict`` raises to ``"Failed to predict data '<the input>'.
    Error: <message>"``, echoing the whole input; any other exception becomes a generic message
    with the Python stack trace in ``stack_trace``, and MLflow has no setting that drops it.
    Here the first message set is kept, so ragexp's message comes first and alone."""

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        if not hasattr(self, "_message"):
            self._message = value


def answer_row(ans: Answer) -> dict[str, Any]:
    """One output row: the answer text (the refusal message when refused), whether it refused,
    the chunk ids its kept sentences cite, every source shown (``n``, ``chunk_id``, ``doc_id``,
    ``heading``), and its confidence (the abstain signal)."""
    return {"answer": ans.text, "refused": bool(ans.refused), "citations": ans.cited_chunks,
            "sources": [{"n": s.n, "chunk_id": s.chunk_id, "doc_id": s.doc_id,
                         "heading": s.heading} for s in ans.sources],
            "confidence": float(ans.signal) if math.isfinite(ans.signal) else None}


class RagexpModel(mlflow.pyfunc.PythonModel):
    """Questions in, answers out: one row per question with ``OUTPUT_COLUMNS`` and
    ``trace_id``, the MLflow trace of that answer (null when tracing is off)."""

    engine: Engine | None = None
    _traced = False

    def load_context(self, context) -> None:
        self.engine = engine_from_artifacts(context.artifacts)

    def _trace(self) -> None:
        """On the first prediction, trace as the run's config says (``tracing.settings``: on by
        default, into experiment ``ragexp-serving``); ``ragexp serve`` sets its own tracer on the
        engine instead and never predicts through the model."""
        if not self._traced:
            self._traced = True
            enabled, experiment = tracing.settings(self.engine.cfg)
            self.engine.tracer = tracing.for_engine(self.engine, enabled, experiment)

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        """``model_input``: a DataFrame as MLflow's schema enforcement frames every input (a
        list becomes column ``0``); any shape ``questions_of`` takes otherwise. Raises
        ``RefusedInput`` (HTTP 400 from ``mlflow models serve``) for what ``questions_of``
        refuses."""
        try:
            questions = questions_of(model_input)
        except BadQuestion as exc:
            raise RefusedInput(str(exc)) from None
        self._trace()
        rows = []
        for q in questions:
            row = answer_row(self.engine.answer(q))
            rows.append({**row, "trace_id": self.engine.tracer.last_trace_id()})
        return pd.DataFrame(rows, columns=[*OUTPUT_COLUMNS, "trace_id"])


def signature():
    # defer heavy import
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, Array, ColSpec, Object, Property, Schema

    source = Object([Property("n", "long"), Property("chunk_id", "string"),
                     Property("doc_id", "string"), Property("heading", "string")])
    return ModelSignature(
        # Unnamed (a list, or a DataFrame's 'question') and of any type: a string column
        # would make MLflow turn null and 5 into the questions "None" and "5" before predict
        # sees them; questions_of checks each value instead, as ragexp serve does.
        inputs=Schema([ColSpec(AnyType())]),
        outputs=Schema([ColSpec("string", "answer"), ColSpec("boolean", "refused"),
                        ColSpec(Array("string"), "citations"),
                        ColSpec(Array(source), "sources"),
                        ColSpec("double", "confidence", required=False),
                        ColSpec("string", "trace_id", required=False)]))


def log_model(run) -> "mlflow.entities.LoggedModel":
    """Log the pyfunc model of ``run`` as an MLflow logged model in the run's experiment,
    linked to the run (its source run) without reopening it. Returns the logged model, whose
    ``models:/<model_id>`` URI is the source of a registered version."""
    # defer heavy import
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    spec = spec_of_run(run)
    c = tracking.client()
    logged = c.create_logged_model(
        run.info.experiment_id, name=LOGGED_MODEL_NAME, source_run_id=spec.run_id,
        tags={"ragexp.source_run": spec.run_id, **spec.fingerprint},
        model_type="ragexp-serving")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            artifacts = write_artifacts(spec.run_id, spec, Path(tmp) / "artifacts")
            local = Path(tmp) / "model"
            with warnings.catch_warnings():  # no input example: it would load the engine
                warnings.filterwarnings("ignore", ".*An input example was not provided")
                mlflow.pyfunc.save_model(
                    path=str(local), python_model=str(CODE_PATH), artifacts=artifacts,
                    signature=signature(), pip_requirements=[f"ragexp=={__version__}"],
                    metadata={METADATA_KEY: {"run_id": spec.run_id, **spec.fingerprint}},
                    mlflow_model=Model(artifact_path=logged.artifact_location,
                                       run_id=spec.run_id, model_id=logged.model_id,
                                       model_uuid=logged.model_id))
            c.log_model_artifacts(logged.model_id, str(local))
    except BaseException:
        c.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        raise
    c.log_outputs(spec.run_id, [LoggedModelOutput(logged.model_id, step=0)])
    return c.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)


def model_version(name: str, version: str | None = None):
    """The registered version to serve: ``version``, else the one the alias points to. Raises
    ``ServingError`` when there is none, and when it is not an MLflow model (a version an
    older ragexp registered from a run's artifact folder), saying to promote its run again."""
    c = tracking.client()
    try:
        mv = (c.get_model_version(name, version) if version
              else c.get_model_version_by_alias(name, tracking.ALIAS))
    except Exception as exc:
        what = f"version {version}" if version else f"'{tracking.ALIAS}'"
        raise ServingError(f"no {what} of registered model {name!r} in "
                           f"{tracking.tracking_uri()}: promote a run first (`ragexp promote "
                           f"RUN_ID`) or pass --run RUN_ID") from exc
    uri = f"models:/{name}/{mv.version}"
    try:
        info = mlflow.models.get_model_info(uri)
    except Exception as exc:
        raise ServingError(
            f"version {mv.version} of {name!r} (run {mv.run_id}, source {mv.source}) is not an "
            f"MLflow model: it was registered by an older ragexp from the run's artifact folder "
            f"(no MLmodel file). Promote the run again to register it as a model: `ragexp "
            f"promote {mv.run_id}`") from exc
    if METADATA_KEY not in (info.metadata or {}):
        raise ServingError(f"version {mv.version} of {name!r} ({mv.source}) is not a ragexp "
                           f"serving model (no '{METADATA_KEY}' in its MLmodel metadata)")
    return mv


def mlflow_serve_command(name: str = tracking.MODEL_NAME, port: int | None = None,
                         uri: str | None = None) -> str:
    """The shell command that serves ``name``'s champion with ``mlflow models serve``, pointed
    at the store ragexp uses: ``uri`` if given, else ``MLFLOW_TRACKING_URI`` when set, else
    ragexp's local default (``LOCAL_STORE``, relative to the current folder; MLflow's own
    default is another file)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or LOCAL_STORE
    command = (f"env MLFLOW_TRACKING_URI={shlex.quote(uri)} mlflow models serve -m "
               f"models:/{name}@{tracking.ALIAS} --env-manager local")
    return command + (f" -h 127.0.0.1 -p {port}" if port else "")


def load_engine(name: str = tracking.MODEL_NAME, version: str | None = None) -> Engine:
    """The engine inside a registered ragexp serving model (default: the version the
    ``champion`` alias points to), loaded as MLflow loads it (``mlflow.pyfunc.load_model``),
    so ``ragexp serve`` serves exactly what ``mlflow models serve`` serves."""
    mv = model_version(name, version)  # also points MLflow at ragexp's tracking URI
    model = mlflow.pyfunc.load_model(f"models:/{name}/{mv.version}")
    engine = model.unwrap_python_model().engine
    engine.model_version = str(mv.version)  # what its traces record (tracing.for_engine)
    return engine
