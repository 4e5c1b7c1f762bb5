"""Who may call the HTTP API.

On a loopback address (127.0.0.0/8, ::1, ``localhost``) only this machine can connect. On any
other address ``ragexp serve`` requires an API key, read from the environment variable named by
``--api-key-env`` (never from the command line, where ``ps`` would show it), or an explicit
``--insecure``. A key shorter than ``MIN_KEY_CHARS`` characters (surrounding whitespace
stripped) is refused at start-up: a short key is guessed by trying them all. With a key, every
request must send ``Authorization: Bearer <key>``; the comparison takes constant time
(``hmac.compare_digest``), the key is never logged or echoed, and a 401 names nothing about what
is served.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import Mapping

from ragexp.errors import RagexpError

MIN_KEY_CHARS = 16  # secrets.token_urlsafe(32) gives 43


class AccessError(RagexpError, ValueError):
    """``serve`` options that would expose the API without access control, or a missing key."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; any other name or address is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def api_key_for(host: str, api_key_env: str | None, insecure: bool,
                environ: Mapping[str, str] = os.environ) -> str | None:
    """The key every request must carry, or None for none.

    Raises ``AccessError`` when ``host`` is not loopback and neither a key nor ``insecure`` is
    given, when the variable ``api_key_env`` names is unset or empty, and when its key (stripped
    of surrounding whitespace, as requests' keys are) is shorter than ``MIN_KEY_CHARS`` (the
    message names the variable and the length, never a value)."""
    if api_key_env:
        key = environ.get(api_key_env, "").strip()
        if not key:
            raise AccessError(f"--api-key-env {api_key_env}: that environment variable is unset "
                              f"or empty; export the key in it first")
        if len(key) < MIN_KEY_CHARS:
            raise AccessError(f"--api-key-env {api_key_env}: the key is {len(key)} characters; "
                              f"keys need at least {MIN_KEY_CHARS} (make one with `python -c "
                              f"'import secrets; print(secrets.token_urlsafe(32))'`)")
        return key
    if not is_loopback(host) and not insecure:
        raise AccessError(f"--host {host} is reachable from other machines: give an API key "
                          f"with --api-key-env VAR (requests then need 'Authorization: Bearer "
                          f"<key>'), or pass --insecure to serve without access control")
    return None


def authorized(key: str, authorization: str | None) -> bool:
    """Does an ``Authorization`` header value carry ``key`` (as ``Bearer <key>``)? Compared in
    constant time, so response timing does not reveal how much of a guess was right."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    return hmac.compare_digest(given.strip().encode("utf-8"), key.encode("utf-8"))
