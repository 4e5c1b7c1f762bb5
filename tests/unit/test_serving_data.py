"""Serving from what a run recorded: run id prefixes, data located and fingerprinted from the
run's tags whatever the current folder, and an embedding cache that never breaks a request."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from omegaconf import OmegaConf
from workspaces import (
    FAILING,
    RELATIVE,
    compose_config,
    handbook_copy,
    record_failed_run,
    record_run,
)

from ragexp.cli import main as cli
from ragexp.config import schema
from ragexp.data import shipped
from ragexp.index.cache import CacheWriteError, EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.queryvectors import QueryVectors
from ragexp.index.replay import SearchReplay
from ragexp.index.stagestore import StageStore
from ragexp.run.app import run_logged
from ragexp.serving.api import create_app
from ragexp.serving.engine import Engine, ServingError
from ragexp.session import Session
from ragexp.tracking import store as tracking

schema.register()
CORPUS, GOLDEN = Path(shipped.path("handbook/corpus")), Path(shipped.path("handbook/golden"))
BASE = ["embedder=hash", "embedder.dim=64", "retriever=dense", "reranker=none", "progress=false"]


def config(*overrides):
    return compose_config(*BASE, *overrides)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Runs started in ``work/`` with relative data and cache paths, on a copy of the data."""
    tmp = tmp_path_factory.mktemp("serving-data")
    with handbook_copy(tmp) as (work, mp):
        ids = {"dense": record_run(*BASE, *RELATIVE)["run_id"],
               "failed": record_failed_run(*BASE, *RELATIVE, *FAILING)}
        elsewhere = tmp / "elsewhere"
        elsewhere.mkdir()
        mp.chdir(elsewhere)
        yield tmp, work, ids


def test_runs_record_absolute_data_locations(store):
    tmp, work, ids = store
    tags = tracking.client().get_run(ids["dense"]).data.tags
    assert tags["ragexp.path.dataset.corpus_dir"] == str(work / "data" / "corpus")
    assert tags["ragexp.path.cache_dir"] == str(work / "cache")


def test_serving_from_another_folder_uses_the_runs_data_and_cache(store):
    tmp, work, ids = store
    assert Path.cwd() == tmp / "elsewhere" and not Path("data").exists()
    engine = Engine.from_run(ids["dense"][:8])  # a prefix
    assert engine.run_id == ids["dense"]
    assert engine.resources.cache.root == str(work / "cache" / "embeddings")
    n = len(engine.resources.chunks)
    engine.resources.passage_vectors()
    assert (engine.resources.cache.hits, engine.resources.cache.misses) == (n, 0)
    hits = engine.search("What does BD-2110 mean?", 3)
    assert len(hits) == 3 and any("BD-2110" in h.text for h in hits)
    before = sorted(p for p in (work / "cache").rglob("*") if p.is_file())
    for i in range(5):
        engine.answer(f"distinct question number {i} about snapshots")
    after = sorted(p for p in (work / "cache").rglob("*") if p.is_file())
    assert after == before  # query vectors never reach the disk


def test_changed_corpus_is_refused_naming_both_hashes(store):
    tmp, work, ids = store
    recorded = tracking.client().get_run(ids["dense"]).data.tags["corpus_hash"]
    extra = work / "data" / "corpus" / "zz-added.md"
    extra.write_text("# Added later\n\nA document the run never saw.\n")
    try:
        from ragexp.data.datasets import MarkdownDataset

        now = MarkdownDataset(str(work / "data" / "corpus"),
                              str(work / "data" / "golden")).fingerprint()["corpus_hash"]
        assert now != recorded
        with pytest.raises(ServingError) as err:
            Engine.from_run(ids["dense"])
        assert recorded in str(err.value) and now in str(err.value)
    finally:
        extra.unlink()
    assert Engine.from_run(ids["dense"]).run_id == ids["dense"]


def test_run_id_prefixes_unique_ambiguous_and_invalid(store):
    tmp, work, ids = store
    assert tracking.resolve_run_id(ids["dense"][:8]) == ids["dense"]
    assert tracking.resolve_run_id(ids["dense"].upper()) == ids["dense"]
    c = tracking.client()
    exp = tracking.ensure_experiment("scratch")
    made = [c.create_run(exp).info.run_id for _ in range(17)]  # 17 ids, 16 first characters
    first = [r[0] for r in made]
    shared = next(ch for ch in first if first.count(ch) > 1)
    matching = [r for r in [*made, *ids.values()] if r.startswith(shared)]
    with pytest.raises(tracking.RunNotFound, match="ambiguous") as err:
        tracking.resolve_run_id(shared)
    assert all(r in str(err.value) for r in matching)
    with pytest.raises(tracking.RunNotFound, match="no run id starts with"):
        tracking.resolve_run_id("ffffffffffffffffffffffffffffff00")
    with pytest.raises(tracking.RunNotFound, match="hexadecimal"):
        tracking.resolve_run_id("abc' OR '1'='1")
    for r in made:
        c.delete_run(r)


