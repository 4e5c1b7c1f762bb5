"""Example data shipped inside the package, so an installed ragexp runs anywhere.

``handbook``: the Brindle handbook (22 markdown documents, ``corpus/``) and its labelled golden
set (``golden/*.jsonl``), the default dataset and what ``ragexp init --example`` copies.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def path(relative: str) -> str:
    """Absolute path of a shipped example file or folder (``"handbook/corpus"``).

    Raises ``FileNotFoundError`` naming the examples that do exist when ``relative`` is not one.
    """
    target = (ROOT / relative).resolve()
    if not target.exists() or ROOT not in target.parents:
        known = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_"))
        raise FileNotFoundError(f"no shipped example {relative!r} (examples: {', '.join(known)})")
    return str(target)
