"""Lines a run or a sweep prints for its reader (``say``), who may leave before the end:
``python -m ragexp -m ... | head`` closed the pipe after the first lines, and every later job
failed on ``BrokenPipeError`` as it printed its result line, although its run had finished (a
sweep of 301 jobs counted 301 finished and 299 failed)."""

from __future__ import annotations

import os
import sys


def say(line: str = "") -> None:
    """Print ``line`` to stdout, flushed; once the reader has gone (``BrokenPipeError``),
    stdout goes nowhere (``reader_left``), this line and every later one. The work goes on:
    what it measures is in the store, and ``ragexp compare`` reads it back."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        reader_left()


def reader_left() -> None:
    """Point stdout's file descriptor at ``os.devnull``, after a ``BrokenPipeError``: later
    writes, and the interpreter's flush at exit, then meet no closed pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
