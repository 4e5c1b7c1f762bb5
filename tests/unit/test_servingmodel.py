"""The champion as an MLflow model: ``promote`` logs and registers a pyfunc model; MLflow's own
loader, ``ragexp serve`` and ``mlflow models serve`` answer with it exactly as the run's engine
does; all of them refuse data whose fingerprint differs from the model's; versions registered
by an older ragexp (a run's artifact folder, no MLmodel) are named with the fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import mlflow
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from omegaconf import OmegaConf
from workspaces import RELATIVE, handbook_copy, record_run

from ragexp.cli import main as cli
from ragexp.config import schema
from ragexp.data.datasets import MarkdownDataset
from ragexp.serving.engine import Engine, ServingError, champion_run_id
from ragexp.serving.inputs import BadQuestion
from ragexp.serving.model import OUTPUT_COLUMNS, answer_row, load_engine, questions_of
from ragexp.serving.promote import promote
from ragexp.tracking import store as tracking
from tools.background import background_server, free_port

schema.register()
BASE = ["embedder=hash", "embedder.dim=64", "retriever=bm25", "reranker=none", "progress=false"]
QUESTIONS = ["What does BD-2110 mean?", "How long are dead-lettered jobs kept?",
             "Is there a Helm chart for deploying Brindle on Kubernetes?"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One run on a copy of the handbook (relative paths, started in ``work/``), promoted; the
    tests then run from another folder."""
    tmp = tmp_path_factory.mktemp("servingmodel")
    with handbook_copy(tmp) as (work, mp):
        run_id = record_run(*BASE, *RELATIVE)["run_id"]
        before = tracking.client().get_run(run_id)
        version, _ = promote(run_id)
        (tmp / "elsewhere").mkdir()
        mp.chdir(tmp / "elsewhere")
        yield {"tmp": tmp, "work": work, "run_id": run_id, "version": version, "before": before}


@pytest.fixture(scope="module")
def reference(store):
    """The run's engine built from the tracking store (``from_run``), independent of the model."""
    return Engine.from_run(store["run_id"])


@pytest.mark.slow
def test_promote_registers_a_pyfunc_model_with_the_runs_artifacts(store):
    c = tracking.client()
    run_id = store["run_id"]
    mv = c.get_model_version("ragexp-serving", store["version"])
    assert mv.run_id == run_id and mv.source.startswith("models:/m-")
    logged = c.get_logged_model(mv.source[len("models:/"):])
    assert logged.source_run_id == run_id and str(logged.status).endswith("READY")
    assert logged.experiment_id == c.get_run(run_id).info.experiment_id
    assert c.get_model_version_by_alias("ragexp-serving", "champion").version == mv.version
    info = mlflow.models.get_model_info(f"models:/ragexp-serving/{mv.version}")
    assert "python_function" in info.flavors and info.run_id == run_id
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/ragexp-serving/{mv.version}"))
    assert (folder / "MLmodel").is_file()
    arts = folder / "artifacts"
    run = c.get_run(run_id)
    assert OmegaConf.load(arts / "config.yaml") == OmegaConf.load(
        tracking.artifact_path(run_id, "config.yaml"))
    recorded = {k: run.data.tags[k] for k in ("corpus_hash", "golden_hash")}
    assert json.loads((arts / "fingerprint.json").read_text()) == recorded
    # the hashes are those of the data itself, computed again independently of the run
    data = MarkdownDataset(str(store["work"] / "data" / "corpus"),
                           str(store["work"] / "data" / "golden")).fingerprint()
    assert recorded == {k: data[k] for k in recorded}
    serving = json.loads((arts / "serving.json").read_text())
    assert serving["run_id"] == run_id
    assert serving["threshold"] == pytest.approx(run.data.metrics["abstain.threshold"])
    assert serving["locations"]["ragexp.path.cache_dir"] == str(store["work"] / "cache")
    assert serving["locations"]["ragexp.path.dataset.corpus_dir"] == str(
        store["work"] / "data" / "corpus")
    # the evaluation run was linked to the model, not reopened
    before = store["before"]
    assert (run.info.status, run.info.end_time) == ("FINISHED", before.info.end_time)
    assert logged.model_id in {o.model_id for o in run.outputs.model_outputs}


