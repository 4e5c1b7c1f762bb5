"""A store made before the packages by role still serves.

``fixtures/premove-store.tar.gz`` holds a store and a registered champion made by the code of
commit 49eacf7 (flat modules: its ``config.yaml`` names ``_target_: ragexp.retrievers...``, its
registered model's ``model_code.py`` imports ``ragexp.servingmodel``), with the answers that code
gave (``answers-before.jsonl``; ``fixtures/make_premove_store.sh`` is how it was made). A store
records absolute paths, so it is restored to the folder it was made in. Today's code must serve
it through ``ragexp ask`` and ``mlflow models serve`` from the same sources, with the same
confidence; the answers' text is read as text since #19 (``_read_as_text``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest
from filelock import FileLock
from omegaconf import OmegaConf

from ragexp import legacy
from tools.background import background_server

FIXTURE = Path(__file__).parents[1] / "fixtures" / "premove-store.tar.gz"
ROOT = Path("/tmp/ragexp-premove")  # where the store was made: its paths point here
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def premove():
    """The pre-move store restored to ``ROOT``; yields the answers recorded before the move,
    ``{question: answer dict}``."""
    with FileLock(str(ROOT) + ".lock"):
        shutil.rmtree(ROOT, ignore_errors=True)
        with tarfile.open(FIXTURE) as tar:
            tar.extractall(ROOT.parent, filter="data")
        records = json_stream((ROOT / "answers-before.jsonl").read_text())
        yield {r["question"]: r for r in records}
        shutil.rmtree(ROOT, ignore_errors=True)


def json_stream(text: str) -> list:
    """The JSON values of a text that holds several, one after another (``ask --json`` output)."""
    decoder, at, out = json.JSONDecoder(), 0, []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return out
        value, at = decoder.raw_decode(text, at)
        out.append(value)


def env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{ROOT}/mlruns/mlflow.db",
            "MLFLOW_DISABLE_TELEMETRY": "true", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}


def test_the_fixture_names_the_old_module_paths(premove):
    """What makes this a pre-move store: the recorded config and the model's code name the
    flat module paths that no longer hold code."""
    configs = list(ROOT.glob("mlruns/artifacts/**/config.yaml"))
    assert configs
    targets = {t for c in configs for t in _targets(OmegaConf.to_container(OmegaConf.load(c)))}
    assert "ragexp.retrievers.DenseRetriever" in targets
    assert "ragexp.extractive.ExtractiveAnswerer" in targets
    code = [p.read_text() for p in ROOT.glob("mlruns/artifacts/**/model_code.py")]
    assert code and all("from ragexp.servingmodel import RagexpModel" in c for c in code)
    assert {legacy.target(t) for t in targets} >= {
        "ragexp.stages.retrievers.DenseRetriever", "ragexp.answer.extractive.ExtractiveAnswerer"}


def _targets(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_":
                yield value
            else:
                yield from _targets(value)


RETENTION = "Dead-lettered jobs are kept for 14 days and then purged permanently."


def _read_as_text(question: str, text: str, before: dict) -> None:
    """Today's answer from the same sources as before, read as text (#19 kind 12): the
    recorded answers quote markdown source (``**``, backticks, a table row first), today's
    render it, and the dead-letter answer opens with the sentence that answers it."""
    assert "**" not in text and "`" not in text and not text.startswith("|"), text
    if "dead-lettered" in question:
        assert before["text"].startswith("| `dead_letter_retention` |")  # what it quoted
        assert text.startswith(f"{RETENTION} [3]"), text


@pytest.mark.slow
def test_ragexp_ask_answers_from_the_premove_champion_as_before(premove):
    for question, before in premove.items():
        out = subprocess.run([str(BIN / "ragexp"), "ask", question, "--json"], env=env(),
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        now = json.loads(out.stdout)
        for key in ("refused", "sources"):
            assert now[key] == before[key], key
        for key in ("signal", "threshold"):  # BM25 weights are float32 now: within 2^-23
            assert now[key] == pytest.approx(before[key], rel=2.0 ** -23), key
        _read_as_text(question, now["text"], before)
        assert now["text"] == " ".join(now["sentences"])


@pytest.mark.slow
def test_mlflow_models_serve_answers_from_the_premove_champion(premove):
    questions = list(premove)
    command = lambda port: [str(BIN / "mlflow"), "models", "serve", "-m",  # noqa: E731
                            "models:/ragexp-serving@champion", "--env-manager", "local", "-h",
                            "127.0.0.1", "-p", str(port)]
    with background_server(command, health="/ping", timeout_s=240, env=env()) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            reply = http.post("/invocations", json={"inputs": questions})
    assert reply.status_code == 200, reply.text
    rows = reply.json()["predictions"]
    for q, r in zip(questions, rows):
        _read_as_text(q, r["answer"], premove[q])
    assert [r["refused"] for r in rows] == [premove[q]["refused"] for q in questions]
    assert [r["confidence"] for r in rows] == pytest.approx(
        [premove[q]["signal"] for q in questions])
    assert [[s["chunk_id"] for s in r["sources"]] for r in rows] == [
        [s["chunk_id"] for s in premove[q]["sources"]] for q in questions]


def test_the_handbook_where_an_older_ragexp_shipped_it_is_found_where_it_ships_today(tmp_path):
    from ragexp.data import shipped

    old = "/venv/lib/python3.11/site-packages/ragexp/examples/handbook"
    assert shipped.relocated(f"{old}/corpus") == shipped.path("handbook/corpus")
    assert shipped.relocated(f"{old}/golden/judge/labels.jsonl") == shipped.path(
        "handbook/golden/judge/labels.jsonl")
    here = tmp_path / "ragexp" / "examples" / "handbook" / "corpus"  # still there: kept
    here.mkdir(parents=True)
    assert shipped.relocated(str(here)) == str(here)
    for other in ("/data/my-docs", f"{old}/corpusX", "/x/examples/handbook/corpus"):
        assert shipped.relocated(other) == other


@pytest.mark.slow
def test_legacy_targets_and_module_aliases_are_todays_objects():
    import importlib

    from omegaconf import OmegaConf

    for old, new in legacy.OLD_PATHS.items():
        module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert module.__spec__.name == module.__name__ == new  # reloads as itself
    # `python -m` of an old path runs today's module (the docs once said python -m ragexp.golden)
    old_cli = subprocess.run([sys.executable, "-m", "ragexp.golden", "check"], env=env(),
                             capture_output=True, text=True, timeout=300)
    assert old_cli.returncode == 0 and "| total |" in old_cli.stdout, old_cli.stderr
    cfg = OmegaConf.create({"retriever": {"_target_": "ragexp.retrievers.HybridRetriever",
                                          "parts": [{"_target_": "ragexp.bm25.BM25Index"}]},
                            "answer": {"_target_": "ragexp.answer.Answerer"},
                            "mine": {"_target_": "mypkg.MyRetriever"}})
    up = legacy.upgrade(cfg)
    assert up.retriever._target_ == "ragexp.stages.retrievers.HybridRetriever"
    assert up.retriever.parts[0]._target_ == "ragexp.index.bm25.BM25Index"
    assert up.answer._target_ == "ragexp.answer.extractive.ExtractiveAnswerer"
    assert up.mine._target_ == "mypkg.MyRetriever"
    assert cfg.retriever._target_ == "ragexp.retrievers.HybridRetriever"  # a copy was upgraded
