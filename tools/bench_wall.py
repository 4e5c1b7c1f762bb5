"""Wall-time rows of ``make bench`` (issue #21): what a user waits for, against a plain bm25s
script over the same handbook, each command a fresh process, timed side by side.

- one run, ``python -m ragexp embedder=hash retriever=bm25 force=true`` (warm caches): target
  <= 6x the plain script;
- ``ragexp search`` on that BM25 run: <= 5x;
- the warm 12-ablation sweep (``force=true``, page included), per job: <= 3x the plain script,
  and the whole sweep <= 2.5x the same twelve configurations computed through the library in one
  fresh process (one shared stage store, no latency sample), on the questions the sweep's jobs
  score (the handbook's dev half: ``split=auto``) and checked to give each job's nDCG@10;
- information: the least any sweep on these tools can take, that library time plus the floor of
  a Hydra multirun of the same twelve jobs that only logs each job's params and metrics to
  MLflow (``FLOOR``), against the library time: where it is above 2.5, the target above is out
  of reach of a sweep that composes with Hydra and logs to MLflow;
- information: the sweep's CPU time (user + sys of its processes) over the usable cores, the
  least its work could take on this machine under any schedule (every second of it in
  parallel), against the library time: where it is above 2.5, doing today's work in parallel
  cannot meet the target either; only doing less can.

(The default embedding batch against the best fastembed setting is ``bench.py``'s row 7.)

Each command runs once to warm caches and imports, then ``repeats`` times interleaved with its
reference; the rows keep the medians. Everything runs in a temporary workspace (its own
``mlruns/`` and caches).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragexp.data import shipped

ABLATIONS = ("abstain_dense", "bm25", "chunks_large", "chunks_small", "default", "hash_dense",
             "hash_hybrid", "hybrid", "hybrid_no_reranker", "hybrid_no_reranker_large",
             "no_headings", "no_reranker")
PLAIN = '''
import json, sys
from pathlib import Path
import bm25s
corpus = sorted(Path(sys.argv[1]).glob("**/*.md"))
texts = [p.read_text() for p in corpus]
questions = [json.loads(line)["question"] for f in sorted(Path(sys.argv[2]).glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
index = bm25s.BM25()
index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
docs, _ = index.retrieve(bm25s.tokenize(questions, stopwords="en", show_progress=False),
                         k=5, show_progress=False)
print(len(questions), docs.shape)
'''


# The floor of any sweep run as a Hydra multirun that logs to MLflow: the same twelve jobs
# composed by Hydra from ragexp's config (schema registered, as ragexp's entry point does), each
# logging to the same sqlite store one run holding the params and metrics the sweep's own job of
# that ablation logged (one log_batch), in a process set up as ragexp's (cli.process.own), and
# nothing else: no data, no retrieval, no artifact, no end-of-sweep work.
FLOOR = '''
import json, sys
from ragexp.cli import process
process.own()
import hydra
import mlflow
from mlflow.entities import Metric, Param
from ragexp.config import schema
from ragexp.data import shipped
from ragexp.tracking import store
schema.register()
LOGGED = json.load(open("floor.json"))
@hydra.main(version_base="1.3", config_path=shipped.conf_dir(), config_name="config")
def job(cfg):
    client = mlflow.MlflowClient(store.tracking_uri())
    exp = client.get_experiment_by_name("ragexp-floor") or client.get_experiment(
        client.create_experiment("ragexp-floor"))
    run = client.create_run(exp.experiment_id)
    logged = LOGGED[cfg.ablation]
    client.log_batch(run.info.run_id,
                     metrics=[Metric(k, v, 0, 0) for k, v in logged["metrics"].items()],
                     params=[Param(k, v) for k, v in logged["params"].items()])
    client.set_terminated(run.info.run_id)
job()
'''


def _logged(workspace: Path, parent: str) -> dict[str, dict]:
    """``{ablation: {"params", "metrics"}}`` of the sweep ``parent``'s jobs, as they logged them
    (the floor job logs the same)."""
    # defer heavy import
    import mlflow

    from ragexp.tracking import store

    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        client = mlflow.MlflowClient(store.tracking_uri())
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  f"tags.mlflow.parentRunId = '{parent}'")
        return {r.data.tags["ragexp.ablation"]: {"params": dict(r.data.params),
                                                  "metrics": dict(r.data.metrics)} for r in runs}
    finally:
        os.chdir(cwd)


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
            "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}


def _timed(args: list[str], cwd: Path) -> tuple[float, str]:
    """Seconds one command takes, start to exit, and its stdout; raises when it fails."""
    took, _, stdout = _timed_cpu(args, cwd)
    return took, stdout


def _timed_cpu(args: list[str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds of one command, the CPU seconds (user + sys) of it and every process it
    waited for (``RUSAGE_CHILDREN``: a sweep's forked child included), and its stdout; raises
    when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, done.stdout


def _medians(commands: dict[str, list[str]], cwd: Path, repeats: int) -> dict[str, float]:
    """Median wall seconds of each command over ``repeats`` interleaved runs, after one warm-up
    run of each."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name, args in commands.items():
        _timed(args, cwd)
    for _ in range(repeats):
        for name, args in commands.items():
            times[name].append(_timed(args, cwd)[0])
    return {name: statistics.median(t) for name, t in times.items()}