def test_mlflow_loaded_model_answers_as_the_runs_engine(store, reference):
    model = mlflow.pyfunc.load_model("models:/ragexp-serving@champion")
    by_frame = model.predict(pd.DataFrame({"question": QUESTIONS}))
    by_list = model.predict(list(QUESTIONS))
    assert list(by_frame.columns) == [*OUTPUT_COLUMNS, "trace_id"]
    assert len(by_frame) == len(QUESTIONS)
    pd.testing.assert_frame_equal(by_frame.drop(columns="trace_id"),
                                  by_list.drop(columns="trace_id"))
    # one trace per answer (tracing is on by default), recording this run and the answer
    ids = [*by_frame["trace_id"], *by_list["trace_id"]]
    assert len(set(ids)) == 2 * len(QUESTIONS) and all(str(t).startswith("tr-") for t in ids)
    model.unwrap_python_model().engine.tracer.flush()
    root = next(s for s in mlflow.get_trace(ids[0]).data.spans if s.parent_id is None)
    assert root.attributes["ragexp.run_id"] == store["run_id"]
    assert root.attributes["ragexp.model_version"] == str(store["version"])
    assert root.inputs == {"question": QUESTIONS[0]}
    for row, question in zip(by_frame.to_dict(orient="records"), QUESTIONS):
        ans = reference.answer(question)
        assert row["answer"] == ans.text and row["refused"] == ans.refused
        assert row["confidence"] == pytest.approx(ans.signal)
        assert row["citations"] == ans.cited_chunks
        assert [s["chunk_id"] for s in row["sources"]] == [s.chunk_id for s in ans.sources]
    answered = by_frame[~by_frame["refused"]]
    assert len(answered) >= 1
    for row in answered.to_dict(orient="records"):  # every citation is one of its sources
        assert row["citations"] and set(row["citations"]) <= {s["chunk_id"]
                                                              for s in row["sources"]}
    engine = model.unwrap_python_model().engine
    assert engine.threshold == pytest.approx(reference.threshold)


def test_questions_in_every_shape_and_bad_input_named():
    assert questions_of(pd.DataFrame({"question": [" a "]})) == ["a"]
    assert questions_of(pd.DataFrame({0: ["a", "b"]})) == ["a", "b"]
    assert questions_of(["a", "b"]) == questions_of({"question": ["a", "b"]}) == ["a", "b"]
    assert questions_of("a") == questions_of({"question": "a"}) == ["a"]
    with pytest.raises(ValueError, match=r"columns \['query'\]; it needs a column 'question'"):
        questions_of(pd.DataFrame({"query": ["a"]}))
    with pytest.raises(BadQuestion, match="^question 1 is a number, not a string"):
        questions_of(["a", 3])
    with pytest.raises(BadQuestion, match="^question 1 must not be empty"):
        questions_of(["a", "  "])
    with pytest.raises(BadQuestion, match="^input is a number"):
        questions_of(1.5)
    with pytest.raises(BadQuestion, match="^input holds no question"):
        questions_of([])
    # pandas keeps a JSON null as None or NaN: both are null, as ragexp serve names it
    for frame in (pd.DataFrame({"question": ["a", None]}), pd.DataFrame({0: [float("nan")]})):
        with pytest.raises(BadQuestion, match=r"^question \d is null, not a string"):
            questions_of(frame)


# Bad questions and what the contract (docs/serving.md) says of each: ragexp serve's status,
# and the start of the one message both servers give (ragexp serve's field is "question",
# the model's "question 0", the first of its list).
BAD_QUESTIONS = [(None, 422, "is null, not a string"), (5, 422, "is a number, not a string"),
                 (2.5, 422, "is a number"), (True, 422, "is a boolean, not a string"),
                 ("", 400, "must not be empty"), (" \t\n", 400, "must not be empty"),
                 ("q" * 2001, 413, "is 2001 characters; the limit is 2000")]


@pytest.fixture
def scoring(store, monkeypatch):
    """MLflow's own scoring server (what ``mlflow models serve`` runs) over the champion, in
    this process."""
    from mlflow.pyfunc import scoring_server

    monkeypatch.setenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", "false")  # init sets it: undone
    model = mlflow.pyfunc.load_model("models:/ragexp-serving@champion")
    return TestClient(scoring_server.init(model))


def _invoke(http, payload) -> tuple[int, dict]:
    r = http.post("/invocations", content=json.dumps(payload).encode(),
                  headers={"content-type": "application/json"})
    return r.status_code, r.json()


