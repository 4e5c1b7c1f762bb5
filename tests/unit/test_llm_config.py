"""The answer and judge config groups: every option composes and instantiates, old overrides
still work, endpoint keys follow llm.*, and a missing API key fails the run before any work."""

from __future__ import annotations

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
                   "llm.price_out_per_mtok=1.5", "judge.model=grader", "answer.n_chunks=5")
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
    assert f"{override.split('=')[0]}.api_key_env names the environment variable '{KEY}'" \
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
