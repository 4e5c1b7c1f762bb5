"""Hand-written and generated questions side by side: the ``source`` field, several question
files per dataset, measures per source, Kendall's tau against ``scipy.stats.kendalltau``, which
questions decide, and a sweep over both sources whose certificate compare, gate and the page
show (the certificate's figures: ``test_certificate``)."""

from __future__ import annotations

import contextlib
import io
import json

import mlflow
import numpy as np
import pandas as pd
import pytest
from cli_runs import cli_env, run_app
from scipy import stats as sps
from workspaces import search_runs, store_uri, tracking_store

from ragexp.cli.main import main
from ragexp.data import golden, shipped
from ragexp.data.datasets import MarkdownDataset
from ragexp.decide import selection, sources
from ragexp.errors import InvalidValue
from ragexp.evaluation import stats
from ragexp.evaluation.metrics import aggregate
from ragexp.records import Query

GENERATED = shipped.path("handbook/golden/generated")
CORPUS, GOLDEN = shipped.path("handbook/corpus"), shipped.path("handbook/golden")


@pytest.mark.parametrize("seed", range(6))
def test_kendall_tau_matches_scipy_with_and_without_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 15))
    x = rng.integers(0, 4 if seed % 2 else 1000, n).astype(float)
    y = x + rng.normal(0, 1.5, n).round(0 if seed % 2 else 3)
    want = sps.kendalltau(x, y).statistic
    got = stats.kendall_tau(x, y)
    assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, abs=1e-12)


def test_kendall_tau_bounds_and_bad_input():
    assert stats.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert stats.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert np.isnan(stats.kendall_tau([1, 1, 1], [1, 2, 3]))
    with pytest.raises(InvalidValue):
        stats.kendall_tau([1], [1])


def test_a_dataset_reads_several_question_files_and_keeps_their_sources(docs, golden):
    ds = MarkdownDataset(corpus_dir=CORPUS, questions=[GOLDEN, GENERATED])
    by_source = pd.Series([q.source for q in ds.queries()]).value_counts().to_dict()
    n_generated = len(open(f"{GENERATED}/known_item.jsonl").read().splitlines())
    assert by_source == {"hand": len(golden), "generated": n_generated}
    one = MarkdownDataset(corpus_dir=CORPUS, questions=GOLDEN).fingerprint()
    two = ds.fingerprint()
    assert two["corpus_hash"] == one["corpus_hash"] and two["golden_hash"] != one["golden_hash"]


def test_a_source_must_be_a_name(tmp_path, docs):
    rec = {"id": "x", "kind": "factual", "question": "q", "answer": "a", "source": "two words",
           "evidence": [{"doc": "overview.md"}]}
    (tmp_path / "q.jsonl").write_text(json.dumps(rec) + "\n")
    _, problems = golden.check_golden(tmp_path / "q.jsonl", docs)
    assert len(problems) == 1 and "source 'two words' is not a name" in problems[0].message


def test_measures_are_aggregated_per_source_only_with_several():
    scores = {"h1": {"ndcg_at_10": 1.0}, "h2": {"ndcg_at_10": 0.0}, "g1": {"ndcg_at_10": 0.25}}
    qs = [Query("h1", "a", "factual"), Query("h2", "b", "semantic"),
          Query("g1", "c", "known_item", source="generated")]
    out = aggregate(scores, qs)
    assert out["ndcg_at_10.source.hand"] == 0.5 and out["ndcg_at_10.source.generated"] == 0.25
    assert out["ndcg_at_10"] == pytest.approx(1.25 / 3)
    hand_only = aggregate({k: scores[k] for k in ("h1", "h2")}, qs[:2])
    assert not any(".source." in k for k in hand_only)


