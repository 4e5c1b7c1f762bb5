"""Regenerated blocks of the markdown pages (``docs/*.md``): each lives between
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` and is written only by the command that
measures it, never by hand. The commands' ``--readme PAGE`` takes any markdown file."""

from __future__ import annotations

import re
import sys
from pathlib import Path


class MissingMarkers(RuntimeError):
    pass


def _pattern(name: str) -> tuple[re.Pattern, str, str]:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return re.compile(re.escape(start) + r".*?" + re.escape(end), re.S), start, end


def check_block(path: str | Path, name: str) -> None:
    """Raise :class:`MissingMarkers` unless ``path`` has the ``name`` block (check before
    measuring, so a missing block costs no measurement time)."""
    pattern, start, end = _pattern(name)
    path = Path(path)
    if not path.is_file():
        raise MissingMarkers(f"{path}: file not found; nothing written")
    if not pattern.search(path.read_text(encoding="utf-8")):
        raise MissingMarkers(f"{path}: markers {start} ... {end} not found; nothing written")


def has_block(path: str | Path | None, name: str) -> bool:
    """For a command's ``--readme``: True when ``path`` is None or has the ``name`` block; else
    prints why to stderr and returns False (the command then exits 2 before measuring)."""
    if path is None:
        return True
    try:
        check_block(path, name)
    except MissingMarkers as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    return True


def replace_block(path: str | Path, name: str, content: str) -> None:
    """Replace the ``name`` block of ``path``; raises (writing nothing) when markers are absent."""
    check_block(path, name)
    pattern, start, end = _pattern(name)
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    path.write_text(pattern.sub(lambda _: f"{start}\n{content}\n{end}", text), encoding="utf-8")
