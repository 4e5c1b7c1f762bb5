"""The page ``ragexp serve`` shows at ``/``: a question box over ``POST /answer``.

One self-contained file (``static/page.html``: its style and script inline, no fonts, images or
scripts from anywhere else), so it works on a machine without network. It shows the answer's
sentences with their ``[n]`` citations linked to the numbered sources, the abstain signal
against the run's refusal threshold as a bar with the threshold marked, a refusal as a refusal
with its reason, and a "this answer was wrong" button that sends ``POST /feedback`` with the
answer's ``trace_id`` (disabled when the server traces nothing, ``trace_id`` null). With an API
key (``access.py``) the page asks for the key on the first 401 and sends it as ``Authorization:
Bearer``, kept in the tab's ``sessionStorage`` only.

The page itself holds no data (it asks ``/health`` which run serves), so it is served without a
key. Everything it shows is set as text (``textContent``), never parsed as HTML; on top of that,
the ``Content-Security-Policy`` below lets only the page's own inline script and style run (by
their SHA-256 hashes) and lets it connect only to its own origin.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from importlib import resources

_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.S)


@lru_cache(maxsize=1)
def html() -> str:
    """The page's HTML (UTF-8 text)."""
    return resources.files("ragexp.serving").joinpath("static/page.html").read_text("utf-8")


def _sha256(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()
    return f"'sha256-{digest}'"


@lru_cache(maxsize=1)
def content_security_policy() -> str:
    """CSP for the page: nothing loads or runs but its own inline ``<script>`` and ``<style>``
    (allowed by hash, CSP level 2), and ``fetch`` reaches only the serving origin."""
    inline = {"script": [], "style": []}
    for tag, body in _INLINE.findall(html()):
        inline[tag].append(_sha256(body))
    return "; ".join([
        "default-src 'none'",
        "script-src " + " ".join(inline["script"]),
        "style-src " + " ".join(inline["style"]),
        "connect-src 'self'",
        "img-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ])


def headers() -> dict[str, str]:
    """Response headers for the page: its CSP, no MIME sniffing, no referrer sent."""
    return {"Content-Security-Policy": content_security_policy(),
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store"}
