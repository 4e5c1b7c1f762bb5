"""The answer and judge config groups: every option composes and instantiates, old overrides
still work, endpoint keys follow llm.*, a missing API key fails the run before any work, and a
stage's endpoint as one ``llm`` node keeps the identity, params and recorded configs of runs
logged when its keys were the stage's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from mlflow.tracking import MlflowClient
from test_config import cfg_with

from ragexp.answer.extractive import ExtractiveAnswerer
from ragexp.answer.judge import LLMJudge, NoJudge
from ragexp.answer.llm import LLMError
from ragexp.answer.llm_answer import LLMAnswerer
from ragexp.run import app

KEY = "RAGEXP_TEST_CFG_KEY"


def test_defaults_are_extractive_and_no_judge():
    cfg = cfg_with("answer.min_overlap=0.2")  # the override from before answer was a group
    answerer, judge = instantiate(cfg.answer), instantiate(cfg.judge)
    assert isinstance(answerer, ExtractiveAnswerer) and answerer.min_overlap == 0.2
    assert isinstance(judge, NoJudge)


def test_llm_options_take_endpoint_keys_from_llm(monkeypatch):
    monkeypatch.setenv(KEY, "k")
    cfg = cfg_with("answer=llm", "judge=llm", f"llm.api_key_env={KEY}",
                   "llm.base_url=http://127.0.0.1:9/v1", "llm.price_in_per_mtok=0.5",
                   "llm.price_out_per_mtok=1.5", "judge.llm.model=grader", "answer.n_chunks=5")
    answerer, judge = instantiate(cfg.answer), instantiate(cfg.judge)
    assert isinstance(answerer, LLMAnswerer) and isinstance(judge, LLMJudge)
    assert answerer.endpoint.base_url == judge.endpoint.base_url == "http://127.0.0.1:9/v1"
    assert (answerer.endpoint.model, judge.endpoint.model) == ("gpt-4o-mini", "grader")
    assert answerer.n_chunks == 5 and answerer.endpoint.cost_usd(2_000_000, 1_000_000) == 2.5


def test_answer_llm_typo_fails_at_composition():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        cfg_with("answer=llm", "answer.modle=x")


@pytest.mark.parametrize("override", ["answer=llm", "judge=llm"])
def test_missing_key_fails_the_run_before_any_work(override, tmp_path, monkeypatch,
                                                   mlflow_store):
    monkeypatch.delenv(KEY, raising=False)

    def no_work(*args, **kwargs):
        raise AssertionError("the corpus was loaded or chunked before the key was checked")

    monkeypatch.setattr("ragexp.data.datasets.MarkdownDataset.__post_init__", no_work)
    monkeypatch.setattr("ragexp.stages.chunking.MarkdownChunker.chunk", no_work)
    cfg = cfg_with(override, f"llm.api_key_env={KEY}", "embedder=hash",
                   f"cache_dir={tmp_path / 'cache'}")
    with pytest.raises(Exception) as info:
        app.run_logged(cfg)
    cause = info.value.__cause__ or info.value  # Hydra wraps constructor errors
    assert isinstance(cause, LLMError)
    assert f"{override.split('=')[0]}.llm.api_key_env names the environment variable '{KEY}'" \
        in str(cause)
    client = MlflowClient(tracking_uri=mlflow_store.uri)
    [run] = client.search_runs([client.get_experiment_by_name("ragexp-handbook").experiment_id])
    assert run.info.status == "FAILED" and KEY in run.data.tags["ragexp.error"]
    assert run.data.metrics == {}


@pytest.mark.slow
def test_llm_block_counts_in_run_identity_only_through_the_stages_that_use_it(monkeypatch):
    from omegaconf import OmegaConf

    from ragexp.tracking.store import config_hash

    def chash(*overrides):
        cfg = cfg_with(*overrides)
        return config_hash(OmegaConf.to_container(cfg, resolve=True), {})

    assert chash("llm.model=a") == chash("llm.model=b")  # extractive, no judge: not used
    assert chash("answer=llm", "llm.model=a") != chash("answer=llm", "llm.model=b")
    assert chash("judge=llm", "llm.model=a") != chash("judge=llm", "llm.model=b")


def recorded_before(*labels: str) -> dict:
    """The config recorded at 14eb929 (``tests/fixtures/composed_configs.json.gz``), when a
    stage's endpoint keys were its own (``answer.model``), with the option of each of
    ``labels`` (``answer=llm``): the default config, each option's group taken from its own
    record."""
    from test_settings import RECORDED

    out = dict(RECORDED["default"]["resolved"])
    for label in labels:
        group = label.split("=")[0]
        out[group] = RECORDED[label]["resolved"][group]
    return out


def composed_now(*overrides: str) -> dict:
    """``config`` composed today with ``overrides``, resolved, paths as the record writes them."""
    from omegaconf import OmegaConf

    from ragexp.config.compose import compose
    from ragexp.data import shipped
    from tools.composed_configs import portable

    places = {str(Path(shipped.conf_dir()).parent): "<shipped>", str(Path.cwd()): "<cwd>"}
    return portable(OmegaConf.to_container(compose("config", list(overrides)), resolve=True),
                    places)


@pytest.mark.parametrize("extra,before_extra", [
    ((), {}),
    (("answer.llm.model=gpt-4o",), {"answer": {"model": "gpt-4o"}}),
    (("llm.temperature=0.5", "judge.llm.model=grader"),
     {"llm": {"temperature": 0.5}, "answer": {"temperature": 0.5},
      "judge": {"temperature": 0.5, "model": "grader"}}),
], ids=["defaults", "one_stage_s_model", "shared_and_own"])
def test_a_run_keeps_its_identity_and_params_with_the_endpoint_as_one_node(extra, before_extra):
    from ragexp.tracking.store import config_hash, flatten, params

    now = composed_now("answer=llm", "judge=llm", *extra)
    before = recorded_before("answer=llm", "judge=llm")
    for group, changed in before_extra.items():
        before[group] = {**before[group], **changed}
    assert "model" not in now["answer"] and now["answer"]["llm"]["model"]  # the new shape
    assert config_hash(now, {"d": "1"}, code="x") == config_hash(before, {"d": "1"}, code="x")
    assert params(now) == flatten(before)


def test_an_endpoint_override_for_one_stage_leaves_the_others_on_llm():
    now = composed_now("answer=llm", "judge=llm", "answer.llm.model=gpt-4o")
    assert (now["answer"]["llm"]["model"], now["judge"]["llm"]["model"],
            now["llm"]["model"]) == ("gpt-4o", "gpt-4o-mini", "gpt-4o-mini")


def test_a_config_recorded_with_the_endpoint_keys_builds_the_same_endpoint(monkeypatch):
    from omegaconf import OmegaConf

    from ragexp import legacy
    from ragexp.answer.judge import LABELS
    from ragexp.config.build import with_locations
    from ragexp.data import shipped

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    labels = shipped.path(LABELS)
    old = recorded_before("answer=llm", "judge=llm")
    old["answer"] = {**old["answer"], "model": "gpt-4o"}  # a stage's own key, overridden then
    old["judge"] = {**old["judge"], "labels": labels}
    upgraded = with_locations(OmegaConf.create(old), {})
    assert upgraded.answer.llm._target_ == legacy.ENDPOINT and "model" not in upgraded.answer
    new = cfg_with("answer=llm", "judge=llm", "answer.llm.model=gpt-4o", f"judge.labels={labels}")
    for group in ("answer", "judge"):
        was, now = instantiate(upgraded[group]), instantiate(new[group])
        assert type(was) is type(now) and was.endpoint == now.endpoint
        assert was.client.max_tokens == now.client.max_tokens
    assert instantiate(upgraded.answer).endpoint.model == "gpt-4o"
    assert legacy.upgrade(upgraded) == upgraded  # today's shape is left as it is


def test_legacy_nests_exactly_the_endpoint_s_keys():
    from ragexp import legacy
    from ragexp.answer.llm import Endpoint
    from ragexp.settings import settings

    assert legacy.ENDPOINT_KEYS == tuple(f.name for f in settings(Endpoint))


def test_a_stage_s_endpoint_key_given_as_its_own_says_where_it_is_now():
    from hydra.errors import ConfigCompositionException

    from ragexp.config import validation

    with pytest.raises(ConfigCompositionException) as info:
        cfg_with("answer=llm", "answer.model=gpt-4o")
    assert "(answer.model is answer.llm.model now" in validation.composition_error(info.value)
    with pytest.raises(validation.ConfigRangeError,
                       match=r"judge\.model moved to judge\.llm\.model: drop judge\.model"):
        validation.validate(cfg_with("judge=llm", "+judge.model=gpt-4o"))


@pytest.mark.parametrize("stage,key,value,message", [
    ("generator", "model", "' '", "generator.llm.model is empty: give a model name"),
    ("answer", "timeout", "0", "answer.llm.timeout=0.0 is out of range: must be > 0"),
    ("judge", "base_url", "''", "judge.llm.base_url is empty: give a URL such as"),
])
def test_a_stage_s_endpoint_refuses_naming_the_key_the_user_types(stage, key, value, message):
    """Hydra builds a stage's ``llm`` node before the stage: the endpoint is checked where the
    stage places it (``Endpoint.at``), so its refusal names ``generator.llm.model``, not the
    ``llm.model`` that every stage's endpoint once called itself."""
    from ragexp.cli import questions

    overrides = [f"{stage}.llm.{key}={value}", f"{stage}.llm.api_key_env=null"]
    cfg = (questions.compose("llm", overrides, None) if stage == "generator"
           else cfg_with(f"{stage}=llm", *overrides))
    with pytest.raises(Exception) as info:  # noqa: B017 - under Hydra's wrapper
        instantiate(cfg[stage])
    root = info.value
    while root.__cause__ is not None:
        root = root.__cause__
    assert isinstance(root, LLMError) and str(root).startswith(message)
