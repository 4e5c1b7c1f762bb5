"""Identical log lines of one run said once, with a count.

A message logged again word for word (the same logger, level and text) is held back while the
run lasts; when it ends, each held message is logged once more as ``MESSAGE (logged N times in
this run)``.

A run ranks every question in one batch and then each of a sample alone (the latency
measurement), and an LLM answers or judges question by question: a message from inside those
loops would otherwise print once per question. The filter sits on the root logger's handlers
(Hydra's console and ``app.log``), so it sees every ragexp, Hydra and library record once,
whichever handler writes it; a record's verdict is stamped on it, so two handlers count it once.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

SEEN_ATTR = "ragexp_repeat_shown"  # stamped on a record: the filter's verdict for every handler


class RepeatFilter(logging.Filter):
    """Lets the first record of each ``(logger, level, message)`` through and counts the rest
    (``counts``: key -> times logged, first included)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        shown = getattr(record, SEEN_ATTR, None)
        if shown is None:
            key = (record.name, record.levelno, record.getMessage())
            self.counts[key] = self.counts.get(key, 0) + 1
            shown = self.counts[key] == 1
            setattr(record, SEEN_ATTR, shown)
        return shown

    def repeated(self) -> list[tuple[str, int, str, int]]:
        """``(logger, level, message, times)`` for each message logged more than once, in the
        order first logged."""
        return [(*key, n) for key, n in self.counts.items() if n > 1]


@contextmanager
def collapsed(logger: logging.Logger | None = None) -> Iterator[RepeatFilter]:
    """While the block runs, repeats of a message are held back on every handler of
    ``logger`` (default: the root logger); on exit each repeated message is logged once more
    with its count (``MESSAGE (logged N times in this run)``), then the filter is removed."""
    target = logger or logging.getLogger()
    handlers = list(target.handlers)
    repeats = RepeatFilter()
    for h in handlers:
        h.addFilter(repeats)
    try:
        yield repeats
    finally:
        for h in handlers:
            h.removeFilter(repeats)
        for name, level, message, n in repeats.repeated():
            logging.getLogger(name).log(level, "%s (logged %d times in this run)", message, n)
