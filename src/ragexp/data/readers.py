"""Reading a user's input files as text, with one rule for every reader.

Every reader of user data (markdown corpus, golden set, BEIR corpus/queries/qrels, the
per-question tables ``compare`` reads back) takes its text from here, so they all accept what the
field's loaders accept and refuse the same things the same way:

- text is UTF-8; a leading UTF-8 byte-order mark is dropped (Windows editors write one);
- any line ending (``\\n``, ``\\r\\n``, ``\\r``) ends a line, as in Python's universal newlines;
  JSON Lines are split on those only, never on U+2028 or U+0085, which JSON allows inside strings;
- bytes that are not UTF-8, UTF-16/32 text and binary files (a NUL byte) are refused with an
  :class:`InputError` naming the file, the line and the byte offset; the bytes themselves are
  never pasted into the message, and echoed values go through :func:`shown` (escaped, capped).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Iterator

from ragexp.errors import RagexpError

SHOWN_CHARS = 60
_SURROGATE = re.compile("[\ud800-\udfff]")
_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


class DataError(RagexpError, ValueError):
    """A user's data that cannot be used as given. The message says what and where in full, so
    command lines print it without a traceback."""


class InputError(DataError):
    """An input file that cannot be read as meant. ``str()`` is ``file:line: message`` (or
    ``file: message`` when no line applies); ``file``, ``line`` and ``message`` are kept."""

    def __init__(self, file: str | Path, line: int | None, message: str):
        self.file, self.line, self.message = str(file), line, message
        where = f"{file}:{line}" if line else str(file)
        super().__init__(f"{where}: {message}")


# The file extensions of text/markdown (RFC 7763); a name's case does not make it another kind
# of file (``.MD`` from Windows tools, ``.markdown`` from Jekyll were skipped, their questions
# then refused).
MARKDOWN_SUFFIXES = (".md", ".markdown")


def is_markdown(path: Path) -> bool:
    """Whether ``path``'s name ends in a markdown suffix (``MARKDOWN_SUFFIXES``, any case)."""
    return path.suffix.lower() in MARKDOWN_SUFFIXES


def markdown_tree(root: Path) -> tuple[list[Path], list[Path]]:
    """``(documents, hidden)``: the markdown files under ``root`` (``is_markdown``,
    recursively), each list sorted by path, from one walk of the folder; a folder named like one
    is not a file. A file or folder whose name starts with ``.`` below ``root`` is hidden, not
    a document (``.git/``, ``.github/ISSUE_TEMPLATE.md`` were indexed as documents), as
    static-site tools leave it. A symbolic link to a folder is followed, under its own name,
    unless its target is inside ``root`` or a folder linked before (in name order), or holds
    one (a loop, a second link to one folder, a link to an ancestor): that would read files
    twice under two ids. Both empty for a folder that does not exist."""
    found: tuple[list[Path], list[Path]] = ([], [])
    for path, hidden in _markdown_walk(Path(root)):
        found[hidden].append(path)
    return sorted(found[0]), sorted(found[1])


def has_markdown_documents(root: Path) -> bool:
    """Whether ``markdown_tree(root)`` holds a document, stopping at the first one (the config
    check of every job asks; counting walked the whole folder)."""
    return any(not hidden for _, hidden in _markdown_walk(Path(root)))


def is_hidden(relative: Path) -> bool:
    """Whether a path below a folder (relative to it) is hidden: a part of it, a file's name or
    a folder's, starts with ``.`` (``.git/x.md``, ``notes/.draft.md``; ``..`` is no name). The
    one rule of the corpus walk, the golden set's hint and the input digests."""
    return any(part.startswith(".") and part != ".." for part in relative.parts)


def _markdown_walk(root: Path) -> Iterator[tuple[Path, bool]]:
    """``(path, hidden)`` of each markdown file under ``root``, folders in name order. A linked
    folder was skipped without a word (``Path.rglob`` does not follow links): a corpus that
    links in a shared folder was measured without it."""
    if not root.is_dir():
        return
    trees = [root.resolve()]  # the folders walked whole: root and each linked one
    for folder, dirs, files in os.walk(root, followlinks=True):
        here = Path(folder)
        dirs.sort()
        for name in [d for d in dirs if (here / d).is_symlink()]:
            real = (here / name).resolve()
            if any(real.is_relative_to(t) or t.is_relative_to(real) for t in trees):
                dirs.remove(name)
            else:
                trees.append(real)
        for name in sorted(files):
            p = here / name
            if is_markdown(p) and p.is_file():
                yield p, is_hidden(p.relative_to(root))


