"""A hybrid part with an embedder of its own (``retriever.parts.<name>.embedder``): a dense
retriever over a second embedder's vectors of the run's chunks, fused beside the run's own.

The fused ranking is checked against the two single-embedder dense runs computed apart and
fused by the RRF formula written out here; the part's vectors and searches are checked to be
its own (stage names, dimensions) and to go through the run's embedding cache; composition
refuses an unknown or precomputed embedder naming the key; configs that do not use the key
keep the identity (config hash) they had before parts became plain mappings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runs import run_app
from conftest import jsonl, write_tree
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from workspaces import compose_config as _compose
from workspaces import record_run, store_uri

from ragexp.cli import main as cli
from ragexp.config import build, schema, validation
from ragexp.data import shipped
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore
from ragexp.records import ordered
from ragexp.run.app import choose_split
from ragexp.run.pipeline import part_tags
from ragexp.serving.engine import Engine
from ragexp.stages.retrievers import DenseRetriever
from ragexp.tracking import store as tracking

schema.register()

DENSE = "{_target_: ragexp.stages.retrievers.DenseRetriever, _partial_: true}"
# the run embeds with hash at dim 64; the part "wide" with the hash option as shipped (dim 512)
WIDE = f"+retriever.parts.wide={{retriever: {DENSE}, depth: 100, embedder: hash}}"
SHORT = "+retriever.parts.wide={retriever: dense, embedder: hash}"  # options by name
RUN_HASH = ["embedder=hash", "embedder.dim=64"]


def _resources(chunks, factory, cache=None, store=None) -> Resources:
    return Resources(chunks, factory, cache or EmbeddingCache(enabled=False), progress=False,
                     stages=store or StageStore(root=None, enabled=True))


def _rrf_by_hand(rankings: list[dict], k: float = 60.0) -> dict:
    """Cormack et al. (2009): ``sum_p 1 / (k + rank_p(d))``, ranks from 1, best first."""
    out: dict = {}
    for ranking in rankings:
        for q, scores in ranking.items():
            for rank, item in enumerate(ordered(scores), start=1):
                out.setdefault(q, {})[item] = out.get(q, {}).get(item, 0.0) + 1.0 / (k + rank)
    return out


@pytest.fixture
def queries(golden):
    return {q.qid: q.text for q in golden[:12]}


@pytest.mark.parametrize("part", [WIDE, SHORT])
def test_a_part_with_its_own_embedder_fuses_as_the_two_dense_runs_computed_apart(
        chunks, queries, tmp_path, part):
    cfg = _compose("retriever=hybrid", *RUN_HASH, part, "retriever.parts.bm25=null",
                   f"cache_dir={tmp_path}")
    validation.validate(cfg)
    built = build.build(cfg)
    res = _resources(chunks, built.make_embedder)
    hybrid = built.make_retriever(res)
    got = hybrid.search(queries, 10)

    narrow = DenseRetriever(_resources(chunks, lambda: HashEmbedder(dim=64))).search(queries, 100)
    wide = DenseRetriever(_resources(chunks, lambda: HashEmbedder(dim=512))).search(queries, 100)
    expected = _rrf_by_hand([narrow, wide])
    assert set(got) == set(queries)
    for q in queries:
        want = ordered(expected[q])[:10]
        assert ordered(got[q]) == want, q
        assert [got[q][i] for i in want] == pytest.approx([expected[q][i] for i in want])
    assert any(ordered(narrow[q])[:10] != ordered(wide[q])[:10] for q in queries)  # 2 rankings
    # each part searched its own vectors: the run's at dim 64, the part's at dim 512
    assert res.passage_vectors().shape == (len(chunks), 64)
    view = hybrid.views["wide"]
    assert view.passage_vectors().shape == (len(chunks), 512)
    assert view.chunks is res.chunks and view.position is res.position
    assert view.stages is res.stages and view.cache is res.cache
    assert part_tags(hybrid) == {"retriever.parts.wide.embedder.identity":
                                 HashEmbedder(dim=512).identity.key}


def test_a_view_keeps_its_vectors_index_and_searches_apart_from_the_runs(chunks, queries):
    """Same stage store, same queries and depth: the part's searches are never served from the
    run's (nor the reverse), and the vectors of each are stored under names of their own."""
    res = _resources(chunks, lambda: HashEmbedder(dim=64))
    view = res.with_embedder(lambda: HashEmbedder(dim=512))
    run, part = DenseRetriever(res), DenseRetriever(view)
    first, second = run.search(queries, 20), part.search(queries, 20)
    assert any(ordered(first[q]) != ordered(second[q]) for q in queries)
    assert run.search(queries, 20) == first and part.search(queries, 20) == second
    assert res.stages.events["dense_search"] == "memory"
    assert res.stages.events[part.stage] == "memory"
    own = view.dense_stage("vectors")
    assert own.startswith("vectors_") and len(own) == len("vectors_") + 8
    assert {"vectors", own, "dense_index", view.dense_stage("dense_index")} <= set(
        res.stages.events)
    # query and passage vectors of the part come from its one embedder
    assert view.query_vectors(list(queries.values())).shape[1] == 512
    np.testing.assert_array_equal(
        view.query_vectors(["ledger disk full"]),
        HashEmbedder(dim=512).embed(["ledger disk full"], "query"))
    assert res.query_vectors(["ledger disk full"]).shape == (1, 64)