def test_the_objective_source_selects_the_rows_that_decide():
    t = pd.DataFrame([{"id": f"h{i}", "source": "hand", "ndcg_at_10": v}
                      for i, v in enumerate([1, 0, 1])]
                     + [{"id": f"g{i}", "source": "generated", "ndcg_at_10": 0} for i in range(2)])
    assert len(sources.deciding(t, "hand")) == 3 and len(sources.deciding(t, "all")) == 5
    assert len(sources.deciding(t.drop(columns="source"), "generated")) == 5  # one source
    with pytest.raises(InvalidValue, match="sources are generated, hand"):
        sources.deciding(t, "llm")
    metrics = {"ndcg_at_10": 0.5, "ndcg_at_10.source.hand": 0.7,
               "ndcg_at_10.source.generated": 0.4}
    assert selection.objective(metrics, "nDCG@10", "hand") == 0.7
    assert selection.objective(metrics, "nDCG@10", "all") == 0.5
    with pytest.raises(InvalidValue, match="objective_source='llm'"):
        selection.objective(metrics, "nDCG@10", "llm")
    assert selection.objective({"ndcg_at_10": 0.5}, "nDCG@10", "hand") == 0.5


@pytest.mark.slow
def test_a_sweep_over_both_sources_logs_their_certificate(tmp_path):
    """Three retrievers on the handbook's hand-written and generated questions: the parent run
    holds the certificate (metrics and certificate.json), its tau scipy's over the children's
    per-source means; the sweep prints it, and compare, gate and the page show it."""
    proc = run_app(tmp_path, "-m", "retriever=bm25,dense,hybrid", "embedder=hash",
                   "reranker=none", f"dataset.questions=[{GOLDEN},{GENERATED}]",
                   "sweep_report=false", f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "question sets (nDCG@10; split halves" in proc.stdout
    assert "hand vs generated: tau " in proc.stdout
    df = search_runs(store_uri(tmp_path), experiment_names=["ragexp-handbook"])
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    children = df[df["tags.mlflow.parentRunId"] == parent["run_id"]]
    hand, gen = (children[f"metrics.ndcg_at_10.source.{s}"] for s in ("hand", "generated"))
    pre = "metrics.certificate.hand_vs_generated.ndcg_at_10"
    assert parent[f"{pre}.kendall_tau"] == pytest.approx(sps.kendalltau(hand, gen).statistic)
    assert parent[f"{pre}.tau_low"] <= parent[f"{pre}.kendall_tau"] <= parent[f"{pre}.tau_high"]
    assert parent[f"{pre}.winner_agrees"] == float(hand.idxmax() == gen.idxmax())
    with tracking_store(tmp_path):
        doc = sources.recorded(parent["run_id"])
    assert doc["lines"][0] in proc.stdout and doc["objective_source"] == "hand"
    n_hand = doc["sources"]["hand"]["measures"]["nDCG@10"]["scored"]
    assert parent["metrics.certificate.hand.ndcg_at_10.scored"] == n_hand
    assert parent["metrics.certificate.hand.questions"] == doc["sources"]["hand"]["questions"]
    assert parent["metrics.certificate.hand.ndcg_at_10.tied_with_best"] == len(
        doc["sources"]["hand"]["measures"]["nDCG@10"]["tied"])
    cover = doc["sources"]["generated"]["coverage"]
    assert 0 < cover["docs"] <= cover["docs_total"] and 0 < cover["sections"] <= cover[
        "sections_total"]
    assert parent["metrics.certificate.generated.coverage_docs"] == pytest.approx(
        cover["docs"] / cover["docs_total"])
    # the objective (hand) decides: the parent's best is the best on the hand-written questions
    assert parent["tags.ragexp.best_run"] == children.loc[hand.idxmax(), "run_id"]
    env = cli_env(tmp_path)
    with tracking_store(tmp_path):  # the sweep's store, for the commands run here
        for argv, want in ((["compare", "--parent", parent["run_id"]], doc["lines"][1]),
                           (["gate", children["run_id"].iloc[0], "--against",
                             children["run_id"].iloc[1]], "questions: source hand"),
                           (["gate", children["run_id"].iloc[0], "--against",
                             children["run_id"].iloc[1]], "the run's sweep: question sets")):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                main(argv)
            assert want in out.getvalue(), out.getvalue()
        # make tables' certificate (docs/results.md) and its short form (the README)
        from ragexp.cli import decisions

        shown = decisions.certificate_lines(children, "nDCG@10")
        assert shown[3] == "Q" + doc["lines"][0][1:]
        assert shown[5].startswith("- " + doc["lines"][1].split("; best ")[0])
        cert = decisions.certificate(children, "nDCG@10")
        assert sources.summary(cert)[0].startswith(f"hand: {n_hand} questions, ")
        # confirm on test uses the hand-written questions too, as the choice did
        best = parent["tags.ragexp.best_run"]
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["confirm", best, "--baseline", children["run_id"].iloc[0]
                         if children["run_id"].iloc[0] != best
                         else children["run_id"].iloc[1]]) == 0
        client = mlflow.tracking.MlflowClient(env["MLFLOW_TRACKING_URI"])
        confirmed = client.get_run(best).data
        test_run = client.get_run(confirmed.tags["ragexp.confirm.test_run"]).data.metrics
        assert confirmed.metrics["confirm.ndcg_at_10"] == test_run["ndcg_at_10.source.hand"]
        assert test_run["ndcg_at_10.source.hand"] != test_run["ndcg_at_10"]
        # the page's headline shows the hand questions' values, the ones the best is chosen on
        # (it showed every question's under that best)
        from ragexp.report import html, sweep_data

        page, _ = html.build(sweep_data.load(parent["run_id"]))
        key = "ndcg_at_10.source.hand"
        for _, child in children.iterrows():
            assert (f'data-k="head|{child["run_id"]}|{key}" '
                    f'data-v="{child[f"metrics.{key}"]!r}"') in page
        assert "of source hand (objective_source: the questions the best is chosen on" in page
        assert "<h2>Question sets: the certificate</h2>" in page
        assert f'data-k="cert|hand|questions" data-v="{float(n_hand)!r}"' in page


