"""What ships with ragexp beside its code: the config groups (``conf/``) and the example
handbook (``corpus/``, its golden set ``golden/``), so an installed ragexp composes its configs
and runs the example from any folder.

One copy of each lives at the repository root. The wheel carries them inside the package
(``ragexp/shipped/conf``, ``.../corpus``, ``.../golden``: the package-dir mapping in
``pyproject.toml``; not ``ragexp/golden``, which would shadow the old module path
``ragexp.golden``); an editable install reads them from the checkout's root.
"""

from __future__ import annotations

from pathlib import Path

from ragexp.errors import InvalidValue, MissingInput

PACKAGE = Path(__file__).resolve().parents[1]  # .../ragexp
FOLDERS = ("conf", "corpus", "golden")
EXAMPLES = {"handbook/corpus": "corpus", "handbook/golden": "golden"}
# Where an older ragexp installed the handbook, inside the package, before it moved to corpus/
# and golden/: runs recorded then name these paths.
OLD_EXAMPLES = {f"ragexp/examples/{example}": example for example in EXAMPLES}


def folder(name: str) -> Path:
    """The shipped folder ``name`` (one of ``FOLDERS``): inside the installed package, else at
    the root of the source checkout. Raises ``FileNotFoundError`` naming both places."""
    if name not in FOLDERS:
        raise InvalidValue(f"no shipped folder {name!r} (shipped: {', '.join(FOLDERS)})")
    for candidate in (PACKAGE / "shipped" / name, PACKAGE.parents[1] / name):
        if candidate.is_dir():
            return candidate
    raise MissingInput(f"ragexp's shipped {name}/ is neither in {PACKAGE / 'shipped'} nor in "
                       f"{PACKAGE.parents[1]}: reinstall ragexp")


def conf_dir() -> str:
    """Absolute path of the config groups (Hydra's ``config_path``)."""
    return str(folder("conf"))


def path(relative: str) -> str:
    """Absolute path of a shipped example file or folder: ``"handbook/corpus"``,
    ``"handbook/golden"`` or anything below them (``"handbook/golden/judge/labels.jsonl"``).

    Raises ``FileNotFoundError`` naming the examples that do exist when ``relative`` is not one.
    """
    for prefix, name in EXAMPLES.items():
        if relative == prefix or relative.startswith(prefix + "/"):
            base = folder(name)
            target = (base / relative[len(prefix):].lstrip("/")).resolve()
            if target.exists() and (target == base or base in target.parents):
                return str(target)
    raise MissingInput(f"no shipped example {relative!r} (examples: "
                       f"{', '.join(EXAMPLES)})")


def relocated(recorded: str) -> str:
    """Today's place of a location a run recorded: a path into the handbook as an older ragexp
    shipped it (``.../ragexp/examples/handbook/corpus[/...]``), once that path is gone, becomes
    the same file or folder of the handbook shipped today; any other path is returned
    unchanged. Whether the run may be served from it is still decided by the data's recorded
    fingerprint (``serving.engine.check_fingerprint``)."""
    posix = Path(recorded).as_posix()
    for old, example in OLD_EXAMPLES.items():
        at = posix.find(old)
        rest = posix[at + len(old):] if at >= 0 else None
        if rest is not None and rest[:1] in ("", "/") and not Path(recorded).exists():
            return path(example + rest)
    return recorded
