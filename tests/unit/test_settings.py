"""A setting is declared once, beside its code: the schemas Hydra composes are generated from the
stage classes (``ragexp.settings``), and they compose exactly what the hand-written schemas
composed. ``tests/fixtures/composed_configs.json.gz`` holds every shipped option and ablation as
composed at commit 14eb929, before any schema was generated (``python -m tools.composed_configs``
wrote it); each is composed again here and compared: resolved values and their types, the run
identity (``config_hash``), the node types OmegaConf gives each key, and each field's ranges,
choices, paths and hints. A stage's endpoint, one ``llm`` node since (``answer.llm.model``, was
``answer.model``), is compared as runs are identified and logged
(``tracking.store.as_recorded``)."""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import json
from pathlib import Path

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from ragexp import settings
from ragexp.answer.llm import Endpoint
from ragexp.stages.retrievers import Part
from ragexp.config import schema
from ragexp.tracking.store import ENDPOINT_STAGES, as_recorded, config_hash
from tools import composed_configs

RECORDED = json.loads(gzip.decompress(
    (Path(__file__).parents[1] / "fixtures" / "composed_configs.json.gz").read_bytes()))


def typed(value):
    """``value`` with each leaf paired with its type's name, so ``60`` and ``60.0`` differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


@pytest.fixture(scope="module")
def composed() -> dict:
    """Every case of ``composed_configs.cases`` composed with today's schemas, by label."""
    from ragexp.data import shipped

    return {label: composed_configs.record(name, overrides) for name, label, overrides in
            composed_configs.cases(Path(shipped.conf_dir()))}


def test_every_option_and_ablation_recorded_is_still_shipped(composed):
    # an option added since the record (index=flat_fp16) has no earlier identity to keep
    assert sorted(RECORDED) == sorted(set(RECORDED) & set(composed))


NEW_GENERATOR_KEYS = ("max_error_rate", "round_trip", "round_trip_k")


def as_before(record: dict) -> dict:
    """A record of today (``composed_configs.record``) in the shape of the record at 14eb929:
    ``resolved`` and ``nodes`` ``as_recorded`` (each stage's ``llm.<key>`` as its own ``<key>``),
    and the hash of that. ``generator.llm.max_error_rate`` is left out: the endpoint's key,
    new to the generator, which does not read it (a questions file is no run; it records
    ``generator.settings()``), as are ``generator.round_trip`` and ``round_trip_k``, the round
    trip's keys, new since (``generate.llm_questions``); the generator's ``_target_`` leads, as
    it did, and its
    endpoint keys' ranges, new to its schema (they were checked only when it was built), are
    left out. ``generator.lam`` of ``known_item`` is 0.0 since #42 (the noise term off by
    default: docs/questions.md), 0.1 at the record: read as it was (a questions config is no
    run's identity; a file records the ``lam`` it was written with). The questions config's
    ``source`` (``generated``, what every file was written with before) is new since #42 too."""
    resolved = as_recorded(record["resolved"])
    if "generator" in resolved and "source" in resolved:
        assert resolved["source"] == "generated"
        resolved = {k: v for k, v in resolved.items() if k != "source"}
    generator = resolved.get("generator")
    if isinstance(generator, dict) and generator.get("_target_", "").endswith("KnownItemGenerator"):
        assert generator["lam"] == 0.0
        resolved = {**resolved, "generator": {**generator, "lam": 0.1}}
    nodes = {}
    for key, node in record["nodes"].items():
        if key == "source" and "generator" in resolved:
            continue
        stage, llm, rest = key.partition(".llm")
        if stage in ENDPOINT_STAGES and llm:
            if rest not in ("", "._target_"):
                nodes[f"{stage}{rest}"] = node
            continue
        nodes[key] = node
    generator = record["resolved"].get("generator")
    if isinstance(generator, dict) and "llm" in generator:
        kept = {k: v for k, v in resolved["generator"].items() if k not in NEW_GENERATOR_KEYS}
        resolved = {**resolved, "generator": {"_target_": kept.pop("_target_"), **kept}}
        for key in NEW_GENERATOR_KEYS:
            nodes.pop(f"generator.{key}")
        for key in generator["llm"]:
            if f"generator.{key}" in nodes:
                nodes[f"generator.{key}"] = {**nodes[f"generator.{key}"], "meta": {}}
    return {"resolved": resolved, "hash": config_hash(resolved, {}, code="fixed"),
            "nodes": nodes}


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_an_option_composes_as_it_did_before_schemas_were_generated(label, composed):
    now, before = as_before(composed[label]), RECORDED[label]
    assert typed(now["resolved"]) == typed(before["resolved"])
    assert json.dumps(now["resolved"]) == json.dumps(before["resolved"])  # key order too
    assert now["hash"] == before["hash"]
    assert now["nodes"] == before["nodes"]


