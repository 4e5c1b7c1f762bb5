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
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragexp.data import shipped
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore, forget_memory
from ragexp.records import ordered
from ragexp.run import build, schema, validation
from ragexp.run.app import CONF_DIR, choose_split
from ragexp.run.pipeline import part_tags
from ragexp.stages.retrievers import DenseRetriever
from ragexp.tracking import store as tracking

schema.register()

DENSE = "{_target_: ragexp.stages.retrievers.DenseRetriever, _partial_: true}"
# the run embeds with hash at dim 64; the part "wide" with the hash option as shipped (dim 512)
WIDE = f"+retriever.parts.wide={{retriever: {DENSE}, depth: 100, embedder: hash}}"
RUN_HASH = ["embedder=hash", "embedder.dim=64"]


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


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


def test_a_part_with_its_own_embedder_fuses_as_the_two_dense_runs_computed_apart(
        chunks, queries, tmp_path):
    forget_memory()
    cfg = _compose("retriever=hybrid", *RUN_HASH, WIDE, "retriever.parts.bm25=null",
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
    view = hybrid.resources["wide"]
    assert view.passage_vectors().shape == (len(chunks), 512)
    assert view.chunks is res.chunks and view.position is res.position
    assert view.stages is res.stages and view.cache is res.cache
    assert part_tags(hybrid) == {"retriever.parts.wide.embedder.identity":
                                 HashEmbedder(dim=512).identity.key}


def test_a_view_keeps_its_vectors_index_and_searches_apart_from_the_runs(chunks, queries):
    """Same stage store, same queries and depth: the part's searches are never served from the
    run's (nor the reverse), and the vectors of each are stored under names of their own."""
    forget_memory()
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
    ((), "f69a5f27d794ab32"),
    (("retriever=hybrid",), "d5cdefd54cd58397"),
    (("+ablation=hybrid_convex",), "f557bc9b7be97db2"),
])
def test_configs_without_a_part_embedder_keep_their_identity(overrides, before):
    """Hashes computed the same way by ragexp at commit 3e3e7b5 (typed parts, before this key
    existed): the handbook default, retriever=hybrid and a shipped hybrid ablation."""
    assert _measured_hash(*overrides) == before


def test_a_part_embedder_changes_the_identity_and_is_recorded_as_a_param():
    cfg = _compose("retriever=hybrid", WIDE)
    params = tracking.flatten(OmegaConf.to_container(cfg, resolve=True))
    assert params["retriever.parts.wide.embedder"] == "hash"
    assert "retriever.parts.dense.embedder" not in params  # left out: not in the identity
    assert _measured_hash("retriever=hybrid", WIDE) != _measured_hash("retriever=hybrid")
