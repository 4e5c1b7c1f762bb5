"""Compare, promote and serve, on real runs logged into a temporary MLflow store."""

from __future__ import annotations

import httpx
import pandas as pd
import pytest
from loopback import serving
from workspaces import FAILING, record_failed_run, record_run

from ragexp.answer.base import REFUSAL, Source, check_citations
from ragexp.config import schema
from ragexp.decide import compare
from ragexp.run import forked
from ragexp.serving.engine import Engine, ServingError, champion_run_id
from ragexp.serving.promote import PromotionRefused, promote
from ragexp.tracking import store as tracking

schema.register()
HASH = ["embedder=hash", "embedder.dim=256"]


@pytest.fixture(scope="module")
def store(module_mlflow_store):
    tmp = module_mlflow_store.folder
    base = [*HASH, f"cache_dir={tmp / 'cache'}", "progress=false"]
    ids = {
        "bm25": record_run(*base, "retriever=bm25", "reranker=none", "+ablation=bm25")["run_id"],
        "dense": record_run(*base, "retriever=dense", "reranker=none")["run_id"],
        "small": record_run(*base, "retriever=dense", "reranker=none", "chunking.max_words=40",
                            "chunking.overlap_words=0")["run_id"],
    }
    ids["failed"] = record_failed_run(*base, *FAILING)
    return tmp, ids


def test_compare_table_shows_differing_keys_and_metrics(store):
    _, ids = store
    df = compare.runs_frame("ragexp-handbook")
    assert set(df["run_id"]) == {ids["bm25"], ids["dense"], ids["small"]}
    tab = compare.table(df)
    assert "retriever.name" in tab.columns and "chunking.max_words" in tab.columns
    assert "embedder.name" not in tab.columns  # same in every run
    assert {"rr_at_10", "ndcg_at_10", "rr_at_10.identifier", "abstain.refused_unanswerable",
            "abstain.cv.refused_answerable"} <= set(tab.columns)
    md = compare.render(tab)
    assert md.count("\n") == len(tab) + 1 and ids["bm25"][:8] in md
    csv = pd.read_csv(__import__("io").StringIO(compare.render(tab, "csv")))
    assert list(csv.columns) == list(tab.columns)


def test_paired_tests_match_independent_computation_and_are_adjusted_together(store):
    _, ids = store
    df = compare.runs_frame("ragexp-handbook", run_ids=[ids["dense"], ids["small"]])
    results = compare.baseline_tests(df, ids["bm25"], ("RR@10", "nDCG@10"))
    assert set(results) == {ids["dense"], ids["small"]}
    run, base = compare.per_question(ids["dense"]), compare.per_question(ids["bm25"])
    m = run.merge(base, on="id", suffixes=("", "_b"))
    m = m[m["kind"] != "unanswerable"]
    d = (m["rr_at_10"] - m["rr_at_10_b"]).to_numpy()
    tests = results[ids["dense"]]
    overall = tests[0]
    assert (overall.measure, overall.kind, overall.n) == ("RR@10", "all", len(d))
    assert overall.mean_diff == pytest.approx(d.mean())
    assert overall.ci_low <= d.mean() <= overall.ci_high
    by_kind = {t.kind: t for t in tests if t.measure == "RR@10" and t.kind != "all"}
    assert set(by_kind) == set(m["kind"])
    for kind, g in m.groupby("kind"):
        assert by_kind[kind].mean_diff == pytest.approx(
            (g["rr_at_10"] - g["rr_at_10_b"]).mean())
    # one family: 2 runs x 2 measures x (all + 4 kinds) = 20 tests, Holm over all of them
    flat = [t for r in results.values() for t in r]
    assert len(flat) == 20
    from statsmodels.stats.multitest import multipletests

    assert [t.p_adj for t in flat] == pytest.approx(
        list(multipletests([t.p for t in flat], method="holm")[1]))


def test_promote_refuses_failed_unknown_and_metricless_runs(store):
    _, ids = store
    with pytest.raises(PromotionRefused, match="FAILED"):
        promote(ids["failed"])
    with pytest.raises(PromotionRefused, match="no run"):
        promote("0" * 32)
    c = tracking.client()
    bare = c.create_run(tracking.ensure_experiment("ragexp-handbook")).info.run_id
    c.set_terminated(bare, "FINISHED")
    with pytest.raises(PromotionRefused, match="lacks metrics"):
        promote(bare)
    running = c.create_run(tracking.ensure_experiment("ragexp-handbook")).info.run_id
    with pytest.raises(PromotionRefused, match="RUNNING"):
        promote(running)


