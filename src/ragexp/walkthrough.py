"""Run sweep -> compare -> promote -> search/ask/serve on the local store and record the real
output in the README's ``walkthrough`` block (``make walkthrough``; needs ``make sweep`` first).

Each step is the same ``ragexp`` command a user types, run in a subprocess; the HTTP part starts
``ragexp serve`` on a free loopback port, queries it, and stops it by process group.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.error
import urllib.request

from ragexp.background import background_server
from ragexp.readme import replace_block
from ragexp.report import ablation_runs


# The console script installed beside this interpreter (works without an activated venv).
RAGEXP = [sys.executable, "-m", "ragexp.cli"]


def sh(*args: str) -> str:
    proc = subprocess.run([*RAGEXP, *args], capture_output=True, text=True, timeout=600)
    out = (proc.stdout + proc.stderr).rstrip()
    return f"$ ragexp {' '.join(_quote(a) for a in args)}\n{out}"


def _quote(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


def http(port: int, path: str, body: dict | None = None) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, payload = resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, json.load(exc)
    method = "POST" if body else "GET"
    shown = f" -d '{json.dumps(body)}'" if body else ""
    return (f"$ curl -s -X {method} 'http://127.0.0.1:{port}{path}'{shown}   # HTTP {status}\n"
            + json.dumps(payload, indent=1)[:1500])


def serve_and_query() -> list[str]:
    with background_server(lambda port: [*RAGEXP, "serve", "--port", str(port)]) as port:
        return [http(port, "/health"),
                http(port, "/answer", {"question": "How long are dead-lettered jobs kept?"}),
                http(port, "/search?q=snapshot&k=0")]


def build(experiment: str) -> str:
    df = ablation_runs(experiment)
    ids = dict(zip(df["tags.ragexp.ablation"], df["run_id"]))
    best = df.sort_values("metrics.rr_at_10", ascending=False)["tags.ragexp.ablation"].iloc[0]
    picks = [n for n in dict.fromkeys(["default", "hybrid", "bm25", best]) if n in ids]
    steps = [
        sh("compare", "--experiment", experiment, "--runs", *[ids[n] for n in picks],
           "--baseline", ids["default"]),
        sh("promote", "--gate", ids[best]),
        sh("search", "restore a single queue from a snapshot", "-k", "3"),
        sh("ask", "What does BD-2110 mean?"),
        sh("ask", "Is there a Helm chart for deploying Brindle on Kubernetes?"),
        *serve_and_query(),
    ]
    return "\n".join(["```text", "\n\n".join(steps), "```"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragexp.walkthrough", description=__doc__)
    p.add_argument("--experiment", default="ragexp-handbook")
    p.add_argument("--readme", help="write the output into this file's walkthrough block")
    args = p.parse_args(argv)
    content = build(args.experiment)
    print(content)
    if args.readme:
        replace_block(args.readme, "walkthrough", content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
