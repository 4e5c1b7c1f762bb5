"""A sweep's jobs in one process reuse what is keyed by config or content (stages, the parsed
corpus, the map of installed distributions) and measure exactly what fresh jobs measure."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from workspaces import record_run

from ragexp.data import beir
from ragexp.tracking import provenance
from ragexp.session import Session
from ragexp.tracking import store as tracking
from tools import synth

VOLATILE = ("time.", "stage", "cache.")
VARIANTS = [["reranker=none", "fusion.k=20", "abstain.budget=0.1"],
            ["reranker=lexical", "fusion.k=60", "abstain.budget=0.25"],
            ["reranker=lexical", "fusion.k=20", "abstain.budget=0.25"]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = synth.generate(tmp_path_factory.mktemp("reuse"), 800, 60, seed=3)
    with (root / "queries.jsonl").open("a") as fh:  # unanswerable questions: an abstain curve
        for i in range(15):
            fh.write(json.dumps({"_id": f"u{i}", "text": f"zuvepo lorem {i} nothing here",
                                 "metadata": {"kind": "unanswerable"}}) + "\n")
    return root


def _job(folder, cache, overrides):
    out = record_run("dataset=beir", f"dataset.path={folder}", "chunking=none", "embedder=hash",
                     "embedder.dim=32", "retriever=hybrid", f"cache_dir={cache}",
                     "progress=false", "force=true", "experiment=reuse", *overrides)
    assert out["status"] == "FINISHED"
    table = pd.read_csv(tracking.client().download_artifacts(out["run_id"], "per_question.csv"))
    tags = tracking.client().get_run(out["run_id"]).data.tags
    return out, table, tags


def _cold():
    Session.start()  # as a new process: no stage or corpus kept
    provenance._distributions.cache_clear()


@pytest.mark.slow
def test_reused_jobs_measure_what_fresh_jobs_measure(folder, mlflow_store, monkeypatch):
    store = mlflow_store.folder
    parsed = []
    real = beir._records
    monkeypatch.setattr(beir, "_records", lambda path, req, *text: parsed.append(path.name)
                        or real(path, req, *text))
    _cold()
    reused = [_job(folder, store / "shared", v) for v in VARIANTS]
    assert parsed.count("corpus.jsonl") == 1  # the corpus is parsed by the first job only
    for out, _, _ in reused[1:]:
        assert out["stages.built"] == 0 and out["stages.reused"] == 8
        # the latency sample's first stage was searched by the first job and replayed here
        assert out["time.query_replayed"] > 0
    assert reused[0][0]["time.query_replayed"] == 0
    fresh = []
    for i, v in enumerate(VARIANTS):
        _cold()
        fresh.append(_job(folder, store / f"fresh{i}", [*v, "reuse_stages=false"]))
    assert parsed.count("corpus.jsonl") == 1 + len(VARIANTS)
    for f_out, _, _ in fresh:  # reuse off: every stage built, and the run says so
        assert f_out["stages.built"] == 8 and f_out["stages.reused"] == 0
    for (r_out, r_table, r_tags), (f_out, f_table, f_tags) in zip(reused, fresh):
        measured = {k: v for k, v in r_out.items() if not k.startswith(VOLATILE)
                    and k != "run_id"}
        assert "abstain.auc" in measured and "ndcg_at_10" in measured
        assert measured == {k: v for k, v in f_out.items() if not k.startswith(VOLATILE)
                            and k != "run_id"}
        pd.testing.assert_frame_equal(r_table, f_table)
        stage_tags = {k: v for k, v in r_tags.items() if k.startswith("stage.")}
        assert stage_tags and stage_tags == {k: v for k, v in f_tags.items()
                                             if k.startswith("stage.")}
        assert r_tags["corpus_hash"] == f_tags["corpus_hash"]
    # the variants differ, so the comparison above compared something
    assert reused[0][0]["ndcg_at_10"] != reused[1][0]["ndcg_at_10"]


def test_a_corpus_file_with_new_bytes_is_read_again(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n')
    first = beir.read_corpus(path)
    first.pop()  # the caller's list is its own: the kept corpus is not changed
    assert [d.text for d in beir.read_corpus(path)] == ["one", "two"]
    path.write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": "TWO"}\n')
    assert [d.text for d in beir.read_corpus(path)] == ["one", "TWO"]
    path.write_text('{"_id": "a", "text": "one"}\n{"_id": "a", "text": "TWO"}\n')
    with pytest.raises(beir.BeirFormatError, match="_id"):
        beir.read_corpus(path)  # a broken file is reported, never served from memory
