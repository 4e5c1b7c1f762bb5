"""Compose-time range validation: every schema field that declares a range is checked (the test
finds them from the schema itself, so a new ranged field is covered with no edit here), the
issue's examples fail before anything is created, and cross-field rules plug in."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path

import pytest
from cli_runs import run_app
from omegaconf import DictConfig, OmegaConf
from workspaces import compose_config as cfg_with

from ragexp import settings
from ragexp.config import schema, validation
from ragexp.index import embedders
from ragexp.run.app import CONF_DIR

schema.register()


def schema_types() -> list[type]:
    return [obj for _, obj in inspect.getmembers(schema, inspect.isclass)
            if dataclasses.is_dataclass(obj) and obj.__module__ == schema.__name__]


@functools.lru_cache(maxsize=1)
def where_each_schema_is_used() -> dict[type, tuple[str, list[str], str]]:
    """schema type -> (config, overrides that select it, its key path), from composing every
    option of every config group, and ``ragexp questions``' config with every generator."""
    found: dict[type, tuple[str, list[str], str]] = {}

    def walk(node: DictConfig, path: str, overrides: list[str], config: str = "config") -> None:
        found.setdefault(OmegaConf.get_type(node), (config, overrides, path))
        for key in node:
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_missing():
                walk(child, f"{path}{key}.", overrides, config)

    walk(cfg_with(), "", [])
    for option in sorted(p.stem for p in (Path(CONF_DIR) / "generator").glob("*.yaml")):
        walk(cfg_with(f"generator={option}", config="questions"), "", [f"generator={option}"],
             "questions")
    for group in ("dataset", "chunking", "embedder", "index", "retriever", "fusion", "reranker",
                  "abstain", "answer", "judge"):
        for option in sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml")):
            overrides = [f"{group}={option}"]
            if group == "dataset" and option == "beir":
                overrides.append("dataset.path=/nonexistent")
            walk(cfg_with(*overrides)[group], f"{group}.", overrides)
    # hybrid parts are plain mappings (a command line may add one), typed by
    # ``validation.parts_are_typed`` against HybridPartConf when the config is checked
    found.setdefault(schema.HybridPartConf, ("config", ["retriever=hybrid"],
                                             "retriever.parts.dense."))
    return found


def outside(bounds: dict, value_type) -> object:
    """A value just outside the first bound (integers for int fields)."""
    kind, bound = next(iter(bounds.items()))
    step = 1 if value_type is int else 0.5
    return {"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[kind]


RANGED = [(t, name, bounds) for t in schema_types()
          for name, bounds in validation.ranged_fields(t)]


def test_the_schema_declares_ranges_for_the_issue_examples():
    names = {(t.__name__, n) for t, n, _ in RANGED}
    assert {("Config", "k"), ("BM25Conf", "k1"), ("BM25Conf", "b"),
            ("LexicalAbstainConf", "budget"), ("RRFConf", "k"),
            ("MarkdownChunkingConf", "max_words")} <= names
    assert len(RANGED) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("schema_type,name,bounds", RANGED,
                         ids=[f"{t.__name__}.{n}" for t, n, _ in RANGED])
def test_every_ranged_field_rejects_an_out_of_range_value(schema_type, name, bounds):
    used = where_each_schema_is_used()
    users = [t for t in used if t is schema_type] or \
        [t for t in used if isinstance(t, type) and issubclass(t, schema_type)]
    assert users, f"{schema_type.__name__} is used by no config option"
    config, overrides, path = used[users[0]]
    field_type = {f.name: f.type for f in dataclasses.fields(schema_type)}[name]
    value = outside(bounds, int if "int" in str(field_type) else float)
    cfg = cfg_with(*overrides, f"{path}{name}={value}", config=config)
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg)
    message = str(info.value)
    key = f"{path}{name}"
    assert f"{key}={value}" in message or f"{key}={float(value)}" in message
    assert settings.describe(bounds) in message
    # the bound itself is inside the range: this key is not reported
    bound = next(iter(bounds.values()))
    if next(iter(bounds)) in ("ge", "le"):
        at_bound = cfg_with(*overrides, f"{path}{name}={bound}", config=config)
        assert not [p for p in validation.check_fields(at_bound) if p.startswith(f"{key}=")]


@pytest.mark.slow
def test_the_shipped_configs_and_ablations_are_valid():
    validation.validate(cfg_with())
    for ablation in sorted(p.stem for p in (Path(CONF_DIR) / "ablation").glob("*.yaml")):
        validation.validate(cfg_with(f"+ablation={ablation}"))


@pytest.mark.parametrize("override,message", [
    ("k=0", "k=0 is out of range: must be >= 1"),
    ("k=-1", "k=-1 is out of range: must be >= 1"),
    ("bm25.k1=-0.5", "bm25.k1=-0.5 is out of range: must be >= 0"),
    ("bm25.b=-0.1", "bm25.b=-0.1 is out of range: must be [0, 1]"),
    ("abstain.budget=2", "abstain.budget=2.0 is out of range: must be [0, 1)"),
    ("chunking.max_words=0", "chunking.max_words=0 is out of range: must be >= 10"),
])
def test_issue_examples_are_refused_at_composition(override, message):
    with pytest.raises(validation.ConfigRangeError, match=message.replace("[", r"\[")
                       .replace("]", r"\]").replace(".", r"\.").replace("+", r"\+")
                       .replace("(", r"\(").replace(")", r"\)")):
        validation.validate(cfg_with(override))


