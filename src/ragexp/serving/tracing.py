"""MLflow Tracing of served requests: one trace per ``/answer`` and ``/search``.

Each trace has a root span (``ragexp.answer.base`` or ``ragexp.search``, input: the question) and one
child span per stage, named as the stages are: ``retrieve``, ``rerank``, ``abstain``, ``answer``.
Their attributes (all prefixed ``ragexp.``):

- every span: ``latency_ms`` (wall time of the stage);
- root: ``run_id``, ``model_version`` (of ``ragexp-serving`` registered from that run; "" when it
  is not registered), ``request``; the trace is tagged the same way and linked to the run
  (``mlflow.sourceRun``), so the run's page in the MLflow UI lists its traces;
- ``retrieve`` / ``rerank``: ``chunk_ids`` and ``scores`` (best first, at most ``TOP_RECORDED``),
  ``depth`` (items ranked), the stage's class;
- ``abstain``: ``confidence`` (the run's abstain signal), ``threshold`` (the refusal threshold
  in force), ``below_threshold``;
- ``answer``: ``refused``, ``refusal_reason``, ``citations_kept`` (chunk ids cited by the kept
  sentences), ``citations_dropped`` (sentences the citation checker dropped) and
  ``dropped_why``, ``sources`` (chunk ids shown as ``[1]..[n]``).

Cost: while serving, a request only times its stages and keeps their attributes in a list
(microseconds); the root span is opened when the request ends (its trace id goes back in the
response) and the spans are written by one background thread, through MLflow's own
asynchronous export. ``make bench`` measures the difference side by side (``bench_traces.py``).
A tracing failure is logged once and never fails a request (its ``trace_id`` is then null).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from ragexp.errors import InvalidValue, RagexpError
from ragexp.tracking import store as tracking

log = logging.getLogger(__name__)
EXPERIMENT = "ragexp-serving"
TOP_RECORDED = 20
FEEDBACK_NAME = "ragexp.user_wrong"
WRONG_TAG = "ragexp.marked_wrong"
TRACE_ID = re.compile(r"tr-[0-9a-f]{32}")
MAX_COMMENT = 2000
SPAN_TYPES = {"retrieve": "RETRIEVER", "rerank": "RERANKER", "abstain": "PARSER",
              "answer": "CHAIN"}


class UnknownTrace(RagexpError, KeyError):
    """No trace with this id in the tracking store."""


@dataclass
class Stage:
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


@dataclass
class Request:
    """What one served request recorded: its stages in order, the root's attributes and output.
    Filled by the engine whether or not tracing is on (it costs a few dict writes)."""

    kind: str
    question: str
    start_ns: int = field(default_factory=time.time_ns)
    stages: list[Stage] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    trace_id: str | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        """Time the block as stage ``name``; the yielded dict takes the stage's attributes."""
        attrs: dict[str, Any] = {}
        start = time.time_ns()
        try:
            yield attrs
        finally:
            end = time.time_ns()
            attrs["ragexp.latency_ms"] = (end - start) / 1e6
            self.stages.append(Stage(name, start, end, attrs))


def ranking_attributes(scores: dict[str, float], stage: object) -> dict[str, Any]:
    """``chunk_ids`` and ``scores`` best first (at most ``TOP_RECORDED``), depth, stage class."""
    best = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_RECORDED]
    return {"ragexp.chunk_ids": [c for c, _ in best], "ragexp.scores": [float(s) for _, s in best],
            "ragexp.depth": len(scores), "ragexp.stage": type(stage).__name__}


def answer_attributes(ans) -> dict[str, Any]:
    """The ``answer`` span's attributes from an ``answer.Answer``."""
    return {"ragexp.refused": bool(ans.refused), "ragexp.refusal_reason": ans.reason,
            "ragexp.citations_kept": list(ans.cited_chunks),
            "ragexp.citations_dropped": int(ans.dropped),
            "ragexp.dropped_why": list(ans.dropped_why),
            "ragexp.sources": [s.chunk_id for s in ans.sources]}


