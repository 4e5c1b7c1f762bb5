"""One root for every error ragexp reports to its user, so each command catches one class.

Each class also derives from the builtin its callers caught before (``ValueError``,
``FileNotFoundError``, ...), so ``except ValueError`` around ragexp keeps working. Messages say
what was wrong, where (file and line, config key) and what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class RagexpError(Exception):
    """Root of ragexp's user-facing errors: a message a person can act on, no traceback."""


class InvalidValue(RagexpError, ValueError):
    """A value ragexp was given (a config key, an argument, a field of an input file) that it
    cannot use; the message names the value and the valid ones."""


class MissingInput(RagexpError, FileNotFoundError):
    """A file or folder ragexp was pointed at (or ships) that is not there."""


class NotFound(RagexpError, LookupError):
    """A named thing that does not exist in the store or a file: a run, an experiment, a
    candidate question."""


class WouldOverwrite(RagexpError, FileExistsError):
    """Writing would replace a file the user has; nothing was written."""


PATH_KINDS = {"dir": "folder", "file": "file", "any": "file or folder"}


def path_problem(path: str | Path, kind: str) -> str | None:
    """What keeps ``path`` from being the ``kind`` of input asked for (``"dir"``, ``"file"``,
    ``"any"``: ``PATH_KINDS``), as a message's tail: ``"no such folder"``, ``"a file, not a
    folder"``, ``"a folder, not a file"``; None when it is one. ``~`` is expanded. One wording
    for every path ragexp is given (config keys, ``--config-dir``): "no such folder" for a
    file that exists sent its user looking for a typo."""
    p = Path(path).expanduser()
    if not p.exists():
        return f"no such {PATH_KINDS[kind]}"
    if kind == "dir" and not p.is_dir():
        return "a file, not a folder"
    if kind == "file" and not p.is_file():
        return "a folder, not a file"
    return None


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in agreement: ``counted(1, "document")`` -> ``"1 document"``,
    ``counted(3, "document")`` -> ``"3 documents"`` (``plural`` where adding ``s`` is wrong).
    A one-document corpus read "1 documents, 1 questions"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def listed(items: Iterable[object], limit: int, sep: str = ", ") -> str:
    """At most ``limit`` of ``items`` (as ``str``) joined by ``sep``, then ``"... and N more"``
    when some were left out: ``listed("abcdef", 3)`` -> ``"a, b, c, ... and 3 more"``. A message
    that showed the first few alone read as the whole list (a document's first 8 headings as
    all its headings)."""
    items = [str(i) for i in items]
    left = len(items) - limit
    return sep.join(items[:limit]) + (f"{sep}... and {left} more" if left > 0 else "")