def _row(make_row, name: str, ours: float, ref: float, target: float):
    r = ours / ref
    return make_row(name, f"{ours:.2f} s", f"{ref:.2f} s", f"{r:.2f}", f"<= {target:g}",
                    r <= target)


def _library_sweep(workspace: Path) -> tuple[float, dict[str, float]]:
    """Seconds to compute the twelve ablations through the library in this process, and each
    one's nDCG@10: composed with Hydra's compose API, each scoring the questions its sweep job
    scores (``app.choose_split``, ``split.select``: the handbook's dev half), one shared stage
    store, no latency sample, nothing logged."""
    # defer heavy import
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from ragexp.config import build, schema
    from ragexp.data import split
    from ragexp.run.app import choose_split
    from ragexp.run.pipeline import run_experiment

    schema.register()
    cwd = os.getcwd()
    os.chdir(workspace)
    try:
        with initialize_config_dir(version_base="1.3", config_dir=shipped.conf_dir()):
            cfgs = {a: compose("config", overrides=[f"+ablation={a}"]) for a in ABLATIONS}
        start = time.perf_counter()
        store, scores = None, {}
        for name, cfg in cfgs.items():
            choose_split(cfg)
            store = store or build.stage_store(cfg)
            data = split.select(instantiate(cfg.dataset), cfg.split, cfg.split_seed,
                                cfg.split_test_share)
            result = run_experiment(data, build.build(cfg), k=cfg.k, progress=False,
                                    store=store, latency_sample=0, budget=cfg.abstain.budget,
                                    folds=cfg.abstain.folds)
            scores[name] = result.metrics["ndcg_at_10"]
        return time.perf_counter() - start, scores
    finally:
        os.chdir(cwd)


def _library_fresh(workspace: Path) -> tuple[float, dict[str, float]]:
    """``_library_sweep`` in a fresh process: in ``make bench``'s own process the embedding rows
    before it had loaded MiniLM already, which the sweep loads, so the library read 1.22 s there
    and 2.29 s alone."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "tools.bench_wall", "--library", str(workspace)],
                          cwd=root, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the library sweep failed: {done.stderr[-800:]}")
    took, scores = json.loads(done.stdout.strip().splitlines()[-1])
    return took, scores


def _sweep_scores(stdout: str) -> dict[str, float]:
    """``{ablation: nDCG@10}`` from a sweep's ``run <id> [<ablation>] ... ndcg_at_10=x`` lines."""
    found = re.findall(r"^run \S+ \[([^\]]+)\] .*?\bndcg_at_10=([0-9.]+)", stdout, re.M)
    return {name: float(value) for name, value in found}


