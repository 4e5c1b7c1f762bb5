"""A job's results on disk before they go to MLflow, so a store that is down loses nothing.

Each run keeps ``<job output folder>/mlflow_record/``: ``record.json`` (run id, experiment,
tracking URI, params, tags, metrics, state) and ``artifacts/`` (the files logged as the run's
artifacts). The record is written before anything is sent; ``state`` says how far it got:
``open`` (run created, computing), ``pending`` (results on disk, not yet in the store),
``logged`` (in the store). ``sync`` sends every ``pending`` record under some folders to the
store it was meant for (the run's own id when the store still has it, else a new run with the
same params and tags) and ends that run ``FINISHED``.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ragexp.data import files
from ragexp.tracking import store as tracking

log = logging.getLogger(__name__)

RECORD_DIR = "mlflow_record"
RECORD_FILE = "record.json"


@dataclass(frozen=True)
class Outbox:
    """``root``: the ``mlflow_record`` folder of one run."""

    root: Path

    @classmethod
    def create(cls, output_dir: str | Path | None) -> "Outbox":
        """In the job's output folder; outside Hydra (no folder) in a new one in the temporary
        folder, ``ragexp-run-<8 hex>``, with a plain ``mkdir``'s mode (``files.new_folder``)."""
        base = Path(output_dir) if output_dir is not None else files.new_folder(
            Path(tempfile.gettempdir()), "ragexp-run-")
        (base / RECORD_DIR / "artifacts").mkdir(parents=True, exist_ok=True)
        return cls(base / RECORD_DIR)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def read(self) -> dict[str, Any]:
        path = self.root / RECORD_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into ``record.json`` (dict fields merged one level), atomically."""
        record = self.read()
        for key, value in fields.items():
            if isinstance(value, dict) and isinstance(record.get(key), dict):
                record[key] = {**record[key], **value}
            else:
                record[key] = value
        files.write_atomic(self.root / RECORD_FILE, json.dumps(record, indent=1, default=str))


def pending(roots: Iterable[str | Path]) -> list[Outbox]:
    """Every record under ``roots`` whose results have not reached the store."""
    found = []
    for root in roots:
        for path in sorted(Path(root).rglob(f"{RECORD_DIR}/{RECORD_FILE}")):
            box = Outbox(path.parent)
            if box.read().get("state") == "pending":
                found.append(box)
    return found


def deliver(box: Outbox) -> str:
    """Log one pending record to the store named by ``MLFLOW_TRACKING_URI``/the default store
    and end its run ``FINISHED``; returns the run id (a new one when the store lost the run)."""

    rec = box.read()
    c = tracking.client()
    run_id, tags = rec["run_id"], dict(rec.get("tags", {}))
    if not _exists(c, run_id):  # another or a reset store: recreate the run
        if not _exists(c, tags.get("mlflow.parentRunId")):
            tags.pop("mlflow.parentRunId", None)
        exp_id = tracking.ensure_experiment(rec["experiment"])
        run_id = c.create_run(exp_id, run_name=rec.get("run_name"), tags=tags).info.run_id
        log.warning("run %s is not in %s: logged as new run %s", rec["run_id"],
                    tracking.tracking_uri(), run_id)
    tracking.log_batch(run_id, metrics=rec.get("metrics"), params=rec.get("params"),
                       tags={**tags, "ragexp.synced_from": str(box.root)})
    c.log_artifacts(run_id, str(box.artifacts))
    try:
        c.delete_tag(run_id, "ragexp.error")  # e.g. set by a clean-up before this sync
    except Exception:
        pass
    c.set_terminated(run_id, "FINISHED")
    box.update(state="logged", run_id=run_id)
    status = box.root.parent / tracking.STATUS_FILE
    if status.exists():
        status.write_text(json.dumps({**json.loads(status.read_text()), "status": "FINISHED",
                                      "run_id": run_id, "synced": True}, indent=2))
    return run_id


def _exists(client, run_id: str | None) -> bool:
    if not run_id:
        return False
    try:
        client.get_run(run_id)
        return True
    except Exception:
        return False


def sync(roots: Iterable[str | Path], tracking_uri: str) -> list[tuple[Outbox, str]]:
    """Deliver the pending records under ``roots`` that were meant for ``tracking_uri``.
    Returns ``(record, run id)`` for each delivered; records for other stores are skipped."""
    done = []
    for box in pending(roots):
        if box.read().get("tracking_uri") != tracking_uri:
            continue
        done.append((box, deliver(box)))
    return done
