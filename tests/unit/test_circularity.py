"""The circularity warning: generated questions scored by a run whose answerer, judge or
embedder is the model that wrote them are named in a warning (once a process) with both sides;
``questions generate`` says when its generator writes with the model a run's ``answer=llm`` and
``judge=llm`` call by default."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest
from fake_llm import KEY, FakeLLM, GenerationFake
from test_config import cfg_with

from ragexp.cli.main import main
from ragexp.data import golden, shipped
from ragexp.generate import circularity
from ragexp.run import app

WRITER = "writer-7b"


def generated(tmp_path, model: str | None, n: int = 4):
    """The first ``n`` questions of the handbook's generated set, each as written by
    ``model``."""
    lines = Path(shipped.path("handbook/golden/generated/known_item.jsonl")).read_text()
    out = tmp_path / "generated.jsonl"
    out.write_text("".join(json.dumps({**json.loads(line), "model": model}) + "\n"
                           for line in lines.splitlines()[:n]))
    return out


def test_a_question_file_s_model_is_read_and_counted(tmp_path):
    docs = golden.load_corpus(shipped.path("handbook/corpus"))
    queries = golden.load_golden(generated(tmp_path, WRITER, 3), docs)
    assert [q.model for q in queries] == [WRITER] * 3
    assert circularity.writers(queries) == Counter({WRITER: 3})
    hand = golden.load_golden(shipped.path("handbook/golden/a.jsonl"), docs)
    assert not circularity.writers(hand)


def test_each_system_model_that_wrote_questions_is_named():
    cfg = {"answer": {"llm": {"model": WRITER}}, "judge": {"name": "none"},
           "embedder": {"model": "minilm-int8"}}
    system = circularity.system_models(cfg)
    assert system == {"answer.llm.model": WRITER, "embedder.model": "minilm-int8"}
    [line] = circularity.warnings({WRITER: 4, "other": 2}, system)
    assert line.startswith(f"4 scored questions were written by {WRITER}, which is also "
                           f"answer.llm.model={WRITER} in this run")
    assert circularity.warnings({"other": 2}, system) == []
    both = {"answer.llm.model": WRITER, "judge.llm.model": WRITER}
    assert [w.split("also ")[1].split("=")[0] for w in circularity.warnings({WRITER: 1}, both)] \
        == ["answer.llm.model", "judge.llm.model"]


@pytest.fixture
def answering_fake(monkeypatch):
    monkeypatch.setenv(KEY, "sk-test")
    server = FakeLLM(rule=lambda role, question: "ok").start()
    yield server
    server.stop()


def test_a_run_answering_with_the_writer_warns_naming_both(tmp_path, mlflow_store, caplog,
                                                           answering_fake):
    questions = generated(tmp_path, WRITER)
    common = ["dataset=markdown", f"dataset.corpus_dir={shipped.path('handbook/corpus')}",
              f"dataset.questions={questions}", "split=all", "embedder=hash", "retriever=bm25",
              "reranker=none", f"llm.base_url={answering_fake.url}", f"llm.api_key_env={KEY}",
              f"cache_dir={tmp_path / 'cache'}", "progress=false", "latency_sample=0"]
    with caplog.at_level(logging.WARNING, logger="ragexp"):
        app.run_logged(cfg_with(*common, "answer=llm", f"llm.model={WRITER}"))
    said = [r.getMessage() for r in caplog.records if "written by" in r.getMessage()]
    assert said == [f"4 scored questions were written by {WRITER}, which is also "
                    f"answer.llm.model={WRITER} in this run: the run scores the model on "
                    f"questions it wrote (circular: a model answers, judges and embeds its own "
                    f"wording best); score questions another model wrote, or set "
                    f"answer.llm.model to another model"]
    assert answering_fake.calls("answer")  # the run did answer with it
    job = app.resolve(cfg_with(*common, "answer=llm", f"llm.model={WRITER}", "force=true"))
    assert app.warn_circular(job) == []  # said once a process
    other = app.resolve(cfg_with(*common, "answer=llm", "answer.llm.model=another"))
    assert circularity.warnings(circularity.writers(other.dataset.queries()),
                                circularity.system_models(other.resolved)) == []


@pytest.mark.parametrize("model, warned", [(None, True), ("another", False)])
def test_questions_generate_warns_when_it_writes_with_llm_model(model, warned, tmp_path,
                                                                monkeypatch, capsys):
    monkeypatch.setenv(KEY, "sk-test")
    fake = GenerationFake().start()
    try:
        code = main(["questions", "generate", "--generator", "llm", "--n", "1", "--out",
                     str(tmp_path / "q.jsonl"), "--kinds", "factual",
                     f"llm.base_url={fake.url}", f"llm.api_key_env={KEY}",
                     f"llm.model={WRITER}", "draws=1", "progress=false",
                     *([f"generator.llm.model={model}"] if model else [])])
    finally:
        fake.stop()
    err = capsys.readouterr().err
    assert code == 0
    assert (f"warning: the questions are written by {WRITER}, which is llm.model, the model "
            f"answer=llm and judge=llm call" in err) is warned
    assert ("circular" in err) is warned
