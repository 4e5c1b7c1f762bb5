"""Compose the real Hydra config: every option of every group instantiates (or fails with the
documented message), typos fail at composition, and every named ablation changes what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf.errors import ConfigKeyError, ValidationError
from workspaces import compose_config as cfg_with

from ragexp.config import schema
from ragexp.index.embedders import EmbedderError
from ragexp.index.resources import Resources
from ragexp.run.app import CONF_DIR

schema.register()
GROUPS = ("dataset", "chunking", "embedder", "retriever", "fusion", "reranker", "abstain",
          "answer", "judge")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def test_every_group_has_options_and_a_schema():
    for group in GROUPS:
        assert options(group), group
        for name in options(group):
            text = (Path(CONF_DIR) / group / f"{name}.yaml").read_text()
            assert "_schema" in text, f"{group}/{name}.yaml does not start from a schema"


@pytest.mark.parametrize("name", options("chunking"))
def test_chunking_options_instantiate(name, docs):
    chunker = instantiate(cfg_with(f"chunking={name}").chunking)
    assert chunker.name == name
    assert chunker.chunk(list(docs.values())[:2])


@pytest.mark.parametrize("name", ["hash", "minilm"])
def test_embedder_options_instantiate(name, tmp_path):
    emb = instantiate(cfg_with(f"embedder={name}", f"cache_dir={tmp_path}").embedder)
    vec = emb.embed(["restart the broker"], "query")
    assert vec.shape == (1, emb.identity.dim)
    assert emb.name == name


def test_bge_fails_clearly_offline(tmp_path):
    with pytest.raises(Exception) as info:
        instantiate(cfg_with("embedder=bge", f"cache_dir={tmp_path}").embedder)
    cause = info.value.__cause__ or info.value
    assert isinstance(cause, EmbedderError)
    assert "model_path" in str(cause) and "never substitutes" in str(cause)


@pytest.mark.parametrize("name", options("retriever"))
def test_retriever_options_instantiate(name, chunks, tmp_path):
    from ragexp.data.trec import write_run
    from ragexp.index.embedders import HashEmbedder

    res = Resources(chunks, lambda: HashEmbedder(dim=64), progress=False)
    res.cache.enabled = False
    extra = []
    if name == "trec_run":  # another system's ranking of the same chunks
        run = {"q": {c.chunk_id: 1.0 / (i + 1) for i, c in enumerate(chunks[:8])}}
        extra = [f"retriever.path={write_run(run, tmp_path / 'run.trec')}"]
    retriever = instantiate(cfg_with(f"retriever={name}", *extra).retriever, _partial_=True)(
        resources=res)
    ranking = retriever.search({"q": "ledger disk full"}, 5)
    assert len(ranking["q"]) == 5


def test_retriever_with_every_part_off_raises(chunks):
    from ragexp.index.embedders import HashEmbedder

    cfg = cfg_with("retriever=hybrid", "retriever.parts.dense=null", "retriever.parts.bm25=null")
    res = Resources(chunks, lambda: HashEmbedder(dim=64), progress=False)
    with pytest.raises(ValueError, match="every part switched off"):
        instantiate(cfg.retriever, _partial_=True)(resources=res)


@pytest.mark.parametrize("name", options("fusion"))
def test_fusion_options_instantiate_and_fuse(name, chunks):
    from ragexp.index.embedders import HashEmbedder

    res = Resources(chunks, lambda: HashEmbedder(dim=64), progress=False)
    res.cache.enabled = False
    cfg = cfg_with("retriever=hybrid", f"fusion={name}")
    retriever = instantiate(cfg.retriever, _partial_=True)(resources=res)
    assert retriever.fusion.name == name == instantiate(cfg.fusion).name
    assert sorted(retriever.parts) == ["bm25", "dense"]
    assert len(retriever.search({"q": "ledger disk full"}, 5)["q"]) == 5


@pytest.mark.parametrize("name", ["none", "lexical"])
def test_reranker_options_instantiate(name):
    assert instantiate(cfg_with(f"reranker={name}").reranker).name == name


def test_cross_encoder_without_model_path_says_so():
    with pytest.raises(Exception) as info:
        instantiate(cfg_with("reranker=cross_encoder").reranker)
    assert "reranker.model_path" in str(info.value.__cause__ or info.value)


@pytest.mark.parametrize("name", options("abstain"))
def test_abstain_options_instantiate(name):
    cfg = cfg_with(f"abstain={name}")
    assert instantiate(cfg.abstain.signal).name == name
    assert 0 < cfg.abstain.budget < 1


def test_dataset_options(tmp_path):
    assert instantiate(cfg_with().dataset).queries()
    with pytest.raises(Exception, match="path"):
        instantiate(cfg_with("dataset=beir").dataset)


@pytest.mark.parametrize("override", ["chunking.max_wrds=5", "retriever.rrf=3",
                                      "embedder.dimension=3", "abstain.budjet=0.2"])
def test_misspelt_key_fails_at_composition(override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        cfg_with(override)


def test_wrong_type_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        cfg_with("chunking.max_words=many")


EXPECTED = {
    "default": {},
    "no_reranker": {"reranker.name": "none"},
    "no_headings": {"chunking.include_headings": False},
    "hybrid": {"retriever.name": "hybrid"},
    "bm25": {"retriever.name": "bm25"},
    "hash_dense": {"embedder.name": "hash"},
    "hash_hybrid": {"embedder.name": "hash", "retriever.name": "hybrid"},
    "hnsw_dense": {"embedder.name": "hash", "index.name": "hnsw"},
    "chunks_small": {"chunking.max_words": 60},
    "chunks_large": {"chunking.max_words": 250},
    "abstain_dense": {"abstain.signal.name": "dense"},
    "hybrid_no_reranker": {"retriever.name": "hybrid", "reranker.name": "none"},
    "hybrid_no_reranker_large": {"retriever.name": "hybrid", "reranker.name": "none",
                                 "chunking.max_words": 250, "chunking.overlap_words": 40},
    "chunks_sentences": {"chunking.name": "sentences"},
    "chunks_semantic": {"chunking.name": "semantic"},
    "chunks_parent_child": {"chunking.name": "parent_child"},
    "hybrid_weighted_rrf": {"retriever.name": "hybrid", "reranker.name": "none",
                            "fusion.name": "weighted_rrf", "fusion.weights.bm25": 0.5},
    "hybrid_combsum": {"retriever.name": "hybrid", "reranker.name": "none",
                       "fusion.name": "combsum"},
    "hybrid_combmnz": {"retriever.name": "hybrid", "reranker.name": "none",
                       "fusion.name": "combmnz"},
    "hybrid_convex": {"retriever.name": "hybrid", "reranker.name": "none",
                      "fusion.name": "convex", "fusion.alpha": 0.7},
    "hybrid_dbsf": {"retriever.name": "hybrid", "reranker.name": "none",
                    "fusion.name": "combsum", "fusion.norm": "dbsf"},
}


def test_ablation_set_is_complete():
    assert set(options("ablation")) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ablation_overrides(name):
    from omegaconf import OmegaConf

    base = cfg_with()
    cfg = cfg_with(f"+ablation={name}")
    assert cfg.ablation == name
    for key, value in EXPECTED[name].items():
        assert OmegaConf.select(cfg, key) == value, key
        assert OmegaConf.select(base, key) != value, f"default already has {key}={value}"
    changed = {k for k in ("chunking", "embedder", "index", "retriever", "fusion", "reranker",
                           "abstain")
               if cfg[k] != base[k]}
    assert changed == {k.split(".")[0] for k in EXPECTED[name]}


def test_sweep_level_switches_do_not_change_what_a_run_measures():
    """``sweep_report``, ``reuse_stages``, ``force`` and ``latency_sample`` (with or without the
    key: a run recorded before it existed keeps its hash) change how a sweep runs, not what a
    run measures: the config hash (which ``--skip``, tables and gates match on) ignores them,
    while a measured key changes it."""
    from ragexp.tracking.store import config_hash

    base = {"retriever": {"name": "dense"}, "k": 100, "sweep_report": True,
            "reuse_stages": True, "force": False, "latency_sample": 100}
    data = {"corpus_hash": "c", "golden_hash": "g"}
    same = [config_hash({**base, **change}, data, code="x") for change in
            ({}, {"sweep_report": False}, {"reuse_stages": False}, {"force": True},
             {"latency_sample": 0})]
    same.append(config_hash({k: v for k, v in base.items() if k != "latency_sample"}, data,
                            code="x"))
    assert len(set(same)) == 1
    assert config_hash({**base, "k": 10}, data, code="x") != same[0]


def test_a_sweep_job_s_parent_run_is_no_part_of_its_identity_or_params():
    """A job's ``sweep.parent`` (``run.sweep.jobs_under``) says where it belongs, not what it
    measures: the same job in another sweep, or run alone, has the same ``config_hash`` (so
    ``--skip`` finds it), and no run logs it as a param."""
    from ragexp.tracking.store import config_hash, params

    base = {"retriever": {"name": "dense"}, "k": 100}
    data = {"corpus_hash": "c", "golden_hash": "g"}
    alone = config_hash(base, data, code="x")
    assert config_hash({**base, "sweep": {"parent": "a" * 32}}, data, code="x") == alone
    assert config_hash({**base, "sweep": {"parent": "b" * 32}}, data, code="x") == alone
    assert config_hash({**base, "k": 10, "sweep": {"parent": "a" * 32}}, data,
                       code="x") != alone
    assert params({**base, "sweep": {"parent": "a" * 32}}) == params(base) == {
        "retriever.name": "dense", "k": 100}


def test_the_token_budget_of_batches_does_not_change_what_a_run_measures():
    """``embedder.batch_tokens`` (and the semantic chunker's) changes how texts are batched,
    never their vectors (tests/unit/test_embedders.py): a run with another budget, or recorded
    before the key existed, keeps its hash. ``batch_size`` stays part of it, as it always was,
    so no recorded run's hash changed; the model changes it."""
    from ragexp.tracking.store import config_hash

    def cfg(**embedder):
        return {"embedder": {"model": "minilm-int8", "batch_size": 32, **embedder},
                "chunking": {"name": "semantic", "embedder": {"model": "minilm-int8",
                                                              "batch_size": 32, **embedder}}}

    data = {"corpus_hash": "c", "golden_hash": "g"}
    same = {config_hash(cfg(**e), data, code="x") for e in
            ({}, {"batch_tokens": 1024}, {"batch_tokens": 64}, {"batch_tokens": None})}
    assert len(same) == 1
    assert config_hash(cfg(model="bge"), data, code="x") not in same
    assert config_hash(cfg(batch_size=8), data, code="x") not in same