def wall_rows(make_row, repeats: int = 3, sweep: bool = True) -> list:
    """The rows of the module docstring; ``sweep=False`` leaves out the two sweep rows (minutes
    on a small machine)."""
    py = sys.executable
    corpus, golden = shipped.path("handbook/corpus"), shipped.path("handbook/golden")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-wall-") as tmp:
        ws = Path(tmp)
        (ws / "plain.py").write_text(PLAIN)
        plain = [py, "plain.py", str(corpus), str(golden)]
        one = [py, "-m", "ragexp", "embedder=hash", "retriever=bm25", "force=true"]
        run_id = _timed(one, ws)[1].split("run ", 1)[1].split()[0]
        search = [py, "-m", "ragexp.cli.main", "search", "--run", run_id, "refund policy"]
        t = _medians({"plain": plain, "one": one, "search": search}, ws, repeats)
        rows.append(_row(make_row, "one run, `python -m ragexp embedder=hash retriever=bm25 "
                         "force=true` (warm) vs a plain bm25s script over the handbook",
                         t["one"], t["plain"], 6))
        rows.append(_row(make_row, "`ragexp search` on that BM25 run vs the plain bm25s script",
                         t["search"], t["plain"], 5))
        if sweep:
            multirun = [py, "-m", "ragexp", "-m", f"+ablation={','.join(ABLATIONS)}",
                        "force=true"]
            _timed(multirun, ws)  # warm: vectors cached, stages stored
            wall, cpu, out = _timed_cpu(multirun, ws)
            library_s, library = _library_fresh(ws)
            swept = _sweep_scores(out)
            if set(swept) != set(ABLATIONS) or any(
                    abs(swept[a] - library[a]) > 5e-4 + 1e-9 for a in ABLATIONS):  # printed .3f
                raise RuntimeError(f"the library path did not compute what the sweep did: "
                                   f"nDCG@10 {library} vs the sweep's {swept}")
            rows.append(_row(make_row, f"warm {len(ABLATIONS)}-ablation sweep, force=true, page "
                             f"included, per job vs the plain bm25s script", wall / len(ABLATIONS),
                             t["plain"], 3))
            rows.append(_row(make_row, f"the same sweep vs its {len(ABLATIONS)} configurations "
                             f"computed through the library (one fresh process, shared stage "
                             f"store, no latency sample; the same questions and nDCG@10)", wall,
                             library_s, 2.5))
            parent = re.search(r"parent run ([0-9a-f]{32})", out).group(1)
            (ws / "floor.json").write_text(json.dumps(_logged(ws, parent)))
            (ws / "floor.py").write_text(FLOOR)
            floor = _timed([py, "floor.py", "-m", f"+ablation={','.join(ABLATIONS)}"], ws)[0]
            least = floor + library_s
            rows.append(make_row(
                f"information: the least a sweep on Hydra and MLflow can take, the library "
                f"compute plus the floor of a Hydra multirun of the same {len(ABLATIONS)} jobs "
                f"(composed from ragexp's config, each logging its sweep job's params and metrics "
                f"in one log_batch and doing nothing else: {floor:.2f} s), vs the library compute",
                f"{least:.2f} s", f"{library_s:.2f} s", f"{least / library_s:.2f}", "-", None))
            cores = len(os.sched_getaffinity(0))
            spread = cpu / cores
            rows.append(make_row(
                f"information: the least the same sweep's work could take here if every second "
                f"of it ran in parallel, its CPU time (user + sys of its processes: {cpu:.2f} s) "
                f"over this machine's {cores} usable cores, vs the library compute",
                f"{spread:.2f} s", f"{library_s:.2f} s", f"{spread / library_s:.2f}", "-", None))
    return rows


if __name__ == "__main__" and sys.argv[1:2] == ["--library"]:  # _library_fresh's process
    print(json.dumps(_library_sweep(Path(sys.argv[2]))))
elif __name__ == "__main__":  # one pass of every row, small: python -m tools.bench_wall
    from collections import namedtuple

    Row = namedtuple("Row", "name ours ref ratio target ok")
    for row in wall_rows(Row, repeats=1, sweep="--sweep" in sys.argv):
        print(row)