def markdown_files(root: Path) -> list[Path]:
    """The documents of ``markdown_tree(root)``: what ``golden.load_corpus`` reads."""
    return markdown_tree(root)[0]


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A value read from a file, for an error message: a string as its ``repr`` (control
    characters, lone surrogates and other unprintable characters escaped), any other value as
    the JSON it was read from (``true``, ``null``, ``["d9"]``, not Python's ``True``), at most
    ``limit`` characters (``...`` marks a cut)."""
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]
    try:
        text = repr(value) if isinstance(value, str) else json.dumps(value)
    except (TypeError, ValueError):  # not a JSON value
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def label(value: object, limit: int = SHOWN_CHARS) -> str:
    """A name for a message: a short printable string as it is (``guide.md``), anything else
    through :func:`shown`."""
    if isinstance(value, str) and value and len(value) <= limit and value.isprintable():
        return value
    return shown(value, limit)


def look_alikes(unknown: list[str], known: Iterable[str], limit: int = 3) -> str:
    """``"; 'é5' is not the known 'é5': the same characters in other code points (U+0065
    U+0301 U+0035, NFD, against U+00E9 U+0035, NFC: Unicode normalisation)"`` for up to
    ``limit`` of the ``unknown`` ids that equal a ``known`` id once both are NFC-normalised (an
    editor or a file system wrote one of them decomposed); ``""`` when none does. For messages
    that refuse ids as unknown, which would otherwise print the two alike."""
    unknown = [u for u in unknown if not u.isascii()]
    if not unknown:
        return ""
    by_nfc: dict[str, str] = {}
    for k in known:
        by_nfc.setdefault(unicodedata.normalize("NFC", k), k)
    out = []
    for u in unknown:
        twin = by_nfc.get(unicodedata.normalize("NFC", u))
        if twin is not None and twin != u:
            out.append(f"{shown(u)} is not the known {shown(twin)}: the same characters in "
                       f"other code points ({_points(u)}, {_form(u)}, against "
                       f"{_points(twin)}, {_form(twin)}: Unicode normalisation)")
        if len(out) == limit:
            break
    return "".join(f"; {line}" for line in out)


def _form(text: str) -> str:
    return next((f for f in ("NFC", "NFD") if unicodedata.normalize(f, text) == text),
                "neither NFC nor NFD")


def _points(text: str, limit: int = 12) -> str:
    return " ".join(f"U+{ord(ch):04X}" for ch in text[:limit]) + (" ..." if len(
        text) > limit else "")


def decode(data: bytes, path: str | Path) -> str:
    """UTF-8 bytes -> text with ``\\n`` line ends and no byte-order mark.

    Raises :class:`InputError` (file, line, byte offset) for bytes that are not UTF-8, for a
    UTF-16/32 byte-order mark, and for a NUL byte (a binary file, not text)."""
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise InputError(path, None, f"is {name} text (it starts with a {name} byte-order "
                             f"mark); ragexp reads UTF-8: convert it, e.g. "
                             f"`iconv -f {name} -t UTF-8`")
    wide = _utf16_without_bom(data)
    if wide:
        raise InputError(path, None, f"looks like {wide} text without a byte-order mark (every "
                         f"other byte is NUL); ragexp reads UTF-8: convert it, e.g. "
                         f"`iconv -f {wide} -t UTF-8`")
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise InputError(path, line, f"not UTF-8 text: byte 0x{data[offset]:02x} at byte offset "
                         f"{offset} cannot be decoded ({exc.reason}); save the file as UTF-8 "
                         f"(from Latin-1: `iconv -f latin1 -t UTF-8`)") from None
    nul = text.find("\0")
    if nul != -1:
        offset = skip + len(text[:nul].encode("utf-8"))
        raise InputError(path, text.count("\n", 0, nul) + 1,
                         f"NUL byte at byte offset {offset}: a binary file, not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _utf16_without_bom(data: bytes, sample: int = 4096) -> str | None:
    """``"UTF-16LE"``/``"UTF-16BE"`` when the first ``sample`` bytes look like mostly-ASCII
    UTF-16 (NUL in nearly every odd, resp. even, byte and almost never in the others), else
    None. UTF-8 text never holds NUL bytes in that pattern."""
    head = data[:sample]
    if len(head) < 8:
        return None
    even, odd = head[0::2], head[1::2]
    for name, zeros, other in (("UTF-16LE", odd, even), ("UTF-16BE", even, odd)):
        if zeros.count(0) >= 0.9 * len(zeros) and other.count(0) <= 0.1 * len(other):
            return name
    return None


def read_text(path: str | Path) -> str:
    """The whole file as text (see :func:`decode`); ``FileNotFoundError`` if it is missing."""
    return decode(Path(path).read_bytes(), path)


def lines(path: str | Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """``(line number from 1, line)`` for every line of ``path`` (or of ``text``, already read
    from it) that is not blank. Lines are cut one at a time, never all at once: a million-line
    corpus holds one line's copy, not a million."""
    text = read_text(path) if text is None else text
    start, lineno = 0, 1
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        line = text[start:end]
        if line.strip():
            yield lineno, line
        start, lineno = end + 1, lineno + 1