def test_promote_moves_champion_and_keeps_versions_and_gate(store):
    _, ids = store
    c = tracking.client()
    metric = {k: c.get_run(ids[k]).data.metrics["rr_at_10"] for k in ("bm25", "dense", "small")}
    worst = min(metric, key=metric.get)
    best = max(metric, key=metric.get)
    v1, _ = promote(ids[worst])
    assert champion_run_id() == ids[worst]
    v2, msg = promote(ids[best])
    assert champion_run_id() == ids[best] and int(v2) == int(v1) + 1
    assert f"was version {v1}" in msg
    assert c.get_model_version(compare_name(), v1).run_id == ids[worst]  # kept
    from ragexp.decide.gate import Rule

    with pytest.raises(PromotionRefused, match="gate refused"):
        promote(ids[worst], rule=Rule())
    assert champion_run_id() == ids[best]


def compare_name():
    from ragexp.serving.engine import MODEL_NAME

    return MODEL_NAME


@pytest.fixture(scope="module")
def engine(store):
    _, ids = store
    return Engine.from_run(ids["bm25"])


def test_engine_search_answer_and_refusal(engine):
    hits = engine.search("What does BD-2110 mean?", 3)
    assert len(hits) == 3 and [h.rank for h in hits] == [1, 2, 3]
    deep = engine.search("ledger disk full", 30)  # deeper than the run's k=10: still 30 hits
    assert len(deep) == 30 and [h.chunk_id for h in deep[:3]] == [
        h.chunk_id for h in engine.search("ledger disk full", 3)]
    assert any("BD-2110" in h.text for h in hits)
    ans = engine.answer("What does BD-2110 mean?")
    assert not ans.refused
    cited = ans.cited_chunks
    assert cited and set(cited) <= {s.chunk_id for s in ans.sources}
    strict = Engine.__new__(Engine)
    strict.__dict__.update(engine.__dict__)
    strict.threshold = float("inf")
    refused = strict.answer("What does BD-2110 mean?")
    assert refused.text == REFUSAL and refused.refused
    assert "threshold" in refused.reason and refused.signal == ans.signal


def test_citations_that_do_not_check_out_are_dropped(chunks):
    from ragexp.index.bm25 import BM25Index

    a, b = chunks[0], chunks[1]
    sentence = " ".join(a.text.split("\n")[1].split()[:8])
    sources = [Source(1, a.chunk_id, a.doc_id, a.heading), Source(2, b.chunk_id, b.doc_id,
                                                                     b.heading)]
    lookup = {a.chunk_id: a, b.chunk_id: b}
    kept, why = check_citations([f"{sentence} [1]", f"{sentence} [2]", f"{sentence} [7]",
                                 "Made-up claim. [1]", sentence], sources, lookup,
                                BM25Index().fit([c.text for c in chunks]).coverage)
    assert kept == [f"{sentence} [1]"] and len(why) == 4


def test_champion_missing_is_a_clear_error(mlflow_store):
    with pytest.raises(ServingError, match="promote a run first"):
        champion_run_id()


