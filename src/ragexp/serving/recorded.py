"""What a run recorded that serving needs, read from the MLflow store: its config, tags, data
fingerprint and refusal threshold, as a small picklable record.

Kept apart from the engine, with no import heavier than the store's: ``ragexp search --run`` and
``ragexp ask --run`` read the record in a forked child (``run.forked``) while the command
imports what building the engine needs (issue #21: the two ran one after the other).
"""

from __future__ import annotations

from dataclasses import dataclass

from ragexp.errors import RagexpError
from ragexp.tracking import store as tracking

FINGERPRINT_TAGS = ("corpus_hash", "golden_hash")


class ServingError(RagexpError, RuntimeError):
    """A run or model that cannot be served: no champion, changed data, an old record."""


@dataclass(frozen=True)
class RecordedRun:
    """A finished evaluation run, as serving rebuilds it: ``config`` is the text of its
    ``config.yaml``, ``threshold`` its ``abstain.threshold`` metric (None without one)."""

    run_id: str
    config: str
    tags: dict[str, str]
    fingerprint: dict[str, str]
    threshold: float | None


def recorded_fingerprint(run) -> dict[str, str]:
    """The data hashes (``FINGERPRINT_TAGS``) an MLflow run recorded. Raises ``ServingError``
    when it recorded none: it did not finish, or is not a ragexp evaluation run."""
    tags = run.data.tags
    fingerprint = {k: tags[k] for k in FINGERPRINT_TAGS if k in tags}
    if not fingerprint:
        raise ServingError(f"run {run.info.run_id} recorded no data fingerprint ("
                           f"{', '.join(FINGERPRINT_TAGS)}): it did not finish, or is not a "
                           f"ragexp evaluation run")
    return fingerprint


def recorded_run(ref: str) -> RecordedRun:
    """The record of run ``ref`` (full id or unique prefix). Raises
    ``tracking.SweepParentRun`` for a sweep's parent run, ``ServingError`` for an unknown id
    or a run that cannot be served (deleted, unfinished, no ``config.yaml``, no
    fingerprint)."""
    c = tracking.client()
    try:
        run_id = tracking.resolve_run_id(ref)
        run = c.get_run(run_id)
    except tracking.RunNotFound as exc:
        raise ServingError(str(exc)) from None
    except Exception as exc:
        raise ServingError(f"no run {ref!r} in {tracking.tracking_uri()}") from exc
    try:
        tracking.refuse_unusable(run)
    except tracking.SweepParentRun:
        raise
    except tracking.UnusableRun as exc:
        raise ServingError(str(exc)) from None
    try:
        with open(tracking.artifact_path(run_id, "config.yaml"), encoding="utf-8") as f:
            config = f.read()
    except tracking.RunNotFound as exc:
        raise ServingError(str(exc)) from None
    return RecordedRun(run_id, config, dict(run.data.tags), recorded_fingerprint(run),
                       run.data.metrics.get("abstain.threshold"))
