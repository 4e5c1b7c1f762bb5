"""Files written whole or not at all, with the mode a plain ``open(path, "w")`` gives them.

Each is written to a temporary file beside its target, then moved into place (``os.replace``,
atomic on one filesystem), so a reader never sees half a file. The temporary file is created
with mode 0666, from which the kernel takes the umask as for any new file, and it takes an
existing target's mode: a new file gets ``0666 & ~umask`` (0644 under umask 022), a file that
existed keeps its mode. ``tempfile.mkstemp`` creates 0600 whatever the umask, so a report
written through it was unreadable to anyone else (``-rw-------``, an existing 0644 file too).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

Content = str | bytes | Callable[[BinaryIO], object]


def beside(path: Path) -> Path:
    """A new empty file in ``path``'s folder, ``.NAME.<8 hex>.part``, made as a plain
    ``open(path, "w")`` would leave ``path``: mode ``0666 & ~umask``, or ``path``'s own mode
    when it exists. Raises ``OSError`` when the folder cannot take it."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")


def _fill(tmp: Path, content: Content) -> None:
    with open(tmp, "wb") as fh:
        if callable(content):
            content(fh)
        else:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)


def write_atomic(path: str | Path, content: Content) -> Path:
    """Write ``content`` to ``path`` whole or not at all and return ``path``: text (UTF-8),
    bytes, or a function given the open binary file (``np.save``, ``pickle.dump``). The mode is
    a plain ``open``'s (module docstring). On any error the temporary file is removed and the
    error re-raised; ``path`` is then as it was."""
    return write_all({Path(path): content})[0]


def write_all(contents: dict[Path, Content]) -> list[Path]:
    """Write every ``{path: content}`` (as ``write_atomic``) or none: each to a temporary file
    beside its target, then each moved into place. On any failure the temporaries are removed,
    and so are the targets already moved in that did not exist before (a target that did exist
    keeps the new content: its old one is gone with the rename). Re-raises the error. Returns
    the paths, in order."""
    temps: dict[Path, Path] = {}
    moved: list[Path] = []
    existed = {path: path.exists() for path in contents}
    try:
        for path, content in contents.items():
            temps[path] = beside(path)
            _fill(temps[path], content)
        for path, tmp in temps.items():
            os.replace(tmp, path)
            moved.append(path)
    except BaseException:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        for path in moved:
            if not existed[path]:
                path.unlink(missing_ok=True)
        raise
    return list(contents)