@pytest.mark.slow
def test_http_api_through_real_uvicorn(engine):
    from ragexp.serving.api import create_app

    with serving(create_app(engine)) as base:
        with httpx.Client(base_url=base, timeout=30) as http:
            r = http.get("/health")
            assert r.status_code == 200 and r.json()["run_id"] == engine.run_id
            assert r.headers["X-Ragexp-Run"] == engine.run_id
            r = http.get("/search", params={"q": "ledger disk full", "k": 4})
            hits = r.json()["hits"]
            assert r.status_code == 200 and len(hits) == 4
            r = http.post("/answer", json={"question": "What does BD-2110 mean?"})
            assert r.status_code == 200 and r.json()["run_id"] == engine.run_id
            assert "refused" in r.json() and r.json()["sources"]
            r = http.get("/explain", params={"q": "ledger disk full",
                                             "chunk_id": hits[0]["chunk_id"]})
            body = r.json()
            assert r.status_code == 200
            assert sum(t["contribution"] for t in body["terms"]) == pytest.approx(body["score"])
            assert body["score"] > 0
            bad = [http.get("/search", params={"q": "x", "k": 0}),
                   http.get("/search", params={"q": "x", "k": 51}),
                   http.get("/search", params={"q": "  "}),
                   http.get("/search", params={"q": "x" * 2001}),
                   http.post("/answer", json={"question": ""}),
                   http.post("/answer", json={"question": "y" * 2001}),
                   http.post("/answer", json={"q": "wrong field"}),
                   http.post("/answer", content=b"{not json", headers={
                       "content-type": "application/json"}),
                   http.get("/explain", params={"q": "x", "chunk_id": "nope#0"}),
                   http.get("/search", params={"q": "x", "k": "many"})]
            for resp in bad:
                assert 400 <= resp.status_code < 500, resp.text
                assert resp.json()["error"] and resp.json()["run_id"] == engine.run_id
            assert bad[0].status_code == 400 and "k must be between" in bad[0].json()["error"]
            assert bad[3].status_code == 413 and "2000" in bad[3].json()["error"]
            assert bad[8].status_code == 404 and "nope#0" in bad[8].json()["error"]