def test_cli_takes_prefixes_and_explains_a_failed_baseline(store, capsys):
    tmp, work, ids = store
    assert cli.main(["compare", "--format", "csv", "--runs", ids["dense"][:8]]) == 0
    assert ids["dense"][:8] in capsys.readouterr().out
    # one line, exit 2 (a refused input), naming the run, its missing table and why
    assert cli.main(["compare", "--runs", ids["dense"][:8], "--baseline",
                     ids["failed"][:8]]) == 2
    msg = capsys.readouterr().err
    assert len(msg.strip().splitlines()) == 1 and msg.startswith("error: ")
    assert ids["failed"] in msg and "per_question.csv" in msg and "FAILED" in msg
    assert "reranker.model_path" in msg  # its ragexp.error tag: why it failed
    assert cli.main(["search", "ledger", "--run", ids["failed"][:10]]) == 2
    assert "FAILED" in capsys.readouterr().err
    assert cli.main(["promote", "0123456789abcdef"]) == 2
    assert "no run id starts with" in capsys.readouterr().err


def test_gate_confirm_and_compare_take_prefixes_everywhere(store, capsys, monkeypatch):
    """Every command that takes a run id takes a unique prefix (gate and confirm once took only
    full ids: gate said the run did not exist, confirm crashed inside MLflow)."""
    import ragexp.run.confirm
    from ragexp.decide import compare

    tmp, work, ids = store
    run = ids["dense"]
    assert cli.main(["gate", run[:8], "--against", run[:9]]) == 0  # itself: no regression
    out = capsys.readouterr().out
    assert f"gate: run {run[:8]}" in out and f"against run {run[:8]}" in out and "PASS" in out
    seen = []

    def fake_confirm(run_id, baseline, *rest):
        seen.append((run_id, baseline))
        raise ragexp.run.confirm.ConfirmError("stop here")

    monkeypatch.setattr(ragexp.run.confirm, "confirm", fake_confirm)
    assert cli.main(["confirm", run[:8], "--baseline", run[:10]]) == 2
    assert seen == [(run, run)]
    # compare --parent lists the parent's experiment, not the default one
    c = tracking.client()
    exp = c.create_experiment("ragexp-beir-elsewhere")
    parent = c.create_run(exp).info.run_id
    asked = []
    monkeypatch.setattr(compare, "runs_frame", lambda experiment, **kw: asked.append(
        (experiment, kw["parent"])) or (_ for _ in ()).throw(SystemExit("stop")))
    with pytest.raises(SystemExit):
        cli.main(["compare", "--parent", parent[:8]])
    assert asked == [("ragexp-beir-elsewhere", parent)]
    with pytest.raises(SystemExit):
        cli.main(["compare", "--parent", parent[:8], "--experiment", "mine"])
    assert asked[-1] == ("mine", parent)


