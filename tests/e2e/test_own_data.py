"""Your documents, your questions, your stages: a user's own markdown folder labelled by quote,
section and document with their own kinds, a stage from the user's own module named by
``_target_`` in their config directory, and the run's TREC files read back by trec_eval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ir_measures
import pandas as pd
import pytest
from cli_runs import cli_env
from conftest import jsonl, write_tree
from mlflow.tracking import MlflowClient
from workspaces import migrated_store, search_runs, store_uri

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

DOCS = {
    "guide/install.md": "# Install\n\nOne binary, no runtime.\n\n## Docker\n\n### Compose\n\n"
                        "Run `docker compose up` with the release compose file.\n\n"
                        "### Plain\n\nMount the data volume at /var/lib/quill.\n\n"
                        "## Source\n\nBuild with `make release`.\n",
    "guide/backup.md": "# Backups\n\nSnapshots are taken every night at two.\n\n## Restore\n\n"
                       "Stop the service, copy the snapshot back, start it again.\n",
    "faq.md": "# FAQ\n\n## Pricing\n\nQuill is free for teams of up to five people.\n",
}
QUESTIONS = [
    {"id": "1", "kind": "setup", "question": "How do I run quill with docker?",
     "answer": "docker compose up", "evidence": [{"doc": "guide/install.md", "section": "Docker"}]},
    {"id": "01", "kind": "setup", "question": "How do I build quill from source?",
     "answer": "make release", "evidence": [{"doc": "guide/install.md",
                                              "quote": "Build with `make release`."}]},
    {"id": "007", "kind": "ops", "question": "When are snapshots taken?",
     "answer": "nightly at two", "evidence": [{"doc": "guide/backup.md"}]},
    {"id": "q4", "kind": "ops", "question": "How do I restore a snapshot?",
     "answer": "stop, copy back, start", "evidence": [{"doc": "guide/backup.md",
                                                        "section": "Backups > Restore"}]},
    {"id": "q5", "kind": "unanswerable", "question": "Does quill support single sign-on?"},
    {"id": "q6", "kind": "unanswerable", "question": "Is there a Windows installer?"},
]
USER_STAGE = '''
"""A user's own retriever: ranks chunks by how many query words their heading holds."""
from ragexp.text.analysis import tokenize


class HeadingRetriever:
    def __init__(self, resources, name="heading"):
        self.resources, self.name = resources, name

    def search(self, queries, k, cached=True):
        out = {}
        for qid, text in queries.items():
            terms = set(tokenize(text))
            scored = {c.chunk_id: float(len(terms & set(tokenize(c.heading))))
                      for c in self.resources.chunks}
            out[qid] = dict(sorted(scored.items(), key=lambda kv: -kv[1])[:k])
        return out
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own")
    write_tree(tmp / "docs", DOCS)
    (tmp / "questions.jsonl").write_text(jsonl(QUESTIONS))
    write_tree(tmp / "mystages", {"__init__.py": "", "heading.py": USER_STAGE})
    write_tree(tmp / "conf", {
        "dataset/quill.yaml": "defaults:\n  - markdown_schema\n  - _self_\nname: quill\n"
                              f"corpus_dir: {tmp / 'docs'}\nquestions: {tmp / 'questions.jsonl'}\n",
        "retriever/heading.yaml": "_target_: mystages.heading.HeadingRetriever\nname: heading\n",
    })
    env = {**cli_env(tmp, migrated_store(tmp)),
           "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "ragexp", "--config-dir", str(tmp / "conf"), "-m",
         "dataset=quill", "split=all", "embedder=hash", "retriever=bm25,heading", "reranker=none",
         f"cache_dir={tmp / 'cache'}", "progress=false", f"hydra.sweep.dir={tmp / 'multirun'}"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    df = search_runs(store_uri(tmp), experiment_names=["ragexp-quill"])
    return tmp, df[df["tags.ragexp.role"] != "sweep"], MlflowClient(store_uri(tmp))


def test_own_kinds_and_a_user_stage_run_in_a_sweep(project):
    tmp, df, _ = project
    assert sorted(df["params.retriever.name"]) == ["bm25", "heading"]
    assert (df["status"] == "FINISHED").all()
    user = df[df["params.retriever.name"] == "heading"].iloc[0]
    assert user["tags.stage.retriever.target"] == "mystages.heading.HeadingRetriever"
    assert user["tags.stage.retriever.version"].startswith("file:")  # not an installed package
    assert df["tags.stage.retriever.version"].str.startswith("ragexp==").any()
    for kind in ("setup", "ops"):
        assert pd.notna(user[f"metrics.ndcg_at_10.{kind}"])
    assert not any(c.endswith((".factual", ".semantic")) for c in df.columns)


def test_trec_files_score_as_the_logged_metrics_and_ids_stay_strings(project):
    tmp, df, client = project
    for _, row in df.iterrows():
        qrels = list(ir_measures.read_trec_qrels(
            client.download_artifacts(row["run_id"], "qrels.trec")))
        run = list(ir_measures.read_trec_run(client.download_artifacts(row["run_id"], "run.trec")))
        assert {q.query_id for q in qrels} == {"1", "01", "007", "q4"}
        agg = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, run)
        assert agg[ir_measures.nDCG @ 10] == pytest.approx(row["metrics.ndcg_at_10"])


def test_run_records_its_dataset_input(project):
    _, df, client = project
    run = client.get_run(df["run_id"].iloc[0])
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == "quill"
    profile = json.loads(inp.dataset.profile)
    assert profile["num_questions"] == 6
    assert profile["kinds"] == {"setup": 2, "ops": 2, "unanswerable": 2}
    assert profile["corpus_hash"] == run.data.tags["corpus_hash"]


def test_section_and_document_labels_judge_the_right_chunks(project):
    tmp, df, client = project
    row = df[df["params.retriever.name"] == "bm25"].iloc[0]
    qrels = {}
    for q in ir_measures.read_trec_qrels(client.download_artifacts(row["run_id"], "qrels.trec")):
        qrels.setdefault(q.query_id, set()).add(q.doc_id)
    assert qrels["1"] == {"guide/install.md#1", "guide/install.md#2"}  # Compose and Plain
    assert qrels["007"] == {"guide/backup.md#0", "guide/backup.md#1"}  # the whole document
    assert qrels["q4"] == {"guide/backup.md#1"}