class Tracer:
    """Writes each finished ``Request`` as an MLflow trace into ``experiment`` (``enabled``), or
    does nothing. ``last_trace_id()`` is the trace id of this thread's last request."""

    def __init__(self, enabled: bool = False, experiment: str = EXPERIMENT,
                 run_id: str = "local", model_version: str = "", background: bool = True):
        self.enabled, self.experiment = enabled, experiment
        self.run_id, self.model_version = run_id, model_version
        self._local = threading.local()
        self._experiment_id: str | None = None
        self._queue: queue.Queue | None = None
        self._warned = False
        if enabled:

            self._experiment_id = tracking.ensure_experiment(experiment)
            if background:
                self._queue = queue.Queue(maxsize=10_000)
                threading.Thread(target=self._drain, name="ragexp-traces", daemon=True).start()

    @contextmanager
    def request(self, kind: str, question: str) -> Iterator[Request]:
        """Record one request; on leaving the block, open its trace (if enabled) and queue its
        spans. The trace id is on ``Request.trace_id`` and ``last_trace_id()``."""
        req = Request(kind, question)
        self._local.last = None
        failed: BaseException | None = None
        try:
            yield req
        except BaseException as exc:
            failed = exc
            raise
        finally:
            if self.enabled:
                if failed is not None:
                    req.attributes["ragexp.error"] = f"{type(failed).__name__}: {failed}"[:500]
                self._local.last = req.trace_id = self._open(req)

    def last_trace_id(self) -> str | None:
        return getattr(self._local, "last", None)

    def _open(self, req: Request) -> str | None:
        # defer heavy import
        import mlflow

        end = time.time_ns()
        try:
            root = mlflow.start_span_no_context(
                f"ragexp.{req.kind}", span_type="CHAIN", inputs={"question": req.question},
                experiment_id=self._experiment_id, start_time_ns=req.start_ns,
                tags={"ragexp.run_id": self.run_id, "ragexp.model_version": self.model_version,
                      "ragexp.request": req.kind},
                metadata={"mlflow.sourceRun": self.run_id} if self.run_id != "local" else None)
        except Exception as exc:  # a tracing failure never fails a request
            self._warn(exc)
            return None
        if self._queue is None:
            self._write(root, req, end)
        else:
            try:
                self._queue.put_nowait((root, req, end))
            except queue.Full:
                self._warn(RuntimeError("trace queue full: dropping this request's spans"))
        return root.trace_id

    def _write(self, root, req: Request, end_ns: int) -> None:
        # defer heavy import
        import mlflow

        try:
            root.set_attributes({"ragexp.run_id": self.run_id,
                                 "ragexp.model_version": self.model_version,
                                 "ragexp.request": req.kind,
                                 "ragexp.latency_ms": (end_ns - req.start_ns) / 1e6,
                                 **req.attributes})
            for st in req.stages:
                span = mlflow.start_span_no_context(
                    st.name, span_type=SPAN_TYPES.get(st.name, "UNKNOWN"), parent_span=root,
                    attributes=st.attributes, start_time_ns=st.start_ns)
                span.end(end_time_ns=st.end_ns)
            root.end(outputs=req.outputs, end_time_ns=end_ns)
        except Exception as exc:
            self._warn(exc)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self._write(*item)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every queued trace is in the store."""
        if not self.enabled:
            return
        # defer heavy import
        import mlflow

        if self._queue is not None:
            self._queue.join()
        mlflow.flush_trace_async_logging()

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            log.warning("tracing failed, requests go on untraced: %s", exc)
            self._warned = True


OFF = Tracer(enabled=False)


def model_version_of(run_id: str, name: str | None = None) -> str:
    """The version of registered model ``name`` (default ``ragexp-serving``) made from
    ``run_id``: the champion's if it is one of them, else the newest; "" if none."""

    name = name or tracking.MODEL_NAME
    try:
        c = tracking.client()
        versions = c.search_model_versions(f"name='{name}' and run_id='{run_id}'")
        if not versions:
            return ""
        try:
            champion = c.get_model_version_by_alias(name, tracking.ALIAS).version
        except Exception:
            champion = None
        ids = [str(v.version) for v in versions]
        return str(champion) if str(champion) in ids else max(ids, key=int)
    except Exception as exc:
        log.warning("cannot read the model version of run %s: %s", run_id, exc)
        return ""


def for_engine(engine, enabled: bool, experiment: str = EXPERIMENT) -> Tracer:
    """A tracer for a serving ``Engine`` (its run id, and the model version registered from
    that run), enabled or not."""
    if not enabled:
        return OFF
    version = getattr(engine, "model_version", None) or model_version_of(engine.run_id)
    return Tracer(True, experiment, engine.run_id, str(version))


def settings(cfg) -> tuple[bool, str]:
    """``(enabled, experiment)`` from a run config's ``traces`` node (absent: on, into
    ``ragexp-serving``)."""
    node = cfg.get("traces") if cfg is not None else None
    if node is None:
        return True, EXPERIMENT
    return bool(node.get("enabled", True)), str(node.get("experiment", EXPERIMENT))


def record_feedback(trace_id: str, wrong: bool = True, comment: str = "",
                    source: str = "ragexp-serve") -> None:
    """Record a user's verdict on a served trace: an MLflow feedback assessment
    ``ragexp.user_wrong`` (value ``wrong``, rationale ``comment``, source HUMAN) and the trace
    tag ``ragexp.marked_wrong``. Raises ``UnknownTrace`` if no such trace is in the store and
    ``ValueError`` for a comment over ``MAX_COMMENT`` characters."""
    # defer heavy import
    import mlflow
    from mlflow.entities import AssessmentSource


    tracking.client()  # the store's URI set for the fluent API
    if len(comment) > MAX_COMMENT:
        raise InvalidValue(f"comment is {len(comment)} characters; the limit is {MAX_COMMENT}")
    if not isinstance(trace_id, str) or not TRACE_ID.fullmatch(trace_id):
        raise UnknownTrace(trace_id)
    try:
        found = mlflow.get_trace(trace_id, silent=True, flush=True)
    except Exception:
        found = None
    if found is None:
        raise UnknownTrace(trace_id)
    mlflow.log_feedback(trace_id=trace_id, name=FEEDBACK_NAME, value=bool(wrong),
                        rationale=comment or None,
                        source=AssessmentSource(source_type="HUMAN", source_id=source))
    mlflow.set_trace_tag(trace_id, WRONG_TAG, "true" if wrong else "false")
