"""Traces of served requests (serving/tracing.py), user feedback on them (POST /feedback), and
mining them into failure modes and candidate golden questions (serving/mining.py, cli/traces.py),
on a real run logged into a temporary MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from workspaces import record_run

from ragexp.config import schema
from ragexp.errors import NotFound
from ragexp.serving import mining, tracing
from ragexp.serving.api import create_app
from ragexp.serving.engine import Engine
from ragexp.serving.mining import Served
from ragexp.stages.ranking import rank
from ragexp.tracking import store as tracking

schema.register()


@pytest.fixture(scope="module")
def served(module_mlflow_store):
    tmp = module_mlflow_store.folder
    run_id = record_run("embedder=hash", "embedder.dim=256", "progress=false",
                        f"cache_dir={tmp / 'cache'}")["run_id"]
    engine = Engine.from_run(run_id)
    engine.tracer = tracing.for_engine(engine, True)
    yield tmp, run_id, engine
    engine.tracer.flush()


def spans_of(trace_id: str):
    import mlflow

    trace = mlflow.get_trace(trace_id)
    root = next(s for s in trace.data.spans if s.parent_id is None)
    return trace, root, {s.name: s for s in trace.data.spans if s.parent_id is not None}


def test_answer_trace_has_stage_spans_with_the_engines_own_numbers(served):
    _, run_id, engine = served
    question = "What does BD-2110 mean?"
    ans = engine.answer(question)
    trace_id = engine.tracer.last_trace_id()
    engine.tracer.flush()
    trace, root, spans = spans_of(trace_id)
    assert list(spans) == ["retrieve", "rerank", "abstain", "answer"]
    assert root.name == "ragexp.answer" and root.inputs == {"question": question}
    assert trace.info.tags["ragexp.run_id"] == run_id
    assert trace.info.trace_metadata["mlflow.sourceRun"] == run_id
    assert root.attributes["ragexp.run_id"] == run_id
    assert root.attributes["ragexp.model_version"] == ""  # not registered yet
    # the ranking recorded is the one the shared ranking path computes, best first
    expected = rank(engine.retriever, engine.reranker, engine.resources, {"q": question},
                    engine.cfg.k)["q"]
    best = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:tracing.TOP_RECORDED]
    rr = spans["rerank"].attributes
    assert rr["ragexp.chunk_ids"] == [c for c, _ in best]
    assert rr["ragexp.scores"] == pytest.approx([s for _, s in best])
    assert rr["ragexp.depth"] == len(expected)
    assert spans["retrieve"].attributes["ragexp.depth"] == max(engine.cfg.k,
                                                               engine.reranker.top_n)
    ab = spans["abstain"].attributes
    assert ab["ragexp.confidence"] == pytest.approx(ans.signal)
    assert ab["ragexp.threshold"] == pytest.approx(engine.threshold)
    assert ab["ragexp.below_threshold"] == (ans.signal < engine.threshold)
    an = spans["answer"].attributes
    assert an["ragexp.refused"] is ans.refused is False
    assert an["ragexp.citations_kept"] == ans.cited_chunks and ans.cited_chunks
    assert an["ragexp.citations_dropped"] == ans.dropped
    assert an["ragexp.sources"] == [s.chunk_id for s in ans.sources]
    # latency: each stage's attribute is its span's duration; the root holds all of them
    for span in spans.values():
        duration = (span.end_time_ns - span.start_time_ns) / 1e6
        assert span.attributes["ragexp.latency_ms"] == pytest.approx(duration, abs=1e-3)
        assert root.start_time_ns <= span.start_time_ns <= span.end_time_ns <= root.end_time_ns
    stages = sum(s.attributes["ragexp.latency_ms"] for s in spans.values())
    assert stages <= root.attributes["ragexp.latency_ms"] + 1e-3
    assert root.outputs == {"text": ans.text, "refused": False}


def test_search_trace_and_model_version_after_promote(served):
    from ragexp.serving.promote import promote

    _, run_id, engine = served
    version, _ = promote(run_id)
    tracer = tracing.for_engine(engine, True)
    assert tracer.model_version == str(version)
    engine.tracer = tracer
    hits = engine.search("ledger disk full", 4)
    trace_id = tracer.last_trace_id()
    tracer.flush()
    _, root, spans = spans_of(trace_id)
    assert list(spans) == ["retrieve", "rerank"] and root.name == "ragexp.search"
    assert root.attributes["ragexp.model_version"] == str(version)
    assert spans["rerank"].attributes["ragexp.chunk_ids"] == [h.chunk_id for h in hits]


def test_tracing_off_writes_nothing_and_config_and_flag_switch_it(served):
    import mlflow
    from omegaconf import OmegaConf

    from ragexp.cli import main as cli

    _, _, engine = served
    off = untraced(engine)
    exp = tracking.client().get_experiment_by_name(tracing.EXPERIMENT).experiment_id
    engine.tracer.flush()
    before = len(mlflow.search_traces(locations=[exp], return_type="list"))
    off.answer("What does BD-2110 mean?")
    off.search("ledger", 2)
    assert off.tracer.last_trace_id() is None
    assert len(mlflow.search_traces(locations=[exp], return_type="list")) == before
    assert tracing.settings(OmegaConf.create({})) == (True, "ragexp-serving")
    assert tracing.settings(OmegaConf.create({"traces": {"enabled": False,
                                                         "experiment": "x"}})) == (False, "x")
    args = cli.parser().parse_args(["serve", "--no-traces"])
    assert args.traces is False
    assert cli.parser().parse_args(["serve"]).traces is None
    cfg_off = OmegaConf.create({"traces": {"enabled": False}})
    off.cfg = cfg_off
    assert cli._tracer(off, None) is tracing.OFF
    assert cli._tracer(off, True).enabled


@pytest.mark.slow
def test_http_trace_id_and_feedback(served):
    import mlflow

    _, run_id, engine = served
    http = TestClient(create_app(engine))
    r = http.post("/answer", json={"question": "How long are dead-lettered jobs kept?"})
    trace_id = r.json()["trace_id"]
    assert r.status_code == 200 and tracing.TRACE_ID.fullmatch(trace_id)
    s = http.get("/search", params={"q": "snapshot retention", "k": 3})
    assert tracing.TRACE_ID.fullmatch(s.json()["trace_id"]) and s.json()["trace_id"] != trace_id
    f = http.post("/feedback", json={"trace_id": trace_id, "comment": "wrong retention"})
    assert f.status_code == 200
    assert f.json() == {"run_id": run_id, "trace_id": trace_id, "recorded": True}
    trace = mlflow.get_trace(trace_id)
    fb = [a for a in trace.info.assessments if a.name == tracing.FEEDBACK_NAME]
    assert len(fb) == 1 and fb[0].feedback.value is True and fb[0].rationale == "wrong retention"
    assert fb[0].source.source_type == "HUMAN" and trace.info.tags["ragexp.marked_wrong"] == "true"
    assert mining.from_trace(trace).marked_wrong
    for bad in ("tr-" + "0" * 32, "not-a-trace", ""):
        r = http.post("/feedback", json={"trace_id": bad})
        assert r.status_code == 404 and "unknown trace_id" in r.json()["error"]
    assert http.post("/feedback", json={"wrong": True}).status_code == 422
    assert http.post("/feedback", json={"trace_id": trace_id,
                                        "comment": "x" * 2001}).status_code == 413
    off = untraced(engine)
    r = TestClient(create_app(off)).post("/answer", json={"question": "What is BD-2110?"})
    assert r.status_code == 200 and r.json()["trace_id"] is None


def answered(question="How do I rotate the ledger key?", answer="", **kw) -> Served:
    fields = {"refused": False, "confidence": 0.5, "threshold": 0.3, **kw}
    return Served("tr-" + "1" * 32, "answer", question, answer=answer or question, **fields)


def test_flags_one_reason_each_and_the_overlap_formula():
    assert mining.flags(answered()) == []
    assert mining.flags(answered(marked_wrong=True)) == ["marked_wrong"]
    assert mining.flags(answered(dropped=2)) == ["citations_dropped"]
    assert mining.flags(answered(confidence=0.2)) == ["answered_below_threshold"]
    refused = Served("t", "answer", "q x", refused=True, confidence=0.3, threshold=0.3)
    assert mining.flags(refused) == ["refused_confident"]  # at the threshold is confident
    below = Served("t", "answer", "q x", refused=True, confidence=0.29, threshold=0.3)
    assert mining.flags(below) == []
    # question terms (stemmed, stopwords out): rotat, ledger, key -> 1 of 3 in the answer
    q = "How do I rotate the ledger key?"
    assert mining.overlap(q, "The ledger is stored on disk.") == pytest.approx(1 / 3)
    assert mining.flags(answered(q, "The ledger is stored on disk.")) == []  # 1/3 >= 0.3
    assert mining.flags(answered(q, "The ledger is stored on disk."), min_overlap=0.34) == [
        "low_overlap"]
    assert mining.flags(answered(q, "Snapshots are kept for a week.")) == ["low_overlap"]
    assert mining.flags(Served("t", "answer", q, refused=True, confidence=0.1, threshold=0.3,
                               answer="")) == []  # a refusal has no answer to overlap
    search = Served("t", "search", "anything", marked_wrong=True)
    assert mining.flags(search) == ["marked_wrong"]


def test_the_summary_has_a_table_only_when_there_are_modes():
    """A trial: with nothing flagged, ``traces mine`` printed a table header of no rows."""
    assert mining.table([], 12, 0) == "12 traces read, 0 flagged, 0 failure modes"
    mode = mining.Mode("m1", "low_overlap", "ledger key", [answered("Where is the | key?")])
    assert mining.table([mode], 12, 1).splitlines() == [
        "12 traces read, 1 flagged, 1 failure modes", "",
        "| mode | reason | traces | commonest terms | example question |", "|---|---|---|---|---|",
        "| m1 | low_overlap | 1 | ledger key | Where is the \\| key? |"]


def test_modes_match_scipy_hierarchical_clustering():
    from scipy.cluster.hierarchy import fcluster, linkage

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 16))
    vectors = np.vstack([c + 0.15 * rng.normal(size=(5, 16)) for c in centres])
    order = rng.permutation(len(vectors))
    vectors = vectors[order]
    members = [(answered(f"question {i}", dropped=1), ["citations_dropped"])
               for i in range(len(vectors))]
    lookup = {f"question {i}": v for i, v in enumerate(vectors)}
    found = mining.modes(members, lambda texts: np.array([lookup[t] for t in texts]), 0.5)
    ours = sorted(sorted(s.question for s in m.members) for m in found)
    ref_labels = fcluster(linkage(vectors, method="average", metric="cosine"), t=0.5,
                          criterion="distance")
    ref = sorted(sorted(f"question {i}" for i in np.flatnonzero(ref_labels == lab))
                 for lab in set(ref_labels))
    assert ours == ref and len(ref) == 3
    assert {m.reason for m in found} == {"citations_dropped"}
    assert [m.name for m in found] == ["citations_dropped/1", "citations_dropped/2",
                                       "citations_dropped/3"]


def write(path, records, head="// candidates\n"):
    path.write_text(head + "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_accept_validates_like_the_golden_set(tmp_path):
    from ragexp.cli import traces as traces_cli
    from ragexp.data import shipped
    from ragexp.data.golden import GoldenError

    corpus, golden = shipped.path("handbook/corpus"), [shipped.path("handbook/golden")]
    good = {"id": "mined-1", "kind": "factual", "question": "How long are dead letters kept?",
            "answer": "14 days", "mode": "refused_confident/1", "trace_id": "tr-x",
            "evidence": [{"doc": "concepts/retries-and-dead-letters.md",
                          "quote": "Dead-lettered jobs are kept for **14 days**"}]}
    bad_quote = {**good, "id": "mined-2",
                 "evidence": [{"doc": "concepts/retries-and-dead-letters.md",
                               "quote": "kept for 15 days"}]}
    no_answer = {**good, "id": "mined-3", "answer": ""}
    cands, into = tmp_path / "cands.jsonl", tmp_path / "golden" / "mined.jsonl"
    write(cands, [good, bad_quote, no_answer])
    with pytest.raises(GoldenError) as err:
        traces_cli.accept(cands, into, None, corpus, golden)
    text = str(err.value)
    assert f"{cands}:3: mined-2: quote not found" in text
    assert f"{cands}:4: mined-3: answerable question has no reference answer" in text
    assert not into.exists()
    added = traces_cli.accept(cands, into, ["mined-1"], corpus, golden)
    assert [r["id"] for r in added] == ["mined-1"]
    kept = [json.loads(line) for line in into.read_text().splitlines()]
    assert kept == [good]  # the mode and trace id stay with the question
    with pytest.raises(GoldenError, match="duplicate id 'mined-1'"):
        traces_cli.accept(cands, into, ["mined-1"], corpus, golden)
    with pytest.raises(NotFound, match="mined-9"):
        traces_cli.accept(cands, into, ["mined-9"], corpus, golden)
    clash = {**good, "id": "a-01"}  # an id the shipped golden set already has
    write(cands, [clash])
    with pytest.raises(GoldenError, match="duplicate id .a-01."):
        traces_cli.accept(cands, into, None, corpus, golden)
    assert len(into.read_text().splitlines()) == 1


# --- planted faults: each must be caught by the cases mined from its own traffic -------------

FAULTS = {  # fault -> the reason its traces must be flagged for
    "reversed_retriever": "refused_confident",
    "citations_stripped": "citations_dropped",
    "always_refuses": "refused_confident",
}


def untraced(engine: Engine) -> Engine:
    out = Engine.__new__(Engine)
    out.__dict__.update(engine.__dict__)
    out.tracer = tracing.OFF
    return out


def variant(engine: Engine, fault: str) -> Engine:
    import planted

    out = Engine.__new__(Engine)
    out.__dict__.update(engine.__dict__)
    if fault == "reversed_retriever":
        out.retriever = planted.ReversedRetriever(engine.retriever)
    elif fault == "citations_stripped":
        out.answerer = planted.StrippedCitations(engine.answerer)
    elif fault == "always_refuses":
        out.answerer = planted.AlwaysRefuses()
    out.tracer = tracing.Tracer(True, f"serve-{fault}", engine.run_id)
    return out


@pytest.fixture(scope="module")
def traffic(served, golden):
    """Every golden question served once by the healthy engine and by each faulty one, each
    into its own experiment; returns {name: (engine, [Served])}."""
    _, _, engine = served
    out = {}
    for name in ("healthy", *FAULTS):
        e = variant(engine, name)
        for q in golden:
            e.answer(q.text)
        e.tracer.flush()
        out[name] = (e, mining.read(f"serve-{name}"))
        assert len(out[name][1]) == len(golden)
    return out


def share(traces: list[Served], reason: str) -> tuple[int, int]:
    return sum(reason in mining.flags(s) for s in traces), len(traces)


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_planted_fault_is_flagged_far_more_than_the_healthy_server(traffic, fault):
    from scipy.stats import fisher_exact

    reason = FAULTS[fault]
    bad, n = share(traffic[fault][1], reason)
    good, m = share(traffic["healthy"][1], reason)
    _, p = fisher_exact([[bad, n - bad], [good, m - good]], alternative="greater")
    assert p < 1e-3, (fault, bad, n, good, m)
    if fault == "citations_stripped":
        assert good == 0  # the extractive answerer always cites what it copies
    if fault == "always_refuses":  # every confident question, exactly
        confident = sum(s.confidence >= s.threshold for s in traffic[fault][1])
        assert bad == confident > 0


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_mined_cases_once_accepted_catch_the_fault(traffic, fault, tmp_path):
    """`traces mine` on the faulty server's traffic -> candidates with their mode; a person
    corrects them (here: the golden set's own labels for that question) and accepts them; on the
    accepted questions the faulty server does measurably worse than the healthy one."""
    from ragexp.cli import main as cli
    from ragexp.cli import traces as traces_cli
    from ragexp.data import shipped
    from ragexp.data.golden import load_corpus, load_golden
    from ragexp.data.relevance import span_qrels

    healthy, faulty = (untraced(traffic[name][0]) for name in ("healthy", fault))
    out = tmp_path / "candidates.jsonl"
    assert cli.main(["traces", "mine", "--experiment", f"serve-{fault}", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()
               if not line.startswith("//")]
    assert records and all(r["mode"].startswith(r["reason"] + "/") for r in records)
    assert FAULTS[fault] in {r["reason"] for r in records}
    assert len({r["id"] for r in records}) == len(records)
    labelled = {}  # question text -> its labelled golden record (the person's knowledge)
    for path in sorted(Path(shipped.path("handbook/golden")).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("//"):
                rec = json.loads(line)
                labelled[rec["question"]] = rec
    corrected = [{**r, "kind": labelled[r["question"]]["kind"],
                  "answer": labelled[r["question"]].get("answer", ""),
                  "evidence": labelled[r["question"]].get("evidence", [])} for r in records]
    fixed, into = tmp_path / "checked.jsonl", tmp_path / "golden" / "mined.jsonl"
    write(fixed, corrected)
    corpus = shipped.path("handbook/corpus")
    added = traces_cli.accept(fixed, into, None, corpus, [shipped.path("handbook/golden")])
    assert len(added) == len(corrected)
    mined = load_golden(into, load_corpus(corpus))
    assert {q.qid for q in mined} == {r["id"] for r in corrected}
    answerable = [q for q in mined if q.answerable]
    if fault == "reversed_retriever":
        qrels = span_qrels(answerable, healthy.resources.chunks)

        def success(engine):
            # at the depth answers are ranked at (the run's k), as the traffic was
            return np.mean([bool({h.chunk_id for h in engine.search(q.text, engine.cfg.k)[:10]}
                                 & set(qrels[q.qid])) for q in answerable])

        assert success(healthy) - success(faulty) >= 0.3, (success(healthy), success(faulty))
    else:
        def rate(engine):
            return np.mean([not engine.answer(q.text).refused for q in answerable])

        assert rate(faulty) == 0 and rate(healthy) >= 0.3, (rate(healthy), rate(faulty))


@pytest.mark.slow
def test_mode_labels_are_the_same_in_every_process():
    """A failure mode's label is its commonest terms; ties are kept in text order, not in a
    set's order (which follows the process's string-hash seed)."""
    import os
    import subprocess
    import sys

    code = ("from ragexp.serving.mining import Served, modes\n"
            "s = Served(trace_id='t', request='answer',\n"
            "           question='Can I pause a queue without losing its jobs?')\n"
            "print([m.label for m in modes([(s, ['marked_wrong'])], embed=None)])\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2", "3", "4", "5")}
    assert len(outs) == 1 and "paus queue" in next(iter(outs)), outs