def test_tables_read_kinds_apart_from_sources_and_the_deciding_source():
    import pandas as pd

    from ragexp.decide import compare
    df = pd.DataFrame({"run_id": ["r1"], "params.objective_source": ["hand"],
                       "metrics.rr_at_10.factual": [0.5], "metrics.rr_at_10.known_item": [0.7],
                       "metrics.rr_at_10.source.hand": [0.4],
                       "metrics.rr_at_10.source.generated": [0.8]})
    assert compare.kinds_in(df, "rr_at_10") == ["factual", "known_item"]  # sources are no kind
    assert compare.deciding_source(df) == "hand"
    assert compare.deciding_source(df.drop(columns="params.objective_source")) == "hand"
    assert compare.deciding_source(df.assign(**{"params.objective_source": "all"})) == "all"


@pytest.mark.slow
def test_an_unknown_objective_source_is_refused_before_any_work(tmp_path):
    # objective_source=llm ran the whole job, recorded it FINISHED, then failed with a traceback
    # (exit 1); in a sweep the first skipped job's objective stopped the sweep
    questions = f"dataset.questions=[{GOLDEN},{GENERATED}]"
    one = run_app(tmp_path, questions, "embedder=hash", "retriever=bm25", "reranker=none",
                  "objective_source=llm")
    said = ("InvalidValue: objective_source='llm': the scored questions' sources are generated, "
            "hand (or all); nothing was run")
    assert one.returncode == 2 and said in one.stdout + one.stderr
    assert "Traceback" not in one.stdout + one.stderr
    # no run was created
    assert search_runs(store_uri(tmp_path), search_all_experiments=True).empty
    sweep = run_app(tmp_path, "-m", questions, "embedder=hash", "reranker=none",
                    "objective_source=llm", "retriever=bm25,dense",
                    f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert sweep.returncode == 1 and "sweep done: 2 failed" in sweep.stdout
    assert "Traceback" not in sweep.stdout + sweep.stderr


def test_refuse_unknown_takes_all_and_a_one_source_set():
    qs = [Query("a", "x", source="hand"), Query("b", "y", source="generated")]
    sources.refuse_unknown("all", qs)
    sources.refuse_unknown("generated", qs)
    sources.refuse_unknown("llm", qs[:1])  # one source: it decides whole
    with pytest.raises(InvalidValue, match="objective_source='hnd'"):
        sources.refuse_unknown("hnd", qs)
