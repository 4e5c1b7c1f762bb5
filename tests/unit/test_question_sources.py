"""Hand-written and generated questions side by side: the ``source`` field, several question
files per dataset, measures per source, Kendall's tau against ``scipy.stats.kendalltau``, and
the sources' choices and agreement (``decide.sources``) on hand-made per-question tables."""

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


def table(scores: dict[str, list[float]], generated: dict[str, list[float]]) -> dict:
    """Per-question tables of runs over 3 hand-written and len(generated) generated questions."""
    out = {}
    for run in scores:
        rows = [{"id": f"h{i}", "source": "hand", "ndcg_at_10": v}
                for i, v in enumerate(scores[run])]
        rows += [{"id": f"g{i}", "source": "generated", "ndcg_at_10": v}
                 for i, v in enumerate(generated[run])]
        out[run] = pd.DataFrame(rows)
    return out


def test_choices_and_agreement_between_sources():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 40)
    hand = {"a": [.9, .8, .9], "b": [.5, .4, .6], "c": [.1, .2, .1], "d": [.3, .2, .4]}
    # generated: d > c > b > a, each far apart on 40 questions: order reversed on the top
    gen = {r: list(np.clip(base * 0.1 + off, 0, 1))
           for r, off in {"a": .1, "b": .3, "c": .5, "d": .8}.items()}
    chosen = sources.choices(table(hand, gen), "nDCG@10")
    assert chosen["hand"].best == "a" and chosen["generated"].best == "d"
    assert chosen["generated"].tied == ("d",) and chosen["hand"].n == 3
    [pair] = sources.agreement(chosen)
    means_h = [np.mean(hand[r]) for r in "abcd"]
    means_g = [np.mean(gen[r]) for r in "abcd"]
    assert (pair.a, pair.b) == ("hand", "generated")
    assert pair.tau == pytest.approx(sps.kendalltau(means_h, means_g).statistic)
    assert not pair.winner_agrees and not pair.tied_agree and pair.warn
    shown = sources.lines(chosen, [pair], {}, "nDCG@10", "hand")
    assert any("rank configurations unlike yours" in s for s in shown)


def test_the_objective_source_selects_the_rows_that_decide():
    t = table({"a": [1, 0, 1]}, {"a": [0, 0]})["a"]
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
def test_a_sweep_over_both_sources_reports_their_agreement(tmp_path):
    """Three retrievers on the handbook's hand-written and generated questions: the parent's
    tau is scipy's over the children's per-source means, and compare and gate show it."""
    proc = run_app(tmp_path, "-m", "retriever=bm25,dense,hybrid", "embedder=hash",
                   "reranker=none", f"dataset.questions=[{GOLDEN},{GENERATED}]",
                   "sweep_report=false", f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hand vs generated: Kendall's tau" in proc.stdout
    df = search_runs(store_uri(tmp_path), experiment_names=["ragexp-handbook"])
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    children = df[df["tags.mlflow.parentRunId"] == parent["run_id"]]
    hand, gen = (children[f"metrics.ndcg_at_10.source.{s}"] for s in ("hand", "generated"))
    assert parent["metrics.sources.hand_vs_generated.kendall_tau"] == pytest.approx(
        sps.kendalltau(hand, gen).statistic)
    assert parent["metrics.sources.hand_vs_generated.winner_agrees"] == float(
        hand.idxmax() == gen.idxmax())
    note = json.loads(parent["tags.ragexp.sources"])
    assert parent["metrics.sources.hand.tied_with_best.count"] == len(
        note["sources"]["hand"]["tied"])
    # the objective (hand) decides: the parent's best is the best on the hand-written questions
    assert parent["tags.ragexp.best_run"] == children.loc[hand.idxmax(), "run_id"]
    env = cli_env(tmp_path)
    with tracking_store(tmp_path):  # the sweep's store, for the commands run here
        for argv, want in ((["compare", "--parent", parent["run_id"]], "hand vs generated"),
                           (["gate", children["run_id"].iloc[0], "--against",
                             children["run_id"].iloc[1]], "questions: source hand")):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                main(argv)
            assert want in out.getvalue(), out.getvalue()
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


def test_a_source_on_which_every_configuration_ties_has_no_tau_and_no_warning():
    hand = {"a": [.9, .8, .9], "b": [.5, .4, .6], "c": [.1, .2, .1]}
    gen = {r: [1.0, 1.0, 1.0, 1.0] for r in "abc"}  # every run scores the same
    chosen = sources.choices(table(hand, gen), "nDCG@10")
    [pair] = sources.agreement(chosen)
    assert np.isnan(sps.kendalltau([.9, .5, .1], [1.0, 1.0, 1.0]).statistic)  # scipy agrees
    assert np.isnan(pair.tau) and not pair.warn
    shown = sources.lines(chosen, [pair], {}, "nDCG@10", "hand")
    assert any("Kendall's tau undefined (every configuration ties on one source)" in s
               for s in shown)
    assert not any(s.startswith("warning") for s in shown)


def test_the_warning_says_it_once():
    hand = {"a": [.9, .8, .9], "b": [.5, .4, .6], "c": [.1, .2, .1]}
    gen = {"a": [.1, .1, .1, .2], "b": [.5, .5, .4, .5], "c": [.9, .8, .9, .9]}
    chosen = sources.choices(table(hand, gen), "nDCG@10")
    shown = sources.lines(chosen, sources.agreement(chosen), {}, "nDCG@10", "hand")
    [warning] = [s for s in shown if s.startswith("warning")]
    assert warning.count("unlike") == 1 and "unlike yours (Kendall's tau -1.00 < 0.6)" in warning


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
