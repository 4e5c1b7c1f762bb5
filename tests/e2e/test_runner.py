"""The runner end to end: a real Hydra multirun into a temporary MLflow store (in this process,
``cli_runs.run_app``; with joblib's launcher in a child)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cli_runs import run_app, run_ragexp
from mlflow.tracking import MlflowClient
from workspaces import FAILING, search_runs, store_uri, tracking_store

from ragexp.data import shipped
from ragexp.evaluation.measures import DEFAULT

pytestmark = pytest.mark.slow


def runs(tmp: Path) -> pd.DataFrame:
    return search_runs(store_uri(tmp), experiment_names=["ragexp-handbook"])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    # the jobs on bad.jsonl pass composition (the file exists) and fail loading it: its quote
    # is not in the handbook
    (tmp / "bad.jsonl").write_text(
        '{"id": "x-1", "kind": "factual", "question": "Where is the ledger?", "answer": "disk", '
        '"evidence": [{"doc": "overview.md", "quote": "this sentence is not in the handbook"}]}\n')
    proc = run_app(tmp, "-m", "embedder=hash", "retriever=dense,bm25", "reranker=none",
                   f"dataset.questions={shipped.path('handbook/golden')},{tmp / 'bad.jsonl'}",
                   f"hydra.sweep.dir={tmp / 'multirun'}")
    return tmp, proc


def test_sweep_makes_one_parent_and_a_child_per_job(sweep):
    tmp, proc = sweep
    df = runs(tmp)
    parents = df[df["tags.ragexp.role"] == "sweep"]
    assert len(parents) == 1
    children = df[df["tags.mlflow.parentRunId"] == parents["run_id"].iloc[0]]
    assert len(children) == 4
    assert sorted(children["status"]) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]
    assert parents["status"].iloc[0] == "FAILED"  # not every job finished


def test_failed_jobs_are_recorded_and_reported(sweep):
    tmp, proc = sweep
    assert proc.returncode == 1
    df = runs(tmp)
    failed = df[df["status"] == "FAILED"].dropna(subset=["tags.ragexp.config_hash"])
    assert len(failed) == 2
    assert failed["tags.ragexp.error"].str.contains("bad.jsonl:1").all()
    assert "2 failed, 2 finished" in proc.stdout
    failed_lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("FAILED")]
    assert len(failed_lines) == 2
    assert all("bad.jsonl" in ln and "not found" in ln for ln in failed_lines)


def test_jobs_of_overrides_are_named_by_them_on_the_console_and_in_mlflow(sweep):
    """A job of overrides only (no ablation) is printed and named by its overrides, less the
    bookkeeping ones (it was ``[custom]``, with a random MLflow name)."""
    tmp, proc = sweep
    printed = dict(line.split(" ", 2)[1:3] for line in proc.stdout.splitlines()
                   if line.startswith("run "))
    df = runs(tmp)
    finished = df[df["status"] == "FINISHED"].set_index("run_id")
    assert set(printed) == set(finished.index) and len(printed) == 2
    for run_id, rest in printed.items():
        label = rest.split("]", 1)[0].lstrip("[")
        retriever = finished.loc[run_id, "params.retriever.name"]
        assert label.startswith(f"embedder=hash retriever={retriever} reranker=none "
                                f"dataset.questions="), label
        assert "cache_dir" not in label and "progress" not in label
        assert finished.loc[run_id, "tags.mlflow.runName"] == label


def test_finished_runs_have_params_metrics_tags_artifacts(sweep):
    tmp, _ = sweep
    df = runs(tmp)
    done = df[df["status"] == "FINISHED"].dropna(subset=["tags.ragexp.config_hash"])
    assert set(done["params.retriever.name"]) == {"dense", "bm25"}
    row = done[done["params.retriever.name"] == "dense"].iloc[0]
    bm25_only = done[done["params.retriever.name"] == "bm25"].iloc[0]
    assert bm25_only["tags.embedder.backend"].startswith("none")  # nothing embedded
    for p in ("retriever.name", "embedder.name", "embedder.dim", "chunking.max_words",
              "chunking.include_headings", "reranker.name", "abstain.budget", "dataset.name",
              "answer.min_overlap"):
        assert f"params.{p}" in df.columns, p
    kinds = ("identifier", "semantic", "procedural", "factual")
    expected = [m.key for m in DEFAULT]
    assert {"rr_at_10", "ndcg_at_10", "success_at_1", "r_at_100"} <= set(expected)
    expected += [f"{m}.{kind}" for m in expected for kind in kinds]
    expected += ["abstain.auc", "abstain.threshold", "abstain.refused_unanswerable",
                 "abstain.refused_answerable", "abstain.cv.refused_unanswerable",
                 "abstain.cv.refused_answerable", "time.index_s", "time.query_p50_ms",
                 "time.query_p95_ms", "cache.hits", "cache.misses",
                 "answer.rate_answerable", "answer.refused_unanswerable"]
    for m in expected:
        assert pd.notna(row[f"metrics.{m}"]), m
    assert row["tags.embedder.backend"] == "hash"
    assert len(row["tags.corpus_hash"]) == 16 and len(row["tags.golden_hash"]) == 16
    assert row["tags.version.faiss-cpu"]
    client = MlflowClient(tracking_uri=store_uri(tmp))
    names = {a.path for a in client.list_artifacts(row["run_id"])}
    assert {"config.yaml", "per_question.csv", "abstain_curve.json",
            "abstain_curve.svg"} <= names
    pq = pd.read_csv(client.download_artifacts(row["run_id"], "per_question.csv"))
    for col in ("id", "kind", "first_relevant_rank", *(m.key for m in DEFAULT),
                "abstain_signal", "refused"):
        assert col in pq.columns
    answerable = pq[pq["kind"] != "unanswerable"]
    assert answerable["rr_at_10"].mean() == pytest.approx(row["metrics.rr_at_10"])
    refused_una = pq[pq["kind"] == "unanswerable"]["refused"].astype(bool).mean()
    assert refused_una == pytest.approx(row["metrics.abstain.refused_unanswerable"])


def test_rerun_skips_finished_configs_unless_forced(sweep, tmp_path):
    tmp, _ = sweep
    before = len(runs(tmp))
    again = run_app(tmp, "-m", "embedder=hash", "retriever=dense,bm25", "reranker=none",
                    f"hydra.sweep.dir={tmp_path / 'again'}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 skipped" in again.stdout
    df = runs(tmp)
    assert len(df) == before + 1  # only the new parent, linked to the two runs it reused
    new_parent = df[df["tags.ragexp.role"] == "sweep"].sort_values("start_time")["run_id"].iloc[-1]
    assert df[df["run_id"] == new_parent]["tags.ragexp.jobs"].iloc[0] == '{"skipped": 2}'
    from ragexp.decide import compare

    with tracking_store(tmp):
        shown = compare.runs_frame("ragexp-handbook", parent=new_parent)
    assert sorted(shown["params.retriever.name"]) == ["bm25", "dense"]
    forced = run_app(tmp, "embedder=hash", "retriever=bm25", "reranker=none", "force=true",
                     f"hydra.run.dir={tmp_path / 'forced'}")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert len(runs(tmp)) == before + 2


def test_joblib_launcher_with_two_workers_loses_no_run(tmp_path):
    """In a child: joblib's worker processes start from it (``cli_runs.run_app`` runs the
    others in this process)."""
    proc = run_ragexp(tmp_path, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                      "embedder=hash", "retriever=dense,bm25,hybrid", "reranker=none",
                      f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = runs(tmp_path)
    parent = df[df["tags.ragexp.role"] == "sweep"]["run_id"].iloc[0]
    children = df[df["tags.mlflow.parentRunId"] == parent]
    assert sorted(children["params.retriever.name"]) == ["bm25", "dense", "hybrid"]
    assert (children["status"] == "FINISHED").all()


def test_single_run_failure_exits_nonzero_and_marks_run_failed(tmp_path):
    proc = run_app(tmp_path, "embedder=hash", *FAILING, f"hydra.run.dir={tmp_path / 'out'}")
    assert proc.returncode == 2  # a refused input: the model folder does not load
    assert "Traceback" not in proc.stderr + proc.stdout
    df = runs(tmp_path)
    assert list(df["status"]) == ["FAILED"]
    assert "does not load" in df["tags.ragexp.error"].iloc[0]


def test_golden_set_that_does_not_match_the_corpus_fails_the_run(tmp_path):
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "q.jsonl").write_text(
        '{"id": "x-1", "kind": "factual", "question": "Where is the ledger?", "answer": "disk", '
        '"evidence": [{"doc": "overview.md", "quote": "this sentence is not in the handbook"}]}\n')
    proc = run_app(tmp_path, "embedder=hash", f"dataset.questions={golden}",
                   f"hydra.run.dir={tmp_path / 'out'}")
    assert proc.returncode != 0
    df = runs(tmp_path)
    assert list(df["status"]) == ["FAILED"]
    error = df["tags.ragexp.error"].iloc[0]
    assert "GoldenError" in error and "q.jsonl:1" in error and "quote not found" in error
