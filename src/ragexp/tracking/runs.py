"""One owner of a run's life: ``tracked_run`` creates the run, tags its process, writes every
result to the run's record on disk (``outbox``) before the store, and ends the run in the state
that describes what happened (FINISHED, FAILED or KILLED), whatever stopped it.
"""

from __future__ import annotations

import logging
import signal
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ragexp.tracking import failures, lifecycle, store
from ragexp.tracking.outbox import Outbox

log = logging.getLogger(__name__)


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
            store.log_batch(self.run_id, metrics=metrics, tags=tags)
            store.client().log_artifacts(self.run_id, str(self.outbox.artifacts))
        except Exception as exc:
            raise store.TrackingError(
                f"could not record run {self.run_id} in {store.tracking_uri()}: "
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
                c = store.client()  # its first call takes store.store_lock itself: not reentrant
                with store.store_lock():
                    c.log_inputs(self.run_id, inputs)
                return
            except Exception as exc:
                if attempt < 3 and _unique_clash(exc):
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise store.TrackingError(
                    f"could not record the inputs of run {self.run_id} in "
                    f"{store.tracking_uri()}: {' '.join(str(exc).split())[:300]}") from exc


def _unique_clash(exc: BaseException) -> bool:
    """Whether a store error is a unique-key violation (sqlite, PostgreSQL, MySQL wording)."""
    text = str(exc).lower()
    return any(s in text for s in ("unique constraint", "duplicate key", "duplicate entry",
                                   "integrityerror"))


def _end(run_id: str, status: str, error: str = "", trace: str = "") -> None:
    """End a run with an end time; ``error``/``trace`` become the tag and ``error.txt``."""
    c = store.client()
    if error:
        c.set_tag(run_id, "ragexp.error", error[:5000])
    if trace:
        c.log_text(run_id, trace, "error.txt")
    c.set_terminated(run_id, status)


def _record_failure(run_id: str, box: Outbox, exc: BaseException, output_dir: str | None,
                    overrides: str) -> None:
    """End ``run_id`` ``KILLED`` (a stop signal) or ``FAILED`` (anything else: ``ragexp.error``
    tag, the traceback as ``error.txt`` in the store and in the record ``box``); its status file
    says ``PENDING_SYNC`` instead when its results are only on disk. Called while ``exc`` is
    being handled; a store that cannot mark the run is logged, never raised."""
    status = "KILLED" if lifecycle.interruption(exc) else "FAILED"
    sig = lifecycle.signal_received() or getattr(exc, "signum", signal.SIGINT)
    error = (store.error_summary(exc) if status == "FAILED"
             else f"stopped by {signal.Signals(sig).name}")
    trace = traceback.format_exc()
    (box.root / "error.txt").write_text(trace)
    try:  # failures.report names the run's error.txt only when there is one
        setattr(exc, failures.FAILED_RUN, run_id)
    except AttributeError:  # an exception type without a __dict__
        pass
    try:
        _end(run_id, status, error, trace)
    except Exception as end_exc:  # the store may be why we are here
        log.error("could not mark run %s %s: %s", run_id, status, end_exc)
    pending = box.read().get("state") == "pending"
    store.write_status(output_dir, status="PENDING_SYNC" if pending else status,
                       run_id=run_id, overrides=overrides, error=error[:500], record=str(box.root))
    lifecycle.closed(run_id, status)


@contextmanager
def tracked_run(experiment_id: str, *, run_name: str | None, tags: dict[str, str],
                params: dict[str, Any], output_dir: str | None = None,
                overrides: str = "") -> Iterator[TrackedRun]:
    """Create a run (params, tags, owning process), yield it, end it.

    Ends ``FINISHED`` when the block completes, ``KILLED`` on SIGTERM/SIGINT (``lifecycle``),
    ``FAILED`` on any other exception (``ragexp.error`` tag, ``error.txt``); the exception
    propagates. A stop signal raised where Python could only print it (in a weakref callback:
    "Exception ignored in ...") is still recorded (``lifecycle.signal_received``): the run is
    not created, or ends ``KILLED``, all the same. The job's status file follows each step (``RUNNING`` -> final status, or
    ``PENDING_SYNC`` when the results are only on disk). Raises ``TrackingError`` when the
    store cannot create the run."""
    lifecycle.install_signal_handlers()
    lifecycle.reraise_if_stopped()  # a stop raised where Python could only print it
    c = store.client()
    try:
        run = c.create_run(experiment_id, run_name=run_name,
                           tags={**tags, **lifecycle.process_tags()})
        run_id = run.info.run_id
        store.remember_artifact_root(run)
        store.log_batch(run_id, params=params)
    except Exception as exc:
        raise store.TrackingError(f"could not create a run in {store.tracking_uri()}: "
                                  f"{' '.join(str(exc).split())[:500]}") from exc
    box = Outbox.create(output_dir)
    box.update(run_id=run_id, run_name=run_name, experiment_id=experiment_id,
               experiment=c.get_experiment(experiment_id).name,
               tracking_uri=store.tracking_uri(),
               params=params, tags=tags, state="open")
    lifecycle.opened(run_id, lambda status, reason: _end(run_id, status, reason))
    store.write_status(output_dir, status="RUNNING", run_id=run_id, overrides=overrides)
    try:
        yield TrackedRun(run_id, box)
        lifecycle.reraise_if_stopped()
    except BaseException as exc:
        with lifecycle.signals_deferred():
            _record_failure(run_id, box, exc, output_dir, overrides)
        raise
    with lifecycle.signals_deferred():
        try:
            _end(run_id, "FINISHED")
        except Exception as exc:
            raise store.TrackingError(f"run {run_id} is logged but could not be ended in "
                                      f"{store.tracking_uri()}: {exc}") from exc
        finally:
            lifecycle.closed(run_id)
        store.write_status(output_dir, status="FINISHED", run_id=run_id, overrides=overrides)
