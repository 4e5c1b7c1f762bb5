"""What both servers accept: one check per input, shared by ``ragexp serve`` (``api.py``), the
champion's pyfunc model that ``mlflow models serve`` serves (``model.py``), and ``ragexp
search``/``ask``, so the same bad input is refused with the same one-line message everywhere.

A question is a JSON string (never null, a number, a boolean, a list or an object), Unicode
text (no lone UTF-16 surrogate, which JSON's ``"\\ud800"`` escape can smuggle in), not empty or
whitespace only, and at most ``MAX_QUESTION`` characters (code points, as JSON Schema's
``maxLength`` counts them). Each refusal is a ``BadQuestion`` carrying the HTTP status
``ragexp serve`` answers with: 422 for a wrong JSON type, 413 for too long, 400 otherwise.
"""

from __future__ import annotations

import numbers
from urllib.parse import unquote_to_bytes

from ragexp.data.readers import has_surrogate
from ragexp.errors import RagexpError

MAX_QUESTION = 2000
MAX_K = 50
MAX_ID = 1000  # characters of a trace or chunk id sent back (chunk ids are paths plus '#n')
# JSON Schema ``pattern`` (unanchored): holds a character that ``str.strip()`` keeps. Spelled
# out, not ``\S``: regex engines differ on what ``\s`` holds (Python's has \x1c-\x1f, \x85).
NOT_BLANK = (r"[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f"
             r"\u205f\u3000]")


class BadQuestion(RagexpError, ValueError):
    """A question or parameter the servers will not take; ``status`` is the HTTP code for it."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type with its article (``null``, ``a boolean``, ``a number``,
    ``a list``, ``an object``, ``a string``), as a message names what was sent. NaN counts as
    null: pandas stores a missing JSON value as NaN."""
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):  # numpy's too
        return "a boolean"
    if isinstance(value, numbers.Number):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):  # numpy arrays too
        return "a list"
    return f"a {type(value).__name__}"


def text(value: object, field: str, limit: int) -> str:
    """``value`` unchanged when it is a string of Unicode text at most ``limit`` characters
    long. Raises ``BadQuestion``: 422 naming the JSON type sent instead of a string, 400 for a
    lone UTF-16 surrogate (not Unicode text: it cannot be answered or echoed back as UTF-8),
    413 when longer than ``limit``."""
    if not isinstance(value, str):
        raise BadQuestion(f"{field} is {json_type(value)}, not a string; send it as a JSON "
                          f"string", 422)
    pos = has_surrogate(value)
    if pos >= 0:
        raise BadQuestion(f"{field} holds a lone UTF-16 surrogate at character {pos}, which is "
                          f"not Unicode text; send UTF-8 text")
    if len(value) > limit:
        raise BadQuestion(f"{field} is {len(value)} characters; the limit is {limit}", 413)
    return value


def check_question(value: object, field: str = "question") -> str:
    """The question in ``value``, stripped of surrounding whitespace. Raises ``BadQuestion`` as
    ``text`` does (wrong type 422, lone surrogate 400, over ``MAX_QUESTION`` characters 413),
    and 400 when it is empty or whitespace only."""
    question = text(value, field, MAX_QUESTION)
    if not question.strip():
        raise BadQuestion(f"{field} must not be empty")
    return question.strip()


def check_k(k: int) -> int:
    """``k`` when ``1 <= k <= MAX_K``; else ``BadQuestion`` (400) naming the range."""
    if not 1 <= k <= MAX_K:
        raise BadQuestion(f"k must be between 1 and {MAX_K}, got {k}")
    return k


def check_query_string(raw: bytes) -> None:
    """Refuse a URL query string whose percent-decoded names or values are not UTF-8 (``%FF``,
    or ``%ED%A0%80``, a surrogate's CESU-8 bytes): the web framework would replace each bad byte
    with U+FFFD and search for that. Raises ``BadQuestion`` (400) naming the parameter and the
    offset of the first bad byte in its decoded value."""
    for pair in raw.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            data = unquote_to_bytes(part.replace(b"+", b" "))
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                shown = name.decode("ascii", "replace") or "a parameter name"
                raise BadQuestion(f"query parameter {shown} is not UTF-8 text (byte "
                                  f"{exc.start} of its decoded value); percent-encode UTF-8 "
                                  f"bytes") from None


def check_body(body: bytes) -> None:
    """Refuse a request body that is not UTF-8 (JSON text exchanged between systems must be,
    RFC 8259 section 8.1; Python's JSON reader would take UTF-16 or UTF-32 as well). Raises
    ``BadQuestion`` (400) with the offset of the first bad byte."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadQuestion(f"the request body is not UTF-8 text (byte {exc.start}); send JSON "
                          f"encoded as UTF-8") from None
