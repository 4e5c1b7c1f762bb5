"""Files written whole or not at all, where and with the mode a plain ``open(path, "w")`` gives
them; folders made as a plain ``mkdir`` makes them.

Each is written to a temporary file beside its target, then moved into place (``os.replace``,
atomic on one filesystem), so a reader never sees half a file. The temporary file is created
with mode 0666, from which the kernel takes the umask as for any new file, and it takes an
existing target's mode: a new file gets ``0666 & ~umask`` (0644 under umask 022), a file that
existed keeps its mode. ``tempfile.mkstemp`` creates 0600 whatever the umask, so a report
written through it was unreadable to anyone else (``-rw-------``, an existing 0644 file too).

A path that is a symbolic link is written through, as ``open`` writes: the target is the file
the link resolves to (``os.path.realpath``), the temporary file is made beside it and replaces
it, and the link stays a link. A dangling link gets its target created, as ``open`` creates
it (its folder must exist: else ``FileNotFoundError``, as from ``open``). Before, the
temporary file replaced the link itself: a report written to ``latest.html -> runs/7.html``
turned the link into a copy and left ``runs/7.html`` as it was. One difference from ``open``
stays, as in any atomic write: a file with other hard links gets a new inode, and its other
names keep the old content.
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


def new_folder(parent: Path, prefix: str) -> Path:
    """A new empty folder in ``parent``, ``PREFIX<8 hex>``, made as a plain ``mkdir`` makes one:
    mode ``0777 & ~umask`` (0755 under umask 022), as every other folder ragexp makes.
    ``tempfile.mkdtemp`` makes 0700 whatever the umask, so a run's record kept in one (a run
    outside Hydra) was the only folder of ragexp's no one else could read. Raises ``OSError``
    when ``parent`` cannot take it."""
    for _ in range(100):
        folder = Path(parent) / f"{prefix}{secrets.token_hex(4)}"
        try:
            folder.mkdir(0o777)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"no free folder name {prefix}... in {parent}")


def _fill(tmp: Path, content: Content) -> None:
    with open(tmp, "wb") as fh:
        if callable(content):
            content(fh)
        else:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)


def write_atomic(path: str | Path, content: Content) -> Path:
    """Write ``content`` to ``path`` whole or not at all and return ``path``: text (UTF-8),
    bytes, or a function given the open binary file (``np.save``, ``pickle.dump``). The mode is
    a plain ``open``'s, and so is the file written when ``path`` is a symbolic link: the one it
    resolves to (module docstring). On any error the temporary file is removed and the error
    re-raised; ``path`` is then as it was."""
    return write_all({Path(path): content})[0]


def write_all(contents: dict[Path, Content]) -> list[Path]:
    """Write every ``{path: content}`` (as ``write_atomic``) or none: each to a temporary file
    beside its target (the file a symbolic link resolves to: module docstring), then each moved
    into place. On any failure the temporaries are removed, and so are the targets already
    moved in that did not exist before (a target that did exist keeps the new content: its old
    one is gone with the rename). Re-raises the error. Returns the paths, in order."""
    targets = {path: Path(os.path.realpath(path)) for path in contents}
    temps: dict[Path, Path] = {}
    moved: list[Path] = []
    existed = {target: target.exists() for target in targets.values()}
    try:
        for path, content in contents.items():
            temps[path] = beside(targets[path])
            _fill(temps[path], content)
        for path, tmp in temps.items():
            os.replace(tmp, targets[path])
            moved.append(targets[path])
    except BaseException:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        for target in moved:
            if not existed[target]:
                target.unlink(missing_ok=True)
        raise
    return list(contents)