def generated() -> list[type]:
    """Every schema of ``config.schema`` that ``settings.schema`` generated from a stage class."""
    return [t for _, t in inspect.getmembers(schema, inspect.isclass)
            if hasattr(t, "__stage__") and t.__module__ == schema.__name__]


@pytest.mark.parametrize("conf", generated(), ids=lambda t: t.__name__)
def test_a_generated_schema_has_every_setting_of_its_class_with_the_same_metadata(conf):
    stage = conf.__stage__
    own = {f.name: f for f in dataclasses.fields(conf)}
    # bm25: the one group that code builds (build.bm25_params); llm: the block that each stage's
    # llm (LLMCallConf, which builds an Endpoint) defaults to
    if conf not in (schema.BM25Conf, schema.LLMEndpointConf):
        # Hydra builds the class itself (an index option by the path configs always named it by)
        assert get_object(own["_target_"].default) is stage
    keys = [f.name for f in settings.settings(stage)]
    assert [k for k in own if not k.startswith("_")] == keys
    for f in settings.settings(stage):
        expected = {k: v for k, v in f.metadata.items() if k not in settings.SCHEMA_ONLY}
        assert dict(own[f.name].metadata) == expected, f.name
    for key, value in getattr(stage, settings.HYDRA_KEYS, {}).items():
        assert own[key].default == value


def settings_only(value):
    """A config container without its Hydra control keys (``_target_``, ...), recursively."""
    if isinstance(value, dict):
        return {k: settings_only(v) for k, v in value.items() if not k.startswith("_")}
    return value


@pytest.mark.parametrize("conf", generated(), ids=lambda t: t.__name__)
def test_a_generated_schema_holds_the_stage_s_own_defaults(conf):
    plain = settings_only(OmegaConf.to_container(OmegaConf.structured(conf)))
    compared = 0
    for f in settings.settings(conf.__stage__):
        if "interpolate" in f.metadata:
            assert plain[f.name] == f.metadata["interpolate"]
            continue
        if conf is schema.LLMCallConf:  # a stage's endpoint: each key follows the llm block's
            assert plain[f.name] == f"${{llm.{f.name}}}"
            compared += 1
            continue
        if "hint" in f.metadata:  # what to give: required
            assert plain[f.name] == settings.REQUIRED
            continue
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            given = conf.__dataclass_fields__[f.name]
            if given.default_factory is not dataclasses.MISSING:  # the node the config holds
                node = OmegaConf.to_container(OmegaConf.structured(given.default_factory()))
                assert plain[f.name] == settings_only(node), f.name  # (a stage's ``llm``)
                continue
            assert plain[f.name] in (settings.REQUIRED, given.default)
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            default = settings.values(default)
        assert plain[f.name] == default, f.name
        compared += 1
    assert compared or not plain


def test_a_field_is_marked_built_when_the_run_gives_it():
    from ragexp.stages.chunking import MarkdownChunker

    assert "tokenizer" not in {f.name for f in settings.settings(MarkdownChunker)}
    assert "tokenizer" not in {f.name for f in dataclasses.fields(schema.MarkdownChunkingConf)}


def test_config_types_are_what_omegaconf_can_type():
    from typing import Any, Dict, List, Mapping, Optional

    assert settings.config_type(int | None) == Optional[int]
    assert settings.config_type(Mapping[str, float] | None) == Optional[Dict[str, float]]
    assert settings.config_type(list[str]) == List[str]
    assert settings.config_type(type) is Any
    assert settings.config_type(int | str) is Any


