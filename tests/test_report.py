"""`make tables` and `make walkthrough` on a temporary store: a row is only a run whose whole
config is the ablation's composed config; recorded commands are exactly what ran."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
from workspaces import record_run

from ragexp.cli import tables as report
from ragexp.run import schema
from ragexp.serving.promote import promote
from ragexp.tracking import store as tracking
from tools import walkthrough

schema.register()


@pytest.fixture(scope="module")
def store(module_mlflow_store):
    tmp = module_mlflow_store.folder
    quiet = [f"cache_dir={tmp / 'cache'}", "progress=false"]
    true_bm25 = record_run(*quiet, "+ablation=bm25")  # exactly conf/ablation/bm25.yaml
    # Planted after it (so "latest run tagged X" would pick them): tagged, but other configs.
    fake_hybrid = record_run(*quiet, "+ablation=hybrid", "retriever=bm25")
    tuned_bm25 = record_run(*quiet, "+ablation=bm25", "bm25.k1=0.3", "bm25.b=0.1")
    return tmp, true_bm25, fake_hybrid, tuned_bm25


def test_runner_and_report_agree_on_the_ablation_hash(store):
    _, true_bm25, fake_hybrid, _ = store
    tags = tracking.client().get_run(true_bm25["run_id"]).data.tags
    assert tags["ragexp.ablation"] == "bm25"
    hashes = report.ablation_hashes(["bm25", "hybrid"])
    assert hashes[tags["ragexp.config_hash"]] == "bm25"
    fake = tracking.client().get_run(fake_hybrid["run_id"]).data.tags
    assert fake["ragexp.ablation"] == "hybrid" and fake["ragexp.config_hash"] not in hashes


def test_rows_show_only_runs_with_the_ablations_exact_config(store):
    _, true_bm25, fake_hybrid, tuned_bm25 = store
    assert tuned_bm25["rr_at_10"] != pytest.approx(true_bm25["rr_at_10"])  # the plant would show
    df = report.ablation_runs("ragexp-handbook")
    assert list(df["run_id"]) == [true_bm25["run_id"]]
    assert "hybrid" in df.attrs["missing"] and "bm25" not in df.attrs["missing"]
    content = report.build("ragexp-handbook")
    rows = [ln for ln in content.splitlines() if ln.startswith("| bm25 | BM25 alone.")]
    assert len(rows) == 1 and f"| {true_bm25['rr_at_10']:.3f} |" in rows[0]
    assert not any(ln.startswith("| hybrid |") for ln in content.splitlines())
    assert "RR@10 identifier" in content and "CV unanswerable refused" in content
    assert re.search(r"no run with this exact config; run `make sweep`: .*\bhybrid\b", content)


def test_readme_block_replacement(tmp_path):
    from tools.readme import MissingMarkers, replace_block

    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- results:start -->\nSTALE-BLOCK\n<!-- results:end -->\nafter\n")
    replace_block(readme, "results", "NEW")
    text = readme.read_text()
    assert text == "before\n<!-- results:start -->\nNEW\n<!-- results:end -->\nafter\n"
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    with pytest.raises(MissingMarkers):
        replace_block(plain, "results", "x")
    assert plain.read_text() == "no markers\n"


@pytest.mark.parametrize("main", ["tools.bench:main", "tools.bench_scale:main",
                                  "tools.owndocs:main", "tools.walkthrough:main"])
def test_readme_commands_refuse_a_readme_without_their_block_before_measuring(tmp_path, capsys,
                                                                              main):
    """Each ``--readme`` command exits 2 naming the file and markers, and measures nothing."""
    import importlib

    from tools.readme import has_block

    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    module, name = main.split(":")
    assert getattr(importlib.import_module(module), name)(["--readme", str(plain)]) == 2
    err = capsys.readouterr().err
    assert str(plain) in err and ":start -->" in err and "nothing written" in err
    assert plain.read_text() == "no markers\n"
    assert has_block(None, "bench") is True
    assert not has_block(tmp_path / "missing.md", "bench")
    assert "missing.md: file not found" in capsys.readouterr().err


def recorded(steps: list[str]) -> list[tuple[str, str]]:
    """(command, output) of each ``$ command`` step of a recording."""
    out = []
    for step in steps:
        first, _, rest = step.partition("\n")
        assert first.startswith("$ ")
        out.append((first[2:], rest))
    return out


@pytest.mark.slow
def test_walkthrough_commands_are_what_ran_and_reproduce_their_status(store, tmp_path,
                                                                      monkeypatch):
    _, true_bm25, _, _ = store
    promote(true_bm25["run_id"])
    steps = recorded(walkthrough.serve_and_query())
    statuses = [out.splitlines()[-1] for _, out in steps]
    # health, one answer per asked question, the refused search, the feedback
    assert statuses == ["HTTP 200"] * (1 + len(walkthrough.ASKED)) + ["HTTP 400", "HTTP 200"]
    marked = json.loads(steps[-1][1].splitlines()[0])
    assert marked["recorded"] is True
    assert marked["trace_id"] == json.loads(steps[len(walkthrough.ASKED)][1].splitlines()[0])[
        "trace_id"]
    # the loop back: this walkthrough's traces mined, the marked one accepted and validated
    monkeypatch.setattr(walkthrough, "MINED", str(tmp_path / "mined"))
    mined = recorded(walkthrough.mine_and_accept())
    assert mined[0][0].startswith(f"ragexp traces mine --max-traces {len(walkthrough.ASKED)}")
    assert "marked_wrong" in mined[0][1]
    assert mined[1][0].startswith("ragexp traces accept") and "accepted 1 question" in mined[1][1]
    [accepted] = [json.loads(line) for line in
                  (tmp_path / "mined" / "accepted.jsonl").read_text().splitlines()]
    assert accepted["question"] == walkthrough.ASKED[-1] and accepted["reason"] == "marked_wrong"
    post = steps[1][0]
    assert "-d " in post and "Content-Type: application/json" in post
    assert '"refused"' in steps[1][1] and true_bm25["run_id"] in steps[1][1]
    # Replay every recorded curl line, literally, against a server on another port.
    from tools.background import background_server

    with background_server(lambda port: ["ragexp", "serve", "--port", str(port)],
                           env={"PATH": walkthrough.BIN + ":" + __import__("os").environ[
                               "PATH"]}) as port:
        for (command, out), want in zip(steps, statuses):
            again = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", command)
            proc = subprocess.run(shlex.split(again), capture_output=True, text=True,
                                  timeout=120)
            assert proc.stdout.splitlines()[-1] == want, (again, proc.stdout)
    prefix = true_bm25["run_id"][:8]
    cmd, out = recorded([walkthrough.run(f"ragexp compare --format csv --runs {prefix}")])[0]
    assert cmd == f"ragexp compare --format csv --runs {prefix}"
    assert out.splitlines()[1].startswith(f"{prefix},")


def test_differing_params_come_out_in_one_order_whatever_order_mlflow_gives():
    import pandas as pd

    from ragexp.decide.compare import differing_params

    cols = {"params.retriever.name": ["dense", "hybrid"], "params.reranker.top_n": ["20", "0"],
            "params.k": ["100", "100"], "params.force": ["False", "True"],
            "params.reranker.name": ["lexical", "none"], "run_id": ["a", "b"]}
    orders = {tuple(differing_params(pd.DataFrame({k: cols[k] for k in keys})))
              for keys in (list(cols), list(reversed(cols)))}
    assert orders == {("params.reranker.name", "params.reranker.top_n",
                       "params.retriever.name")}