def test_a_later_run_with_the_parts_embedder_reuses_its_cached_vectors(chunks, tmp_path):
    """The part's passage vectors go through the run's embedding cache: a run with
    ``embedder=`` that option embeds nothing."""
    cache = EmbeddingCache(root=str(tmp_path / "embeddings"))
    res = _resources(chunks, lambda: HashEmbedder(dim=64), cache,
                     StageStore(root=None, enabled=False))
    res.with_embedder(lambda: HashEmbedder(dim=512)).passage_vectors()
    assert cache.misses == len(chunks)
    later = EmbeddingCache(root=str(tmp_path / "embeddings"))
    vectors = _resources(chunks, lambda: HashEmbedder(dim=512), later,
                         StageStore(root=None, enabled=False)).passage_vectors()
    assert later.misses == 0 and later.hits == len(chunks)
    np.testing.assert_array_equal(vectors, HashEmbedder(dim=512).embed(
        [c.text for c in chunks], "passage"))


@pytest.mark.parametrize("embedder, message", [
    ("minilmx", "retriever.parts.wide.embedder=minilmx: no embedder option of that name"),
    ("precomputed", "retriever.parts.wide.embedder=precomputed is itself precomputed"),
])
def test_an_unknown_or_precomputed_part_embedder_is_refused_at_composition(embedder, message):
    cfg = _compose("retriever=hybrid", *RUN_HASH,
                   f"+retriever.parts.wide={{retriever: {DENSE}, embedder: {embedder}}}")
    with pytest.raises(validation.ConfigRangeError) as err:
        validation.validate(cfg)
    assert message in str(err.value)
    assert str(err.value).count("\n") == 1  # one problem, one line


@pytest.mark.parametrize("part, message", [
    ("{retriever: sparse}", "retriever.parts.wide.retriever=sparse: no retriever option"),
    ("{retriever: hybrid}", "retriever.parts.wide.retriever=hybrid: a part cannot itself be"),
    (f"{{retriever: {DENSE}, embeder: hash}}", "retriever.parts.wide: Key 'embeder' not in"),
    (f"{{retriever: {DENSE}, depth: 0}}", "retriever.parts.wide.depth=0 is out of range"),
    ("{depth: 100}", "retriever.parts.wide.retriever is required"),
])
def test_a_command_line_part_is_checked_against_the_part_schema(part, message):
    cfg = _compose("retriever=hybrid", *RUN_HASH, f"+retriever.parts.wide={part}")
    with pytest.raises(validation.ConfigRangeError, match="invalid config") as err:
        validation.validate(cfg)
    assert message in str(err.value)


def _measured_hash(*overrides: str) -> str:
    """``tracking.config_hash`` of a composed config with the checkout's folder written as
    ``ROOT`` (shipped paths are absolute) and a fixed code identity."""
    cfg = _compose(*overrides)
    choose_split(cfg)
    root = str(Path(shipped.conf_dir()).parent)
    resolved = json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True)).replace(
        root, "ROOT"))
    return tracking.config_hash(resolved, {"corpus_hash": "c", "golden_hash": "g"},
                                code="fixed")


@pytest.mark.parametrize("overrides, before", [
    (("retriever=hybrid",), "d5cdefd54cd58397"),
    (("+ablation=hybrid_convex",), "f557bc9b7be97db2"),
])
def test_configs_without_a_part_embedder_keep_their_identity(overrides, before):
    """Hashes computed the same way by ragexp at commit 3e3e7b5 (typed parts, before this key
    existed): retriever=hybrid and a shipped hybrid ablation. (The handbook default, dense,
    changed since: the fusion group no longer counts for a run without hybrid parts.)"""
    assert _measured_hash(*overrides) == before


@pytest.mark.slow
def test_a_run_without_hybrid_parts_is_the_same_run_under_any_fusion():
    """A sweep over retriever x fusion measures a dense or BM25 run once, not once per fusion
    (a trial's sweep re-ran them and Holm's family counted each again)."""
    assert _measured_hash() == _measured_hash("fusion=convex", "fusion.alpha=0.9") \
        == _measured_hash("fusion=weighted_rrf")
    assert _measured_hash("retriever=bm25") == _measured_hash("retriever=bm25", "fusion=combsum")
    assert _measured_hash("retriever=bm25") != _measured_hash()
    assert _measured_hash("retriever=hybrid") != _measured_hash("retriever=hybrid",
                                                                "fusion=convex")