# (overrides, stage, its keyword arguments): composition and the stage built directly refuse
# the same value in the same words (one check, declared once beside the stage).
ONE_MESSAGE = [
    (["chunking.max_words=30", "chunking.overlap_words=30"], "chunking.MarkdownChunker",
     {"max_words": 30, "overlap_words": 30}),
    (["chunking.max_tokens=64", "chunking.overlap_tokens=64"], "chunking.MarkdownChunker",
     {"max_tokens": 64, "overlap_tokens": 64}),
    (["chunking.max_words=5", "chunking.overlap_words=0"], "chunking.MarkdownChunker",
     {"max_words": 5, "overlap_words": 0}),
    (["chunking.max_block_words=0"], "chunking.MarkdownChunker", {"max_block_words": 0}),
    (["chunking=sentences", "chunking.sentences=3", "chunking.overlap_sentences=3"],
     "sentence_chunking.SentenceChunker", {"sentences": 3, "overlap_sentences": 3}),
    (["chunking=sentences", "chunking.sentences=0", "chunking.overlap_sentences=0"],
     "sentence_chunking.SentenceChunker", {"sentences": 0, "overlap_sentences": 0}),
    (["chunking=semantic", "chunking.min_words=90", "chunking.max_words=80"],
     "semantic_chunking.SemanticChunker", {"embedder": {}, "min_words": 90, "max_words": 80}),
    (["chunking=semantic", "chunking.breakpoint_percentile=101"],
     "semantic_chunking.SemanticChunker", {"embedder": {}, "breakpoint_percentile": 101.0}),
    (["fusion.k=-1"], "fusion.rank.RRF", {"k": -1.0}),
    (["fusion=weighted_rrf", "fusion.k=-1"], "fusion.rank.WeightedRRF", {"k": -1.0}),
    (["fusion=combsum", "fusion.norm=l2"], "fusion.score.CombSUM", {"norm": "l2"}),
    (["fusion=combmnz", "fusion.norm=l2"], "fusion.score.CombMNZ", {"norm": "l2"}),
    (["fusion=convex", "fusion.alpha=1.5"], "fusion.score.Convex", {"alpha": 1.5}),
    (["reranker.top_n=0"], "rerankers.LexicalReranker", {"top_n": 0}),
    (["reranker.proximity_weight=-1"], "rerankers.LexicalReranker", {"proximity_weight": -1.0}),
    (["abstain.signal.top_k=0"], "abstain.LexicalSignal", {"top_k": 0}),
    (["abstain.signal.alpha=2"], "abstain.LexicalSignal", {"alpha": 2.0}),
    (["abstain=dense", "abstain.signal.top_k=0"], "abstain.DenseSignal", {"top_k": 0}),
    (["answer.n_chunks=0"], "ragexp.answer.extractive.ExtractiveAnswerer", {"n_chunks": 0}),
    (["bm25.b=2"], "ragexp.index.bm25.BM25Params", {"b": 2.0}),
    (["bm25.method=xyz"], "ragexp.index.bm25.BM25Params", {"method": "xyz"}),
    (["bm25.method=bm25l", "bm25.k1=0", "bm25.delta=0"], "ragexp.index.bm25.BM25Params",
     {"method": "bm25l", "k1": 0.0, "delta": 0.0}),
    (["answer.min_overlap=1.5"], "ragexp.answer.extractive.ExtractiveAnswerer",
     {"min_overlap": 1.5}),
    (["retriever=hybrid", "fusion=weighted_rrf", "fusion.weights.bm25=-1"],
     "fusion.rank.WeightedRRF", {"weights": {"bm25": -1.0}}),
    (["retriever=hybrid", "fusion=weighted_rrf", "fusion.weights.bm25=0",
      "fusion.weights.dense=0"], "fusion.rank.rrf",
     {"rankings": {"dense": {}, "bm25": {}}, "weights": {"dense": 0.0, "bm25": 0.0}}),
    (["retriever=hybrid", "retriever.parts.dense=null", "retriever.parts.bm25=null"],
     "retrievers.HybridRetriever", {"resources": None, "fusion": None,
                                    "parts": {"dense": None, "bm25": None}}),
    (["retriever=hybrid", "retriever.parts.bm25.depth=0"], "retrievers.HybridRetriever",
     {"resources": None, "fusion": None, "parts": {"bm25": Part(None, depth=0)}}),
]
# stages below ``stages``, by import path
ONE_MESSAGE_INDEX = [
    (["embedder=hash", "embedder.dim=4"], "ragexp.index.embedders.HashEmbedder", {"dim": 4}),
    (["embedder=minilm", "embedder.batch_size=0"], "ragexp.index.embedders.FastEmbedEmbedder",
     {"batch_size": 0}),
    (["embedder=minilm", "embedder.parallel=0"], "ragexp.index.embedders.FastEmbedEmbedder",
     {"parallel": 0}),
    (["embedder=minilm", "embedder.device=tpu"], "ragexp.index.embedders.FastEmbedEmbedder",
     {"device": "tpu"}),
    (["chunking=none", "chunking.windows=firstp"], "ragexp.stages.chunking.WholeDocumentChunker",
     {"windows": "firstp"}),
    (["answer=llm", "answer.llm.api_key_env=null", "answer.llm.timeout=0"],
     "ragexp.answer.llm.Endpoint",
     {"base_url": "http://x", "model": "m", "timeout": 0.0, "where": "answer.llm"}),
    (["answer=llm", "answer.llm.api_key_env=null", "llm.concurrency=100"],
     "ragexp.answer.llm.Endpoint",
     {"base_url": "http://x", "model": "m", "concurrency": 100, "where": "answer.llm"}),
    (["judge=llm", "judge.llm.api_key_env=null", "judge.max_tokens=0"],
     "ragexp.answer.judge.LLMJudge",
     {"llm": Endpoint("http://x", "m", api_key_env=None), "max_tokens": 0}),
    (["judge=llm", "judge.llm.api_key_env=null", "judge.kappa_floor=2"],
     "ragexp.answer.judge.LLMJudge",
     {"llm": Endpoint("http://x", "m", api_key_env=None), "kappa_floor": 2.0}),
    (["answer=llm", "answer.llm.api_key_env=null", "answer.n_chunks=0"],
     "ragexp.answer.llm_answer.LLMAnswerer",
     {"llm": Endpoint("http://x", "m", api_key_env=None), "n_chunks": 0}),
    (["answer=llm", "answer.llm.api_key_env=null", "answer.min_support=1.5"],
     "ragexp.answer.llm_answer.LLMAnswerer",
     {"llm": Endpoint("http://x", "m", api_key_env=None), "min_support": 1.5}),
    # an endpoint built by Hydra under a stage is checked where the stage places it
    (["answer=llm", "answer.llm.api_key_env=null", "answer.llm.model=' '"],
     "ragexp.answer.llm_answer.LLMAnswerer",
     {"llm": Endpoint("http://x", " ", api_key_env=None)}),
    (["judge=llm", "judge.llm.api_key_env=null", "judge.llm.base_url=''"],
     "ragexp.answer.judge.LLMJudge", {"llm": Endpoint("", "m", api_key_env=None)}),
    (["index=ivf", "index.nlist=8", "index.nprobe=9"], "ragexp.index.ann.IVFSpec",
     {"nlist": 8, "nprobe": 9}),
    (["index=ivf", "index.nlist=4", "index.nprobe=1", "index.train_size=3"],
     "ragexp.index.ann.IVFSpec", {"nlist": 4, "nprobe": 1, "train_size": 3}),
    (["index=ivfpq", "index.nlist=1", "index.nprobe=1", "index.nbits=4", "index.train_size=8"],
     "ragexp.index.ann.IVFPQSpec", {"nlist": 1, "nprobe": 1, "nbits": 4, "train_size": 8}),
    (["index=hnsw", "index.M=1"], "ragexp.index.ann.HNSWSpec", {"M": 1}),
]