def test_mlflow_serving_refuses_null_and_numbers_as_ragexp_serve_does(scoring, reference):
    from ragexp.serving.api import create_app

    assert _invoke(scoring, {"inputs": [None]}) == (400, {
        "error_code": "INVALID_PARAMETER_VALUE",
        "message": "question 0 is null, not a string; send it as a JSON string",
        "sqlstate": "KAM00", "error_class": "INVALID_PARAMETER_VALUE"})
    status, body = _invoke(scoring, {"inputs": [5]})
    assert (status, body["message"]) == (
        400, "question 0 is a number, not a string; send it as a JSON string")
    ours = TestClient(create_app(reference))
    for value, status, message in BAD_QUESTIONS:
        r = ours.post("/answer", json={"question": value})
        assert r.status_code == status and r.json()["error"].startswith(f"question {message}")
        got, body = _invoke(scoring, {"inputs": [value]})
        assert got == 400 and "stack_trace" not in body, (value, body)
        # the same message, naming the list member instead of the field
        assert body["message"] == r.json()["error"].replace("question", "question 0", 1)


@pytest.mark.parametrize("payload,message", [
    ({"inputs": [QUESTIONS[0], None]}, "question 1 is null, not a string"),
    ({"inputs": [QUESTIONS[0], {"q": 1}]}, "question 1 is an object, not a string"),
    ({"inputs": [QUESTIONS[0], "  "]}, "question 1 must not be empty"),
    ({"inputs": 5}, "question 0 is a number, not a string"),
    ({"inputs": [True, "x"]}, "question 0 is a boolean, not a string"),
    ({"dataframe_records": [{"question": QUESTIONS[0]}, {"question": None}]},
     "question 1 is null, not a string"),
    ({"dataframe_records": [{"question": 7}]}, "question 0 is a number, not a string"),
    ({"dataframe_split": {"columns": ["question"], "data": [["x"], [""]]}},
     "question 1 must not be empty"),
    ({"dataframe_records": [{"query": "x"}]}, "input has columns ['query']; it needs a column"),
    ({"inputs": [{"text": "x"}]}, "input has columns ['text']; it needs a column 'question'"),
])
def test_mlflow_serving_names_the_bad_member_of_a_list_first(scoring, payload, message):
    status, body = _invoke(scoring, payload)
    assert status == 400 and body["message"].startswith(message), body
    assert "\n" not in body["message"] and "stack_trace" not in body


def test_mlflow_serving_refuses_what_its_own_checks_catch_before_the_model(scoring):
    # MLflow's schema enforcement refuses these before predict runs, with its own message: a
    # 400 without a stack trace all the same (documented in docs/serving.md)
    for raw in (b'{"inputs": []}', b'{"inputs": ["\\ud800"]}', b'{"inputs": null}',
                b'{"inputs": {"question": "x"}}', b"\xff\xfe{}", b'{"inputs": ["caf\xe9"]}',
                b"{not json", b""):
        r = scoring.post("/invocations", content=raw,
                         headers={"content-type": "application/json"})
        assert r.status_code == 400 and "stack_trace" not in r.json(), (raw, r.text)
    good = _invoke(scoring, {"inputs": [f"  {QUESTIONS[0]}  "]})
    assert good[0] == 200 and len(good[1]["predictions"]) == 1


def test_refused_row_keeps_shape():
    from ragexp.answer.base import REFUSAL, Answer

    row = answer_row(Answer("q", REFUSAL, True, float("-inf"), 0.3, reason="low"))
    assert row == {"answer": REFUSAL, "refused": True, "citations": [], "sources": [],
                   "confidence": None}


def test_ragexp_serve_loads_the_champion_model(store, reference, monkeypatch):
    import uvicorn

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    assert cli.main(["serve", "--port", "8123"]) == 0
    http = TestClient(served["app"])
    health = http.get("/health").json()
    assert health["run_id"] == store["run_id"] == champion_run_id()
    assert health["threshold"] == pytest.approx(reference.threshold)
    got = http.post("/answer", json={"question": QUESTIONS[0]}).json()
    assert got["text"] == reference.answer(QUESTIONS[0]).text
    assert http.get("/search", params={"q": "ledger disk full", "k": 2}).status_code == 200
    assert load_engine().run_id == store["run_id"]


def test_changed_data_is_refused_naming_both_hashes(store, capsys):
    run_id = store["run_id"]
    recorded = tracking.client().get_run(run_id).data.tags["corpus_hash"]
    extra = store["work"] / "data" / "corpus" / "zz-added.md"
    extra.write_text("# Added later\n\nA document the model never saw.\n")
    try:
        now = MarkdownDataset(str(store["work"] / "data" / "corpus"),
                              str(store["work"] / "data" / "golden")).fingerprint()["corpus_hash"]
        assert now != recorded
        with pytest.raises(ServingError) as err:
            load_engine()
        assert recorded in str(err.value) and now in str(err.value)
        with pytest.raises(ServingError, match=now):
            mlflow.pyfunc.load_model("models:/ragexp-serving@champion")
        assert cli.main(["serve", "--port", str(free_port())]) == 2  # before uvicorn starts
        err_text = capsys.readouterr().err
        assert recorded in err_text and now in err_text
    finally:
        extra.unlink()