def test_unwritable_cache_degrades_in_serving_and_names_the_path_in_runs(store, tmp_path,
                                                                         caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be\n")
    cfg = config(f"cache_dir={blocker / 'cache'}", f"dataset.corpus_dir={CORPUS}",
                 f"dataset.questions={GOLDEN}")
    with caplog.at_level(logging.WARNING):
        engine = Engine(cfg, threshold=0.0, run_id="local")
        http = TestClient(create_app(engine))
        for i in range(3):
            r = http.post("/answer", json={"question": f"How are snapshots restored? ({i})"})
            assert r.status_code == 200, r.text
        assert http.get("/search", params={"q": "ledger disk full"}).status_code == 200
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    # one warning per store that cannot be written (embeddings, stages), each naming its path,
    # not one per request
    assert sorted(r.name for r in warnings) == ["ragexp.index.cache", "ragexp.index.stagestore"]
    assert all(str(blocker) in r.getMessage() for r in warnings)
    # as a new process would: no stages or rankings kept from the module's earlier runs
    # (with them, this run would have nothing to embed, so nothing to write)
    Session.start()
    with pytest.raises(CacheWriteError, match=str(blocker)):
        run_logged(cfg)


def test_full_disk_is_a_named_error_for_runs_and_one_warning_for_serving(tmp_path, monkeypatch,
                                                                         caplog):
    import errno

    from ragexp.index.packstore import PackedStore

    def full(self, keys, vectors):  # the packed store's only write: appending rows
        raise OSError(errno.ENOSPC, "No space left on device", str(self.folder))

    monkeypatch.setattr(PackedStore, "append", full)
    texts = [f"text {i}" for i in range(10)]
    emb = HashEmbedder(dim=16)
    with pytest.raises(CacheWriteError, match="No space left") as err:
        EmbeddingCache(str(tmp_path / "c")).embed(emb, texts, "passage", progress=False)
    assert str(tmp_path / "c") in str(err.value)
    with caplog.at_level(logging.WARNING):
        cache = EmbeddingCache(str(tmp_path / "w"), on_write_error="warn")
        got = cache.embed(emb, texts, "passage", progress=False)
        again = cache.embed(emb, texts, "passage", progress=False)
    np.testing.assert_allclose(got, emb.embed(texts, "passage"))
    np.testing.assert_allclose(again, got)
    assert sum("cannot be written" in r.getMessage() for r in caplog.records) == 1


def test_query_memory_is_a_bounded_lru():
    seen = []

    class Counting(HashEmbedder):
        def embed(self, texts, mode="passage"):
            seen.extend(texts)
            return super().embed(texts, mode)

    counting = Counting(dim=16)
    vectors = QueryVectors(lambda: counting, EmbeddingCache(enabled=False),
                           SearchReplay(StageStore(enabled=False), share=False), memory=3)
    emb = HashEmbedder(dim=16)
    out = vectors(["a b", "c d", "a b"])
    np.testing.assert_allclose(out, emb.embed(["a b", "c d", "a b"], "query"))
    assert seen == ["a b", "c d"]
    vectors(["e", "f"])  # 4 distinct: "c d" (least recently used) goes
    assert list(vectors.recent) == ["a b", "e", "f"]
    vectors(["c d", "a b"])
    assert seen == ["a b", "c d", "e", "f", "c d"] and len(vectors.recent) == 3


def test_moved_data_is_a_serving_error_naming_the_folder(store):
    tmp, work, ids = store
    corpus = work / "data" / "corpus"
    corpus.rename(work / "data" / "moved")
    try:
        with pytest.raises(ServingError, match="cannot load the data of run") as err:
            Engine.from_run(ids["dense"])
        assert str(corpus) in str(err.value)
    finally:
        (work / "data" / "moved").rename(corpus)


@pytest.mark.parametrize("dropped", [["method"], ["method", "delta"]])
def test_a_config_older_than_a_setting_serving_reads_is_refused_naming_it(dropped):
    """A run recorded before ``bm25.method`` existed: serving it would guess how it ranked."""
    from omegaconf import open_dict

    cfg = config(f"dataset.corpus_dir={CORPUS}", f"dataset.questions={GOLDEN}")
    old = OmegaConf.create(OmegaConf.to_container(cfg))
    with open_dict(old):
        for key in dropped:
            del old.bm25[key]
    with pytest.raises(ServingError) as err:
        Engine(old, threshold=0.0, run_id="0ld")
    message = str(err.value)
    assert "run 0ld" in message and "rerun the experiment" in message
    assert all(f"bm25.{key}" in message for key in dropped)
    assert Engine(cfg, threshold=0.0, run_id="new").resources.bm25.params.method == "lucene"


def test_serving_loads_the_runs_stages_instead_of_rebuilding_them(store):
    """The engine reads chunks, tokens, BM25 and vectors the run stored under cache_dir/stages
    (a new process would find them on disk), and serves exactly what building them serves."""
    tmp, work, ids = store
    engine = Engine.from_run(ids["dense"])
    events = engine.resources.stages.events
    # (tokens are not needed at all when BM25 itself comes from disk)
    assert {events[s] for s in ("chunks", "bm25", "vectors")} == {"disk"}, events
    assert events.get("tokens", "disk") == "disk"
    question = "How long are dead-lettered jobs kept?"
    served = engine.search(question, k=5)
    again = engine.search(question, k=5)  # searches are never shared between requests
    assert engine.resources.stages.events.get("dense_search") is None
    cfg = OmegaConf.merge(engine.cfg, {"reuse_stages": False})
    rebuilt = Engine(cfg, engine.threshold, "rebuilt")
    assert not rebuilt.resources.stages.enabled
    assert [(h.chunk_id, h.score) for h in served] == [(h.chunk_id, h.score) for h in again] \
        == [(h.chunk_id, h.score) for h in rebuilt.search(question, k=5)]