@pytest.mark.parametrize("overrides,stage,kwargs", ONE_MESSAGE + ONE_MESSAGE_INDEX,
                         ids=[" ".join(c[0]) for c in ONE_MESSAGE + ONE_MESSAGE_INDEX])
def test_composition_and_the_stage_refuse_a_value_in_the_same_words(overrides, stage, kwargs):
    from workspaces import compose_config

    from ragexp.errors import RagexpError
    from ragexp.config import validation

    with pytest.raises(validation.ConfigRangeError) as composed:
        validation.validate(compose_config("embedder=hash", *overrides))
    with pytest.raises(RagexpError) as built:
        get_object(stage if stage.startswith("ragexp.") else f"ragexp.stages.{stage}")(**kwargs)
    assert str(built.value) in [line.strip() for line in str(composed.value).splitlines()]


def test_convex_fusion_refuses_a_part_count_in_composition_s_words():
    from workspaces import compose_config

    from ragexp.errors import InvalidValue
    from ragexp.config import validation
    from ragexp.stages.fusion.score import Convex

    with pytest.raises(validation.ConfigRangeError) as composed:
        validation.validate(compose_config("embedder=hash", "retriever=hybrid", "fusion=convex",
                                           "retriever.parts.bm25=null"))
    with pytest.raises(InvalidValue) as fused:
        Convex().fuse({"dense": {"q": {"d": 1.0}}})
    assert str(fused.value) in [line.strip() for line in str(composed.value).splitlines()]