def test_section_units_over_whole_documents_are_refused_naming_both_keys():
    """Whole-document chunks give one section per document: scored as sections, they would be
    document scores under another name."""
    with pytest.raises(validation.ConfigRangeError, match=r"dataset.unit=section scores heading "
                       r"sections, but chunking=none keeps each document whole"):
        validation.validate(cfg_with("dataset.unit=section", "chunking=none"))
    for ok in (("dataset.unit=section",), ("dataset.unit=document", "chunking=none")):
        validation.validate(cfg_with(*ok))


def test_rrf_k_negative_is_refused():
    with pytest.raises(validation.ConfigRangeError, match=r"fusion\.k=-5\.0 .* >= 0"):
        validation.validate(cfg_with("retriever=hybrid", "fusion.k=-5"))


def test_every_violation_is_listed_and_the_job_is_named():
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg_with("k=0", "abstain.budget=-1"), where="job #3: k=0")
    text = str(info.value)
    assert text.startswith("invalid config (job #3: k=0):")
    assert "k=0 is out of range" in text and "abstain.budget=-1.0 is out of range" in text


def test_cross_field_rules_plug_in(monkeypatch):
    monkeypatch.setattr(settings, "RULES", list(settings.RULES))

    @settings.cross_field_rule
    def k_covers_ten_rerank_heads(cfg):
        return [f"k={cfg.k} is below 10 x reranker.top_n={cfg.reranker.top_n}"] \
            if cfg.k < 10 * cfg.reranker.top_n else []

    validation.validate(cfg_with("k=200"))
    with pytest.raises(validation.ConfigRangeError, match="k=100 is below 10 x reranker.top_n=20"):
        validation.validate(cfg_with("k=100"))
    with pytest.raises(validation.ConfigRangeError,
                       match=r"overlap_words=30 is out of range: must be < chunking\.max_words"):
        validation.validate(cfg_with("k=200", "chunking.max_words=30",
                                     "chunking.overlap_words=30"))


def test_measure_depth_is_a_cross_field_rule():
    with pytest.raises(validation.ConfigRangeError, match="k=5 is below the deepest measure"):
        validation.validate(cfg_with("k=5"))


def test_describe_reads_as_an_interval():
    assert settings.describe({"ge": 0, "le": 1}) == "[0, 1]"
    assert settings.describe({"gt": 0, "lt": 1}) == "(0, 1)"
    assert settings.describe({"ge": 1}) == ">= 1"
    assert settings.describe({"lt": 5}) == "< 5"


@pytest.mark.slow
def test_bad_value_in_one_sweep_option_stops_the_sweep_before_any_run(tmp_path):
    proc = run_app(tmp_path, "-m", "embedder=hash", "abstain.budget=0.1,2",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}", migrated=False)
    assert proc.returncode == 2
    assert "job #1: embedder=hash abstain.budget=2" in proc.stderr
    assert "abstain.budget=2.0 is out of range: must be [0, 1)" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # no store, no parent run, no job
    assert not list((tmp_path / "multirun").glob("*/ragexp_status.json"))


@pytest.mark.slow
def test_bad_value_in_a_single_run_creates_nothing(tmp_path):
    proc = run_app(tmp_path, "embedder=hash", "chunking.max_words=0",
                   f"hydra.run.dir={tmp_path / 'out'}", migrated=False)
    assert proc.returncode == 2
    assert "chunking.max_words=0 is out of range: must be >= 10" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_typo_in_a_sweep_override_leaves_no_parent(tmp_path):
    proc = run_app(tmp_path, "-m", "embedder=hash", "retriever=dense,hybrd",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}", migrated=False)
    assert proc.returncode == 2
    assert "job #1 (embedder=hash retriever=hybrd " in proc.stderr
    assert "does not compose" in proc.stderr and "Could not find 'retriever/hybrd'" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.skipif(embedders.cuda_unavailable() is None, reason="this machine has CUDA")
def test_cuda_where_there_is_none_fails_at_composition():
    with pytest.raises(validation.ConfigRangeError, match="embedder.device=cuda but onnxruntime"):
        validation.validate(cfg_with("embedder.device=cuda"))
    with pytest.raises(validation.ConfigRangeError, match="embedder.device=tpu is not a choice"):
        validation.validate(cfg_with("embedder.device=tpu"))
    validation.validate(cfg_with("embedder.device=cpu", "embedder.parallel=2"))


def test_a_key_out_of_its_own_range_is_blamed_alone_not_in_a_rule_it_takes_part_in():
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg_with("retriever=dense", "index=ivf", "index.nlist=-3"))
    lines = str(info.value).splitlines()[1:]
    assert [x.strip() for x in lines] == ["index.nlist=-3 is out of range: must be >= 1"]
    # a valid nlist below nprobe still gets the cross-field line
    with pytest.raises(validation.ConfigRangeError, match=r"index\.nprobe=8 .* <= index\.nlist "
                                                         r"\(4\)"):
        validation.validate(cfg_with("retriever=dense", "index=ivf", "index.nlist=4"))
    assert validation.names_refused("index.nprobe=8 is out of range: must be <= index.nlist "
                                    "(-3)", {"index.nlist"})
    assert not validation.names_refused("index.nprobe=8 ... <= index.nlistx", {"index.nlist"})
    assert not validation.names_refused("index.ef_search=1 ... lower top_k", {"k"})


@pytest.mark.parametrize("overrides,binding", [
    (("reranker=lexical", "reranker.top_n=200", "index.ef_search=150"), "reranker.top_n"),
    (("k=300", "reranker=lexical", "reranker.top_n=200", "index.ef_search=150"), "k"),
])
def test_ef_search_below_the_depth_names_the_key_that_sets_it(overrides, binding):
    depth = max(200, 300 if binding == "k" else 0)
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg_with("retriever=dense", "index=hnsw", *overrides))
    assert (f"max(k, reranker.top_n) = {depth} (from {binding}); raise index.ef_search or "
            f"lower {binding}") in str(info.value)