def test_cli_compare_promote_search_ask(store, capsys):
    from ragexp.cli import main as cli

    _, ids = store
    assert cli.main(["compare", "--baseline", ids["bm25"], "--wide"]) == 0
    out = capsys.readouterr().out
    assert "ΔnDCG@10 [95% CI]" in out and "p_adj(RR@10)" in out and "baseline" in out
    assert "randomisation" in out and "Holm-adjusted over the" in out
    assert cli.main(["compare", "--format", "csv", "--runs", ids["bm25"], ids["dense"]]) == 0
    csv = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert list(csv["run"]) == [ids["bm25"][:8], ids["dense"][:8]]
    assert cli.main(["promote", ids["failed"]]) == 2  # a refused input, not a gate's "no"
    assert "refused" in capsys.readouterr().err
    # a FAILED run has no per-question table to test: one line, exit 2 (a trial: exit 1)
    assert cli.main(["compare", "--runs", ids["bm25"], ids["failed"], "--baseline",
                     ids["bm25"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and ids["failed"] in err[0]
    assert cli.main(["search", "ledger disk full", "-k", "2", "--run", ids["bm25"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].lstrip().startswith("1.") and lines[1].lstrip().startswith("2.")
    assert cli.main(["search", "   ", "--run", ids["bm25"]]) == 2
    assert "query must not be empty" in capsys.readouterr().err
    assert cli.main(["search", "ledger", "-k", "0", "--run", ids["bm25"]]) == 2
    assert "k must be between 1 and 50" in capsys.readouterr().err
    assert cli.main(["ask", "q" * 2001, "--run", ids["bm25"]]) == 2
    assert "limit is 2000" in capsys.readouterr().err
    assert cli.main(["ask", "What does BD-2110 mean?", "--run", ids["bm25"], "--json"]) == 0
    body = __import__("json").loads(capsys.readouterr().out)
    assert body["run_id"] == ids["bm25"] and {"text", "refused", "sources"} <= set(body)


def test_search_and_ask_say_why_no_passage_matched_for_the_run_s_retriever(store, capsys):
    """It printed only "(run ...)" for a query sharing no term with the corpus, then "none
    shares a term with it" for every retriever: false of a dense run, which ranks passages
    sharing no term (死信 finds five) and ranks none only for a query that embeds to the zero
    vector."""
    from ragexp.cli import main as cli

    _, ids = store
    assert cli.main(["search", "死信", "--run", ids["bm25"]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["no passage matched the query: no passage shares a term with the query: "
                   "none holds any of its terms after analysis (lowercased, stopwords dropped, "
                   "English words stemmed): 死, 死信, 信", f"(run {ids['bm25']})"]
    assert cli.main(["search", "死信", "--run", ids["dense"]]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5 + 1
    assert cli.main(["search", "what is it?", "--run", ids["dense"]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no passage matched the query: the hash embedder turns the query "
                             "into the zero vector (the analyser leaves it no term")
    assert "shares a term" not in out[0] and out[1:] == [f"(run {ids['dense']})"]
    assert cli.main(["ask", "what is it?", "--run", ids["dense"], "--json"]) == 0
    body = __import__("json").loads(capsys.readouterr().out)
    assert body["refused"] and body["sources"] == []
    assert body["reason"].startswith("nothing retrieved: the hash embedder turns the query into "
                                     "the zero vector")


@pytest.mark.slow
def test_search_and_ask_read_the_run_in_a_child_and_say_what_they_said_here(store, capsys,
                                                                            monkeypatch):
    """``search``/``ask`` as commands (their own process, which reads the run's or the
    champion's record in a forked child: ``cli.main._engine``) print what they print run in
    this process without forking: hits, answer, and the refusals of a FAILED run and an unknown
    id."""
    import subprocess
    import sys

    from cli_runs import ROOT, cli_env

    from ragexp.cli import main as cli

    folder, ids = store
    if tracking.champion() is None:
        promote(ids["bm25"])
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    for argv in (["search", "ledger disk full", "-k", "3", "--run", ids["bm25"][:8]],
                 ["search", "ledger disk full", "-k", "3"],
                 ["ask", "What does BD-2110 mean?", "--run", ids["bm25"], "--json"],
                 ["ask", "What does BD-2110 mean?"],
                 ["search", "ledger", "--run", ids["failed"]],
                 ["search", "ledger", "--run", "ffffffffff"]):
        code = cli.main(argv)
        here = capsys.readouterr()
        done = subprocess.run([sys.executable, "-m", "ragexp.cli.main", *argv], cwd=ROOT,
                              env=cli_env(folder, tracking.tracking_uri()),
                              capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stdout) == (code, here.out), argv
        assert here.err.strip().splitlines()[-1:] == done.stderr.strip().splitlines()[-1:]
        assert code == (2 if argv[-1] in (ids["failed"], "ffffffffff") else 0)


@pytest.mark.slow
def test_search_and_ask_of_a_recorded_run_import_no_pandas_and_not_the_runners_work(store):
    """The ``ragexp search``/``ask`` process that ranks a recorded run's question imports no
    pandas, and of ``ragexp.run`` only the process helpers the command line shares with the
    runner (``console``: a reader gone; ``forked``: the record read in a child), not its
    pipeline, Hydra app or sweep."""
    import json
    import subprocess
    import sys

    from cli_runs import ROOT, cli_env

    folder, ids = store
    code = ("import json, sys\nfrom ragexp.cli.main import main\ncode = main(sys.argv[1:])\n"
            "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'"
            " or m.startswith('ragexp.run'))]))")
    for argv in (["search", "ledger disk full", "--run", ids["bm25"]],
                 ["ask", "What does BD-2110 mean?", "--run", ids["dense"]]):
        done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT,
                              env=cli_env(folder, tracking.tracking_uri()),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        exit_code, loaded = json.loads(done.stdout.splitlines()[-1])
        assert exit_code == 0 and set(loaded) <= {"ragexp.run", "ragexp.run.console",
                                                  "ragexp.run.forked"}, (argv, loaded)


def test_search_and_ask_print_no_empty_heading_for_a_heading_less_document(monkeypatch,
                                                                           capsys):
    """A chunk of a document without headings printed ``table.md#7  ()``."""
    from types import SimpleNamespace

    from ragexp.answer.base import Answer, Source
    from ragexp.cli import main as cli
    from ragexp.serving.engine import Hit

    hits = [Hit(1, "table.md#7", "table.md", "", 0.5, "x"),
            Hit(2, "guide.md#0", "guide.md", "Guide > Setup", 0.25, "y")]
    sources = [Source(1, "table.md#7", "table.md", ""),
               Source(2, "guide.md#0", "guide.md", "Guide > Setup")]
    answer = Answer(question="table?", text="It is so [1][2].", refused=False, signal=0.9,
                    threshold=0.1, sources=sources)
    engine = SimpleNamespace(run_id="r1", search=lambda q, k: hits, answer=lambda q: answer)
    monkeypatch.setattr(cli, "_engine", lambda args, pyfunc=False: engine)
    assert cli.main(["search", "table", "--run", "r1"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        " 1. 0.5000  table.md#7", " 2. 0.2500  guide.md#0  (Guide > Setup)"]
    assert cli.main(["ask", "table?", "--run", "r1"]) == 0
    out = capsys.readouterr().out
    assert "  [1] table.md\n  [2] guide.md — Guide > Setup\n" in out
