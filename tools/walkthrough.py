"""Run sweep -> compare -> promote -> search/ask/serve (traced, one answer marked wrong) ->
``traces mine`` -> ``traces accept`` -> ``mlflow models serve`` on the local store and record the
real output in the ``walkthrough`` block of ``docs/serving.md`` (``make walkthrough``; needs
``make sweep`` first).

Each step is recorded as one command line, and that very string is what runs: split as a shell
splits it (``shlex``), executed without a shell, with this interpreter's ``bin/`` first on
``PATH`` so ``ragexp`` is the installed console script. The HTTP part starts ``ragexp serve`` on
a free loopback port and queries it with ``curl``; ``-w`` makes curl print the HTTP status
after the body.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ragexp.cli.tables import ablation_runs
from tools.background import background_server
from tools.readme import has_block, replace_block

BIN = str(Path(sys.executable).parent)
# The store as the user named it (``make walkthrough``: unset, so ragexp's relative default),
# read by ``main`` before MLflow, once pointed at a store, exports its absolute URI to this
# process; the recorded commands then run with it. Unset (``NAMED`` false) when this module is
# used without ``main``, as the tests do: commands then inherit this process's store.
USER_URI: str | None = None
NAMED = False


def run(command: str) -> str:
    """Execute ``command`` exactly as written; return it as ``$ command`` and its output, with
    this machine's folder shown relative (``relative``)."""
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    if NAMED:  # each command sees the store as the user named it
        env.pop("MLFLOW_TRACKING_URI", None)
        if USER_URI:
            env["MLFLOW_TRACKING_URI"] = USER_URI
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=600,
                          env=env)
    return relative(f"$ {command}\n{(proc.stdout + proc.stderr).rstrip()}")


def relative(text: str, folder: Path | None = None) -> str:
    """``text`` with every absolute path under ``folder`` (default: the current folder, where
    the walkthrough runs) written relative to it, so the recorded block shows no machine's
    folder: ``sqlite:////home/me/ragexp/mlruns/mlflow.db`` -> ``sqlite:///mlruns/mlflow.db``
    (a command's child exports the store's absolute URI once MLflow points at it)."""
    prefix = str((folder or Path.cwd()).resolve()) + os.sep
    return text.replace(prefix, "")


def curl(port: int, path: str, body: dict | None = None) -> str:
    """The curl command line for one request (POST with a JSON body when ``body``)."""
    parts = ["curl", "-s", "-w", r"\nHTTP %{http_code}\n"]
    if body is not None:
        parts += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    return shlex.join([*parts, f"http://127.0.0.1:{port}{path}"])


# What the walkthrough asks ``ragexp serve``: the last answer is marked wrong through
# ``/feedback``, as a user of the page would. Every /answer and /search writes one trace.
ASKED = ("How long are dead-lettered jobs kept?",
         "Which port does the admin console listen on?",
         "Can I pause a queue without losing its jobs?")
MINED = "mined"  # where the walkthrough's candidate and accepted golden questions go


def body(output: str) -> dict:
    """The JSON body of a recorded curl step (``$ curl ...`` line, body, ``HTTP nnn``)."""
    return json.loads(output.splitlines()[1])


def serve_and_query() -> list[str]:
    with background_server(lambda port: ["ragexp", "serve", "--port", str(port)],
                           env={"PATH": BIN + os.pathsep + os.environ.get("PATH", "")}) as port:
        steps = [run(curl(port, "/health"))]
        steps += [run(curl(port, "/answer", {"question": q})) for q in ASKED]
        steps.append(run(curl(port, "/search?q=snapshot&k=0")))
        wrong = body(steps[len(ASKED)])["trace_id"]
        steps.append(run(curl(port, "/feedback", {"trace_id": wrong, "wrong": True,
                                                  "comment": "cites the wrong section"})))
        return steps


def mine_and_accept() -> list[str]:
    """Mine the traces this walkthrough's ``ragexp serve`` wrote (the newest ones: one per
    /answer, the /search with k=0 was refused before ranking), then accept the candidate the
    user marked wrong into ``mined/accepted.jsonl``, validated as the golden set is."""
    out = f"{MINED}/candidates.jsonl"
    Path(MINED, "accepted.jsonl").unlink(missing_ok=True)  # the walkthrough starts it afresh
    steps = [run(f"ragexp traces mine --max-traces {len(ASKED)} --out {out}")]
    marked = [r["id"] for r in candidates(out) if r.get("reason") == "marked_wrong"]
    if marked:
        steps.append(run(f"ragexp traces accept {out} --into {MINED}/accepted.jsonl "
                         f"--id {marked[0]}"))
    return steps


def candidates(path: str) -> list[dict]:
    """The records of a candidate file (its ``//`` comment lines skipped)."""
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("//")]


def mlflow_serve_and_query() -> list[str]:
    """``mlflow models serve`` on the champion model, in the background, asked over
    ``/invocations``; its own line records the exact command that ran."""
    from ragexp.serving.model import LOCAL_STORE, mlflow_serve_command

    env = {"PATH": BIN + os.pathsep + os.environ.get("PATH", "")}

    def command(port: int) -> str:
        return mlflow_serve_command(port=port,
                                    uri=USER_URI or (LOCAL_STORE if NAMED else None))

    with background_server(lambda port: shlex.split(command(port)), health="/ping",
                           timeout_s=240, env=env) as port:
        return [f"$ {command(port)}\n(in the background until the request below is answered)",
                run(curl(port, "/invocations", {"inputs": ["How long are dead-lettered jobs "
                                                           "kept?"]}))]


def build(experiment: str, overrides: tuple[str, ...] = ()) -> str:
    df = ablation_runs(experiment, overrides)
    ids = {n: r[:8] for n, r in zip(df["tags.ragexp.ablation"], df["run_id"])}  # prefixes
    best = df.sort_values("metrics.rr_at_10", ascending=False)["tags.ragexp.ablation"].iloc[0]
    picks = [n for n in dict.fromkeys(["default", "hybrid", "bm25", best]) if n in ids]
    q = shlex.quote
    steps = [
        run(f"ragexp compare --experiment {q(experiment)} --runs "
            f"{' '.join(ids[n] for n in picks)} --baseline {ids['default']}"),
        run(f"ragexp promote --gate {ids[best]}"),
        run("ragexp search 'restore a single queue from a snapshot' -k 3"),
        run("ragexp ask 'What does BD-2110 mean?'"),
        run("ragexp ask 'Is there a Helm chart for deploying Brindle on Kubernetes?'"),
        *serve_and_query(),
        *mine_and_accept(),
        *mlflow_serve_and_query(),
    ]
    return "\n".join(["```text", "\n\n".join(steps), "```"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.walkthrough", description=__doc__)
    p.add_argument("--experiment", default="ragexp-handbook")
    p.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="the overrides the sweep added to every ablation (make sweep's)")
    p.add_argument("--readme", help="write the output into this markdown file's walkthrough "
                   "block (make walkthrough: docs/serving.md)")
    args = p.parse_args(argv)
    if not has_block(args.readme, "walkthrough"):
        return 2
    global USER_URI, NAMED
    USER_URI, NAMED = os.environ.get("MLFLOW_TRACKING_URI"), True
    content = build(args.experiment, tuple(args.overrides))
    print(content)
    if args.readme:
        replace_block(args.readme, "walkthrough", content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