def test_versions_registered_from_a_run_folder_ask_for_a_new_promotion(store, capsys):
    c = tracking.client()
    run_id = store["run_id"]
    run = c.get_run(run_id)
    old = c.create_model_version("ragexp-serving", source=run.info.artifact_uri, run_id=run_id)
    c.set_registered_model_alias("ragexp-serving", "champion", old.version)
    try:
        with pytest.raises(ServingError, match=rf"ragexp promote {run_id}") as err:
            load_engine()
        assert f"version {old.version}" in str(err.value) and "MLmodel" in str(err.value)
        assert cli.main(["ask", "What does BD-2110 mean?"]) == 2
        assert "is not an MLflow model" in capsys.readouterr().err
        version, msg = promote(run_id)  # the same run again: a model this time, not a no-op
        assert int(version) > int(old.version) and "is now 'champion'" in msg
        assert load_engine().run_id == run_id
        assert promote(run_id)[0] == version  # and now it is a no-op
        assert cli.main(["promote", run_id[:8]]) == 0
        out = capsys.readouterr().out
        assert f"already the champion (version {version})" in out
        assert "mlflow models serve -m models:/ragexp-serving@champion --env-manager local" in out
    finally:
        c.set_registered_model_alias("ragexp-serving", "champion", store["version"])


def test_mlflow_serve_command_points_at_ragexps_store(monkeypatch, tmp_path, capsys):
    from ragexp.serving.model import mlflow_serve_command

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    # without the variable, ragexp's store and the command's are the same file
    command = mlflow_serve_command(port=5001)
    uri = command.split()[1].split("=", 1)[1]
    assert Path(uri[len("sqlite:///"):]).resolve() == Path(
        tracking.tracking_uri()[len("sqlite:///"):])
    assert command.endswith("mlflow models serve -m models:/ragexp-serving@champion "
                            "--env-manager local -h 127.0.0.1 -p 5001")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert mlflow_serve_command("other").startswith(
        "env MLFLOW_TRACKING_URI=http://tracking:5000 mlflow models serve -m "
        "models:/other@champion ")


def test_missing_version_is_a_clear_error(store):
    with pytest.raises(ServingError, match="no version 99 of registered model"):
        load_engine(version="99")
    with pytest.raises(ServingError, match="no 'champion' of registered model 'nothing'"):
        load_engine("nothing")


def _mlflow_serve(port: int) -> list[str]:
    return [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m",
            "models:/ragexp-serving@champion", "--env-manager", "local", "-h", "127.0.0.1",
            "-p", str(port)]