def test_a_stage_module_registers_its_own_rules():
    from ragexp.index import embedders
    from ragexp.stages import chunking, rerankers
    from ragexp.stages.fusion import score

    from ragexp.answer import llm
    from ragexp.index.ann import hnsw, ivf, ivfpq
    from ragexp.stages import retrievers
    from ragexp.stages.fusion import rank

    for rule in (chunking.overlap_below_window, chunking.windows_is_a_choice,
                 score.convex_fuses_two_parts, rerankers.cross_encoder_folder,
                 embedders.device_runs_here, ivf.nprobe_within_nlist,
                 ivf.train_size_covers_nlist, ivfpq.train_size_covers_codebooks,
                 hnsw.ef_search_covers_depth, *llm.ENDPOINT_RULES,
                 retrievers.hybrid_has_a_part, rank.weights_name_enabled_parts):
        assert rule in settings.RULES
        assert rule.__module__ != "ragexp.config.validation"


@pytest.mark.parametrize("overrides,chunker,key", [
    (["chunking.max_tokens=128"], "MarkdownChunker", {"max_tokens": 128}),
    (["chunking=none", "chunking.windows=maxp"], "WholeDocumentChunker", {"windows": "maxp"}),
])
def test_a_chunker_sized_in_tokens_refuses_an_embedder_without_them_in_composition_s_words(
        overrides, chunker, key):
    from workspaces import compose_config

    from ragexp.config import validation
    from ragexp.errors import InvalidValue
    from ragexp.stages import chunking

    with pytest.raises(validation.ConfigRangeError) as composed:
        validation.validate(compose_config("embedder=hash", *overrides))
    with pytest.raises(InvalidValue) as built:
        getattr(chunking, chunker)(**key).with_tokenizer(None)
    assert str(built.value) in [line.strip() for line in str(composed.value).splitlines()]


def test_a_rule_for_a_group_reads_only_a_node_that_holds_its_keys():
    seen = []

    def check(node, at):
        seen.append((at, dict(node)))
        return [f"{at}: checked"]

    rule = settings.rule_for("chunking.children", ("max_words",), check)
    try:
        cfg = OmegaConf.create({"chunking": {"children": {"max_words": 40}}})
        assert rule(cfg) == ["chunking.children: checked"]
        assert rule(OmegaConf.create({"chunking": {"children": {"overlap": 1}}})) == []
        assert rule(OmegaConf.create({"chunking": {"children": None}})) == []
        assert rule(OmegaConf.create({"fusion": {}})) == []
        assert seen == [("chunking.children", {"max_words": 40})]
        assert rule.__name__ == "check_of_chunking_children"
    finally:
        settings.RULES.remove(rule)
