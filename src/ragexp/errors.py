"""One root for every error ragexp reports to its user, so each command catches one class.

Each class also derives from the builtin its callers caught before (``ValueError``,
``FileNotFoundError``, ...), so ``except ValueError`` around ragexp keeps working. Messages say
what was wrong, where (file and line, config key) and what to do instead.
"""

from __future__ import annotations


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