# said of a JSON document where JSON Lines are read: pretty-printed (a line of only "[" or "{")
# or a JSON array of the records on one line
ONE_PER_LINE = ("; a JSON Lines file holds one whole JSON object per line, not a JSON array "
                "nor an object spread over lines (`jq -c '.[]' FILE` writes an array's "
                "objects one per line)")


def parse_json(line: str, path: str | Path, lineno: int) -> object:
    """One JSON value (a JSON Lines line). ``InputError`` names file and line for invalid JSON
    and for a string holding a lone UTF-16 surrogate (``"\\ud800"``: valid JSON escape syntax,
    but not Unicode text, so it could never be written out again)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        # json says "Unterminated string starting at" and gives the place apart
        msg = exc.msg[:-3] + " there" if exc.msg.endswith(" at") else exc.msg
        raise InputError(path, lineno, f"invalid JSON at column {exc.colno}: {msg}"
                         f"{ONE_PER_LINE if line.strip() in ('[', '{') else ''}") from None
    except RecursionError:
        raise InputError(path, lineno, "invalid JSON: nested too deeply") from None
    if "\\u" in line:
        bad = first_surrogate(value)
        if bad is not None:
            raise InputError(path, lineno, f"a string holds a lone UTF-16 surrogate "
                             f"({shown(bad)}), which is not Unicode text")
    return value


def first_surrogate(value: object) -> str | None:
    """The first string (key or value, at any depth) holding a lone surrogate, else None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def has_surrogate(text: str) -> int:
    """Index of the first lone surrogate in ``text``, or -1."""
    match = _SURROGATE.search(text)
    return match.start() if match else -1


def string_id(value: object, path: str | Path, lineno: int, field: str = "_id") -> str:
    """An id as a string: JSON strings as they are, JSON integers in decimal (as BEIR's and
    ir_datasets' loaders use them). Refuses empty ids, floats, booleans, null, lists, objects."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise InputError(path, lineno, f"{field} must be a non-empty string or an integer, got "
                     f"{shown(value)}")


def duplicates_message(seen: dict[str, list[int]], what: str, limit: int = 20) -> str | None:
    """``"duplicate <what>: 'd1' at lines 1, 3; ..."`` for every key seen on more than one line
    (every line of each), or None when there is none."""
    dups = [(key, nums) for key, nums in seen.items() if len(nums) > 1]
    if not dups:
        return None
    parts = [f"{shown(key)} at lines {', '.join(map(str, nums))}" for key, nums in dups[:limit]]
    more = f"; and {len(dups) - limit} more" if len(dups) > limit else ""
    return f"{len(dups)} duplicate {what}(s): {'; '.join(parts)}{more}"


def read_csv(path: str | Path, text_columns: tuple[str, ...], key: str = "id"):
    """A CSV table as a pandas DataFrame, with ``text_columns`` kept exactly as written (no
    number or missing-value parse: ``007`` stays ``"007"``, ``NA`` stays ``"NA"``) and every other
    column parsed by pandas, an empty cell being its only missing value.

    Raises :class:`InputError` (file, line) for a table without a ``key`` column, an empty key, or
    a key on more than one row (every line of each is named)."""

    # defer heavy import
    import pandas as pd

    text = read_text(path)
    header = next(csv.reader(io.StringIO(text)), [])
    if key not in header:
        raise InputError(path, 1, f"no {shown(key)} column (columns: {shown(', '.join(header))})")
    try:
        table = pd.read_csv(io.StringIO(text), dtype={c: str for c in text_columns if c in header},
                            keep_default_na=False,
                            na_values={c: [""] for c in header if c not in text_columns})
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(path, None, f"not a readable CSV table "
                         f"({shown(' '.join(str(exc).split()), 200)})") from None
    keys = table[key].astype(str)
    blank = keys.index[keys.str.strip() == ""]
    if len(blank):
        raise InputError(path, int(blank[0]) + 2, f"empty {key}")
    seen: dict[str, list[int]] = {}
    for row, value in enumerate(keys):
        seen.setdefault(value, []).append(row + 2)
    message = duplicates_message(seen, key)
    if message:
        raise InputError(path, None, message)
    return table
