"""Run sweep -> compare -> promote -> search/ask/serve (traced, one answer marked wrong) ->
``traces mine`` -> ``traces accept`` -> ``mlflow models serve`` and record the real output in the
``walkthrough`` block of ``docs/serving.md`` (``make walkthrough``).

It runs in a fresh temporary folder of its own, with its own store (ragexp's default
``mlruns/`` there; ``MLFLOW_TRACKING_URI`` is ignored) and embedding cache, on the shipped
config, handbook and golden set (which run from any folder): the sweep of ``ABLATIONS`` it
records is the one its compare, promote and serving read. On a shared store the champion could
be an earlier walkthrough's, and ``promote --gate`` of the same run was refused (no gain over
itself), so the recording depended on what the store held; now two runs in a row record the
same steps, apart from ids, ports and timings.

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
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from ragexp.cli.tables import ablation_runs
from ragexp.decide import compare
from tools.background import background_server
from tools.readme import has_block, replace_block

BIN = str(Path(sys.executable).parent)
# True while ``build`` runs in its temporary folder: each command then uses that folder's own
# store (ragexp's default, ``mlruns/`` there), not the absolute URI MLflow exports to this
# process once pointed at a store. False when this module is used without ``build``, as the
# tests do: commands then inherit this process's store.
OWN_STORE = False
# The ablations the walkthrough sweeps: the three its compare shows (the best of them is
# promoted).
ABLATIONS = ("default", "hybrid", "bm25")
# Log lines of Hydra (``[2026-01-31 12:00:00,000][module][INFO] - ...``) and MLflow
# (``2026/01/31 12:00:00 INFO mlflow...``): counted in a sweep's recording, not shown.
LOG_LINE = re.compile(r"^(\[\d{4}-\d\d-\d\d [\d:,]+\]|\d{4}/\d\d/\d\d [\d:]+ [A-Z]+ )")


def run(command: str, omit_log: bool = False) -> str:
    """Execute ``command`` exactly as written; return it as ``$ command`` and its output, with
    this machine's folder shown relative (``relative``); ``omit_log``: Hydra's and MLflow's log
    lines (``LOG_LINE``) left out and counted."""
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    if OWN_STORE:  # the store of the walkthrough's folder
        env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=600,
                          env=env)
    lines = (proc.stdout + proc.stderr).rstrip().splitlines()
    if omit_log:
        kept = [line for line in lines if not LOG_LINE.match(line)]
        omitted = len(lines) - len(kept)
        lines = kept + ([f"[{omitted} lines of Hydra/MLflow log omitted]"] if omitted else [])
    return relative("\n".join([f"$ {command}", *lines]))


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
        return mlflow_serve_command(port=port, uri=LOCAL_STORE if OWN_STORE else None)

    with background_server(lambda port: shlex.split(command(port)), health="/ping",
                           timeout_s=240, env=env) as port:
        return [f"$ {command(port)}\n(in the background until the request below is answered)",
                run(curl(port, "/invocations", {"inputs": ["How long are dead-lettered jobs "
                                                           "kept?"]}))]


def build(experiment: str, overrides: tuple[str, ...] = ()) -> str:
    """The recorded walkthrough, run in a fresh temporary folder with its own store
    (``OWN_STORE``), which this process reads too (``MLFLOW_TRACKING_URI`` pointed at it for the
    while); ``overrides``: what the sweep adds to every ablation (``make sweep``'s question
    sources). The current folder and ``MLFLOW_TRACKING_URI`` are restored after."""
    global OWN_STORE
    here, uri = Path.cwd(), os.environ.get("MLFLOW_TRACKING_URI")
    with tempfile.TemporaryDirectory(prefix="ragexp-walkthrough-") as tmp:
        os.chdir(tmp)
        Path("mlruns").mkdir()
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tmp).resolve()}/mlruns/mlflow.db"
        OWN_STORE = True
        try:
            steps = walk(experiment, overrides)
        finally:
            OWN_STORE = False
            os.chdir(here)
            os.environ.pop("MLFLOW_TRACKING_URI")
            if uri is not None:
                os.environ["MLFLOW_TRACKING_URI"] = uri
    return "\n".join(["```text", "\n\n".join(steps), "```"])


def walk(experiment: str, overrides: tuple[str, ...]) -> list[str]:
    """Each step's recording, in the current folder: the sweep of ``ABLATIONS``, then compare,
    promote and serving on its runs."""
    q = shlex.quote
    sweep = [run(" ".join(["python -m ragexp -m", f"+ablation={','.join(ABLATIONS)}",
                           *map(q, overrides), "progress=false"]), omit_log=True)]
    df = ablation_runs(experiment, overrides)
    ids = {n: r[:8] for n, r in zip(df["tags.ragexp.ablation"], df["run_id"])}  # prefixes
    # the best on the questions that decide (objective_source), as compare shows them: the
    # mean over every source's picked a run the generated questions favour
    own = f"metrics.rr_at_10.source.{compare.deciding_source(df)}"
    best = df.sort_values(own if own in df else "metrics.rr_at_10",
                          ascending=False)["tags.ragexp.ablation"].iloc[0]
    picks = [n for n in dict.fromkeys(["default", "hybrid", "bm25", best]) if n in ids]
    return [
        *sweep,
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.walkthrough", description=__doc__)
    p.add_argument("--experiment", default="ragexp-handbook")
    p.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="what the walkthrough's sweep adds to every ablation (make "
                   "walkthrough: make sweep's question sources)")
    p.add_argument("--readme", help="write the output into this markdown file's walkthrough "
                   "block (make walkthrough: docs/serving.md)")
    args = p.parse_args(argv)
    if not has_block(args.readme, "walkthrough"):
        return 2
    content = build(args.experiment, tuple(args.overrides))
    print(content)
    if args.readme:
        replace_block(args.readme, "walkthrough", content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
