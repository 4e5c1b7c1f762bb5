"""The output file of ``ragexp questions generate``: JSON Lines, written as it goes.

Each question is appended as one line, flushed and ``fsync``-ed before the next, so Ctrl-C (or
a crash) loses nothing written and leaves at most a partial last line, which the next run drops
with a warning before it appends. A rerun with the same file continues: the questions already
there are read back (their passages are not asked again, their spans and words count for the
duplicate check).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from ragexp.data import readers
from ragexp.errors import InvalidValue

log = logging.getLogger(__name__)


class QuestionFile:
    """The file at ``path``. Raises ``InvalidValue`` at once when it cannot be written (folder
    missing or read-only, a folder of that name) or when it holds lines this command did not
    write (no ``passage`` provenance)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        parent = self.path.parent
        if self.path.is_dir():
            raise InvalidValue(f"--out {self.path} is a folder; give a .jsonl file name")
        if not parent.is_dir():
            raise InvalidValue(f"--out {self.path}: folder {parent} does not exist; create it "
                               f"first")
        try:  # a probe, not the file: nothing is left behind when the run fails later
            tempfile.TemporaryFile(dir=parent).close()
            if self.path.exists():
                open(self.path, "a", encoding="utf-8").close()
        except OSError as exc:
            raise InvalidValue(f"--out {self.path}: cannot write there ({exc.strerror})") from None
        self.records: list[dict] = self._read() if self.path.exists() else []
        self._handle = None

    def _read(self) -> list[dict]:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            log.warning("%s: its last line was cut off (an interrupted run); dropping it",
                        self.path)
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)
            data = data[:cut]
        records = []
        for lineno, line in readers.lines(self.path, readers.decode(data, self.path)):
            rec = readers.parse_json(line, self.path, lineno)
            if not isinstance(rec, dict) or not isinstance(rec.get("passage"), dict):
                raise InvalidValue(f"{self.path}:{lineno}: not a question this command wrote "
                                   f"(no 'passage' provenance); give another --out")
            records.append(rec)
        return records

    def append(self, rec: dict) -> None:
        """Write ``rec`` as one line (keys in the order given), flushed to disk."""
        if self._handle is None:
            self._handle = open(self.path, "a", encoding="utf-8")
        self._handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self.records.append(rec)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
