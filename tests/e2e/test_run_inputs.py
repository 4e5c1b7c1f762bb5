"""The files a config names beside its dataset are part of the run's identity (``run.inputs``):
editing a TREC run, precomputed vectors, a model folder or judge labels and running the same
command again measures again instead of reusing the old run's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runs import run_app
from conftest import jsonl, write_tree

from ragexp.config import schema
from ragexp.config.compose import compose
from ragexp.run import inputs

BEIR = {
    "corpus.jsonl": jsonl([{"_id": i, "text": t} for i, t in
                           [("a", "the red fruit apple"), ("x", "yellow banana"),
                            ("y", "green kiwi")]]),
    "queries.jsonl": jsonl([{"_id": "q1", "text": "red apple"},
                            {"_id": "q2", "text": "green kiwi"}]),
    "qrels/test.tsv": "q1\ta\t1\nq2\ty\t1\n",
}
RUN = "q1 Q0 a 1 3.0 x\nq1 Q0 x 2 2.0 x\nq2 Q0 y 1 1.0 x\nq2 Q0 x 2 -1.0 x\n"


def _cfg(*overrides):
    schema.register()
    return compose("config", ["embedder=hash", *overrides])


def test_the_shipped_defaults_name_no_input_so_their_identity_is_unchanged():
    assert inputs.hashes(_cfg()) == {}
    assert inputs.hashes(_cfg("+ablation=hybrid")) == {}


def test_a_trec_run_file_is_hashed_by_content(tmp_path):
    run = tmp_path / "run.trec"
    run.write_text(RUN)
    cfg = _cfg("retriever=trec_run", f"retriever.path={run}")
    first = inputs.hashes(cfg)
    assert list(first) == ["input:retriever.path"]
    run.write_text(RUN.replace("-1.0", "9.0"))  # same size class, other bytes
    assert inputs.hashes(cfg) != first
    run.write_text(RUN)
    assert inputs.hashes(cfg) == first  # content, not the modification time


def test_a_hybrid_part_and_a_precomputed_folder_are_found(tmp_path):
    run = tmp_path / "run.trec"
    run.write_text(RUN)
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    np.save(vectors / "passages.npy", np.eye(3, dtype=np.float32))
    (vectors / "passages.txt").write_text("a\nx\ny\n")
    part = ("+retriever.parts.external={_target_: ragexp.stages.retrievers.Part, retriever: "
            f"{{_target_: ragexp.stages.external.TrecRunRetriever, _partial_: true, path: {run}}}"
            ", depth: 10}")
    cfg = _cfg("retriever=hybrid", part, "embedder=precomputed", f"embedder.path={vectors}")
    first = inputs.hashes(cfg)
    assert set(first) == {"input:retriever.parts.external.retriever.path", "input:embedder.path"}
    np.save(vectors / "passages.npy", np.eye(3, dtype=np.float32)[::-1])
    second = inputs.hashes(cfg)
    assert second["input:embedder.path"] != first["input:embedder.path"]
    assert second["input:retriever.parts.external.retriever.path"] == \
        first["input:retriever.parts.external.retriever.path"]
    (vectors / ".lock").write_text("")  # hidden files are not inputs
    assert inputs.hashes(cfg) == second


def test_a_large_file_counts_by_size_and_modification_time(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "HASHED_MAX", 10)
    run = tmp_path / "run.trec"
    run.write_text(RUN)
    st = run.stat()
    digest = inputs._digest(run)
    assert digest == f"size={st.st_size},mtime_ns={st.st_mtime_ns}"


def test_a_missing_path_has_a_digest_the_run_then_refuses(tmp_path):
    cfg = _cfg("retriever=trec_run", f"retriever.path={tmp_path / 'nope.trec'}")
    assert len(inputs.hashes(cfg)["input:retriever.path"]) == 16


@pytest.mark.slow
def test_an_edited_trec_run_is_measured_again_not_skipped(tmp_path):
    # It printed "skipping: identical config, data and code already finished" and kept
    # RR@10 1.000 after q2's run was edited to rank x above y (0.750).
    work = write_tree(tmp_path / "w", {**{f"b/{k}": v for k, v in BEIR.items()},
                                      "run.trec": RUN})
    args = ["dataset=beir", "dataset.path=b", "chunking=none", "embedder=hash", "reranker=none",
            "retriever=trec_run", "retriever.path=run.trec", "measures=[RR@10]",
            "objective=RR@10", "progress=false", "cache_dir=cache"]

    def run() -> str:  # each in a session of its own, as a new process
        done = run_app(tmp_path, *args, cwd=work)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    assert "rr_at_10=1.000" in run()
    assert "skipping: identical config" in run()
    (work / "run.trec").write_text(RUN.replace("q2 Q0 x 2 -1.0", "q2 Q0 x 2 9.0"))
    again = run()
    assert "skipping" not in again and "rr_at_10=0.750" in again
