"""Regenerated README blocks: each lives between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
and is written only by the command that measures it, never by hand."""

from __future__ import annotations

import re
from pathlib import Path


class MissingMarkers(RuntimeError):
    pass


def replace_block(path: str | Path, name: str, content: str) -> None:
    """Replace the ``name`` block of ``path``; raises (writing nothing) when markers are absent."""
    path = Path(path)
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise MissingMarkers(f"{path}: markers {start} ... {end} not found; nothing written")
    path.write_text(pattern.sub(lambda _: f"{start}\n{content}\n{end}", text), encoding="utf-8")