def test_a_part_embedder_changes_the_identity_and_is_recorded_as_a_param():
    cfg = _compose("retriever=hybrid", WIDE)
    params = tracking.flatten(OmegaConf.to_container(cfg, resolve=True))
    assert params["retriever.parts.wide.embedder"] == "hash"
    assert "retriever.parts.dense.embedder" not in params  # left out: not in the identity
    assert _measured_hash("retriever=hybrid", WIDE) != _measured_hash("retriever=hybrid")


@pytest.mark.slow
def test_a_recorded_run_with_a_part_embedder_logs_it_and_serves_it(
        mlflow_store, chunks, capsys):
    """``ragexp search`` on the run rebuilds the part's embedder from the logged config: the
    served ranking is RRF of the two single-embedder dense runs computed apart."""
    out = record_run(*RUN_HASH, "retriever=hybrid", SHORT, "retriever.parts.bm25=null",
                     "reranker=none", f"cache_dir={mlflow_store.folder / 'cache'}",
                     "progress=false")
    run = tracking.client().get_run(out["run_id"])
    assert run.data.params["retriever.parts.wide.embedder"] == "hash"
    assert run.data.params["retriever.parts.wide.retriever"] == "dense"
    assert run.data.tags["retriever.parts.wide.embedder.identity"] == \
        HashEmbedder(dim=512).identity.key
    assert run.data.tags["embedder.model"] == HashEmbedder(dim=64).identity.model
    assert run.data.metrics["stage.vectors.built"] == 1.0
    assert any(k.startswith("stage.vectors_") for k in run.data.metrics)

    question = "ledger disk full"
    engine = Engine.from_run(out["run_id"])
    hits = engine.search(question, 5)
    by_hand = _rrf_by_hand([
        DenseRetriever(_resources(chunks, lambda: HashEmbedder(dim=d))).search({"q": question},
                                                                               100)
        for d in (64, 512)])["q"]
    assert [h.chunk_id for h in hits] == ordered(by_hand)[:5]
    capsys.readouterr()  # the run's own summary line
    assert cli.main(["search", question, "-k", "2", "--run", out["run_id"]]) == 0
    assert hits[0].chunk_id in capsys.readouterr().out.splitlines()[0]


@pytest.mark.slow
def test_a_beir_folder_run_fuses_a_part_with_its_own_embedder(mlflow_store, tmp_path):
    corpus = [{"_id": "zebra", "title": "Zebras", "text": "Zebras cross the Mara river in "
               "herds of thousands every year."},
              *({"_id": f"f{i}", "title": "", "text": f"Filler {i} about tides and penguins."}
                for i in range(8))]
    root = write_tree(tmp_path / "beir", {
        "corpus.jsonl": jsonl(corpus),
        "queries.jsonl": jsonl([{"_id": "q", "text": "zebra river crossing"}]),
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq\tzebra\t1\n"})
    out = record_run(*RUN_HASH, "dataset=beir", f"dataset.path={root}", "retriever=hybrid",
                     SHORT, "reranker=none", f"cache_dir={tmp_path / 'cache'}", "progress=false")
    assert out["status"] == "FINISHED" and out["rr_at_10"] == 1.0
    tags = tracking.client().get_run(out["run_id"]).data.tags
    assert tags["retriever.parts.wide.embedder.identity"] == HashEmbedder(dim=512).identity.key


@pytest.mark.slow
def test_minilm_as_a_second_embedder_on_the_handbook_from_the_command_line(tmp_path, minilm):
    """``python -m ragexp retriever=hybrid embedder=hash +retriever.parts.minilm=...``: the
    part runs the packaged MiniLM beside hash and BM25, its identity is logged, and a later
    ``embedder=minilm`` run on the same cache embeds nothing. An unknown part embedder is one
    line, exit 2, nothing run."""
    part = "+retriever.parts.minilm={retriever: dense, depth: 100, embedder: minilm}"
    first = run_app(tmp_path, "retriever=hybrid", "embedder=hash", part)
    assert first.returncode == 0, first.stderr[-2000:]
    later = run_app(tmp_path, "retriever=dense", "embedder=minilm", "reranker=none")
    assert later.returncode == 0, later.stderr[-2000:]
    client = MlflowClient(store_uri(tmp_path))
    exp = client.get_experiment_by_name("ragexp-handbook")
    hybrid, dense = sorted(client.search_runs([exp.experiment_id]),
                           key=lambda r: r.info.start_time)
    assert hybrid.data.tags["retriever.parts.minilm.embedder.identity"] == minilm.identity.key
    assert hybrid.data.tags["embedder.backend"] == "hash"
    assert dense.data.tags["embedder.model"] == minilm.identity.model
    assert dense.data.metrics["cache.misses"] == 0 and dense.data.metrics["cache.hits"] > 0
    assert hybrid.data.metrics["ndcg_at_10"] != dense.data.metrics["ndcg_at_10"]

    bad = run_app(tmp_path, "retriever=hybrid", "embedder=hash", part.replace(
        "embedder: minilm", "embedder: minilmx"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "retriever.parts.minilm.embedder=minilmx: no embedder option" in bad.stderr
    assert len(client.search_runs([exp.experiment_id])) == 2