def _serve_env() -> dict[str, str]:
    """``mlflow models serve`` execs ``uvicorn`` from PATH: the venv's, with ragexp importable."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
            "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}


@pytest.mark.slow
def test_mlflow_models_serve_answers_on_loopback(store, reference):
    log = store["tmp"] / "mlflow-serve.log"

    def logged(port: int) -> list[str]:  # the server's console, kept to read back
        return ["sh", "-c", 'exec "$@" >"$0" 2>&1', str(log), *_mlflow_serve(port)]

    with background_server(logged, health="/ping", timeout_s=240, env=_serve_env()) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            by_list = http.post("/invocations", json={"inputs": QUESTIONS})
            by_records = http.post("/invocations", json={
                "dataframe_records": [{"question": q} for q in QUESTIONS]})
            empty = http.post("/invocations", json={"inputs": ["  "]})
            bad = {value: http.post("/invocations", json={"inputs": [value]})
                   for value in (None, 5)}
    for value, kind in ((None, "null"), (5, "a number")):
        assert bad[value].status_code == 400, bad[value].text
        assert bad[value].json()["message"] == (f"question 0 is {kind}, not a string; send it "
                                                f"as a JSON string")
    console = log.read_text(errors="replace")
    assert "Listening" in console or "Uvicorn running" in console or "Started" in console
    assert "Traceback" not in console
    assert by_list.status_code == by_records.status_code == 200, by_list.text
    rows, again = by_list.json()["predictions"], by_records.json()["predictions"]
    assert len(rows) == len(again) == len(QUESTIONS)
    traced = [r.pop("trace_id") for r in rows] + [r.pop("trace_id") for r in again]
    assert rows == again and len(set(traced)) == len(traced)  # one trace per answer
    for row in rows:
        row["trace_id"] = traced.pop(0)
    for row, question in zip(rows, QUESTIONS):
        ans = reference.answer(question)
        assert set(row) == {*OUTPUT_COLUMNS, "trace_id"} and row["trace_id"].startswith("tr-")
        assert (row["answer"], row["refused"], row["citations"]) == (
            ans.text, ans.refused, ans.cited_chunks)
        assert row["confidence"] == pytest.approx(ans.signal)
        assert [s["n"] for s in row["sources"]] == [s.n for s in ans.sources]
    assert empty.status_code == 400 and empty.json()["message"] == "question 0 must not be empty"
    assert "stack_trace" not in empty.json()


@pytest.mark.slow
def test_mlflow_models_serve_refuses_changed_data(store):
    recorded = tracking.client().get_run(store["run_id"]).data.tags["golden_hash"]
    golden = store["work"] / "data" / "golden"
    first = sorted(golden.glob("*.jsonl"))[0]
    original = first.read_bytes()
    first.write_bytes(original + b"\n")  # one more newline: other bytes, same questions
    port = free_port()
    proc = subprocess.Popen(_mlflow_serve(port), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **_serve_env()})
    try:
        out, _ = proc.communicate(timeout=240)
        now = MarkdownDataset(str(store["work"] / "data" / "corpus"),
                              str(golden)).fingerprint()["golden_hash"]
        assert now != recorded
        text = out.decode(errors="replace")
        assert proc.returncode != 0
        assert recorded in text and now in text and "changed since it was measured" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        first.write_bytes(original)


@pytest.mark.slow
def test_walkthrough_records_mlflow_models_serve_as_it_ran(store, reference, monkeypatch):
    from tools import walkthrough

    for key, value in _serve_env().items():
        monkeypatch.setenv(key, value)
    server, request = walkthrough.mlflow_serve_and_query()
    command = server.splitlines()[0]
    uri = os.environ["MLFLOW_TRACKING_URI"]
    assert command.startswith(f"$ env MLFLOW_TRACKING_URI={uri} mlflow models serve -m "
                              f"models:/ragexp-serving@champion --env-manager local -h "
                              f"127.0.0.1 -p ")
    curl_line, _, out = request.partition("\n")
    assert curl_line.startswith("$ curl ") and "/invocations" in curl_line
    body, status = out.rsplit("\n", 1)
    assert status == "HTTP 200"
    row = json.loads(body)["predictions"][0]
    ans = reference.answer("How long are dead-lettered jobs kept?")
    assert (row["answer"], row["refused"]) == (ans.text, ans.refused)


def test_a_models_artifact_that_does_not_read_is_named(tmp_path):
    """``artifacts_record`` (what ``search``/``ask`` and ``load_context`` rebuild from): a
    missing, unparsable or incomplete artifact is a ``ServingError`` naming the file and the
    way out, not a traceback."""
    from ragexp.serving.engine import ServingError
    from ragexp.serving.model import artifacts_record

    (tmp_path / "config.yaml").write_text("k: 10\n")
    (tmp_path / "fingerprint.json").write_text('{"corpus_hash": "ab"}')
    files = {k: str(tmp_path / n) for k, n in
             (("config", "config.yaml"), ("fingerprint", "fingerprint.json"),
              ("serving", "serving.json"))}
    for text, said in (("{bad", "serving.json (.*) does not read: Expecting property name"),
                       ('{"run_id": "r"}', "serving.json (.*) lacks 'locations'")):
        (tmp_path / "serving.json").write_text(text)
        with pytest.raises(ServingError, match=said + ".*promote its run again"):
            artifacts_record(files)
    (tmp_path / "serving.json").write_text('{"run_id": "r", "locations": {}, "threshold": null}')
    record = artifacts_record(files)
    assert (record.run_id, record.config, record.fingerprint, record.threshold) == \
        ("r", "k: 10\n", {"corpus_hash": "ab"}, None)
    with pytest.raises(ServingError, match=r"fingerprint.json \(.*nope.json\) does not read"):
        artifacts_record({**files, "fingerprint": str(tmp_path / "nope.json")})
    with pytest.raises(ServingError, match="has no fingerprint.json"):
        artifacts_record({k: v for k, v in files.items() if k != "fingerprint"})
