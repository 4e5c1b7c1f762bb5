"""A sweep ends in a decision: each job against the sweep's baseline, the best run and those tied
with it, confirmation on held-out test questions, and an Optuna search driving ragexp."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_runs import run_app
from statsmodels.stats.multitest import multipletests
from workspaces import search_runs, store_uri

from ragexp.decide import selection
from ragexp.evaluation import measures, stats
from ragexp.evaluation.stats import Paired

HASH = ["embedder=hash", "embedder.dim=256"]


def test_vs_baseline_metric_names_are_mlflow_keys():
    tests = [Paired("nDCG@10", "all", 30, 0.1, 0.0, 0.2, 0.04, 50.0, 0.08),
             Paired("RR@10", "semantic", 8, 0.0, 0.0, 0.0, 1.0, float("inf"), 1.0)]
    out = selection.vs_baseline_metrics(tests)
    key = measures.measure_key("nDCG@10")
    assert out[f"vs_baseline.{key}.delta"] == 0.1 and out[f"vs_baseline.{key}.p_adj"] == 0.08
    rr = measures.measure_key("RR@10")
    assert out[f"vs_baseline.{rr}.semantic.n_needed"] == -1.0
    assert all("@" not in k for k in out)
    with pytest.raises(ValueError, match="unknown measure 'Foo@10'"):
        measures.measure_key("Foo@10")


def runs(tmp: Path):
    return search_runs(store_uri(tmp), experiment_names=["ragexp-handbook"])


@pytest.fixture(scope="module")
def sweep(module_mlflow_store):
    tmp = module_mlflow_store.folder
    proc = run_app(tmp, "-m", "+ablation=default,bm25,chunks_small", *HASH,
                   f"hydra.sweep.dir={tmp / 'multirun'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp, proc


@pytest.mark.slow
def test_children_log_their_comparison_with_the_sweep_baseline(sweep):
    from ragexp.decide import compare

    tmp, _ = sweep
    df = runs(tmp)
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    kids = df[df["tags.mlflow.parentRunId"] == parent["run_id"]].set_index("tags.ragexp.ablation")
    assert set(kids.index) == {"default", "bm25", "chunks_small"}
    assert (kids["params.split"] == "dev").all() and (kids["params.split_seed"] == "0").all()
    key = measures.measure_key("nDCG@10")
    assert np.isnan(kids.loc["default"].get(f"metrics.vs_baseline.{key}.delta", np.nan))
    base = compare.per_question(kids.loc["default", "run_id"])
    all_p = []
    for name in ("bm25", "chunks_small"):
        run = compare.per_question(kids.loc[name, "run_id"])
        m = run.merge(base, on="id", suffixes=("", "_b")).dropna(subset=["ndcg_at_10"])
        d = m["ndcg_at_10"] - m["ndcg_at_10_b"]
        row = kids.loc[name]
        assert row[f"metrics.vs_baseline.{key}.delta"] == pytest.approx(d.mean())
        assert row[f"metrics.vs_baseline.{key}.ci_low"] <= d.mean() <= \
            row[f"metrics.vs_baseline.{key}.ci_high"]
        assert row[f"metrics.vs_baseline.{key}.p"] == pytest.approx(stats.randomisation_p(d))
        for kind, g in m.groupby("kind"):
            assert row[f"metrics.vs_baseline.{key}.{kind}.delta"] == pytest.approx(
                (g["ndcg_at_10"] - g["ndcg_at_10_b"]).mean())
        all_p += [c for c in row.index if c.startswith("metrics.vs_baseline.")
                  and c.endswith(".p")]
    # p_adj is Holm over the whole sweep's family (2 runs x measures x groups)
    ps, adj = [], []
    for name in ("bm25", "chunks_small"):
        row = kids.loc[name]
        for c in sorted(c for c in row.index if c.startswith("metrics.vs_baseline.")
                        and c.endswith(".p")):
            ps.append(row[c])
            adj.append(row[c + "_adj"])
    assert len(ps) == 2 * 2 * 5
    assert adj == pytest.approx(list(multipletests(ps, method="holm")[1]))


@pytest.mark.slow
def test_parent_records_the_best_run_and_those_tied_with_it(sweep):
    tmp, proc = sweep
    df = runs(tmp)
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    kids = df[df["tags.mlflow.parentRunId"] == parent["run_id"]]
    key = measures.measure_key("nDCG@10")
    best = kids.loc[kids[f"metrics.{key}"].idxmax()]
    assert parent["tags.ragexp.best_run"] == best["run_id"]
    assert parent[f"metrics.best.{key}"] == pytest.approx(best[f"metrics.{key}"])
    tied = [t["run_id"] for t in json.loads(parent["tags.ragexp.tied_with_best"])]
    assert tied[0] == best["run_id"]
    flags = dict(zip(kids["run_id"], kids["metrics.selection.tied_with_best"]))
    assert {r for r, f in flags.items() if f == 1.0} == set(tied)
    assert "best by nDCG@10" in proc.stdout and "tied with it" in proc.stdout


@pytest.mark.slow
def test_confirm_evaluates_both_on_test_and_logs_the_held_out_difference(sweep, capsys):
    from ragexp.cli import main as cli
    from ragexp.decide import compare

    tmp, _ = sweep
    df = runs(tmp)
    kids = df[df["tags.ragexp.role"] != "sweep"].set_index("tags.ragexp.ablation")
    run_id = kids.loc["bm25", "run_id"]
    assert cli.main(["confirm", run_id]) == 0
    out = capsys.readouterr().out
    assert "held-out test" in out and "p_adj" in out and "Holm" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[0].startswith("| measure | run dev | run test | baseline dev | baseline test |")
    for row in table[2:]:  # every mean with three decimals (round(4) printed 0.875 by 0.9262)
        assert all(re.fullmatch(r"\d\.\d{3}", v) for v in row.split(" | ")[1:5]), row
    after = runs(tmp).set_index("run_id")
    tags = after.loc[run_id]
    test_run, base_test = tags["tags.ragexp.confirm.test_run"], \
        tags["tags.ragexp.confirm.baseline_test_run"]
    assert tags["tags.ragexp.confirm.baseline"] == kids.loc["default", "run_id"]
    assert after.loc[test_run, "params.split"] == "test"
    key = measures.measure_key("nDCG@10")
    assert tags[f"metrics.confirm.{key}"] == after.loc[test_run, f"metrics.{key}"]
    dev_q = set(compare.per_question(run_id)["id"])
    test_pq, base_pq = compare.per_question(test_run), compare.per_question(base_test)
    assert dev_q.isdisjoint(test_pq["id"])
    m = test_pq.merge(base_pq, on="id", suffixes=("", "_b")).dropna(subset=["ndcg_at_10"])
    d = m["ndcg_at_10"] - m["ndcg_at_10_b"]
    assert tags[f"metrics.confirm.vs_baseline.{key}.delta"] == pytest.approx(d.mean())
    assert tags[f"metrics.confirm.vs_baseline.{key}.p"] == pytest.approx(stats.randomisation_p(d))
    n_runs = len(after)
    assert cli.main(["confirm", run_id]) == 0  # the test evaluations are reused
    assert len(runs(tmp)) == n_runs
    assert cli.main(["confirm", kids.loc["default", "run_id"]]) == 2  # its own baseline
    others = kids.drop(index="default")
    second = others["run_id"][others["metrics.ndcg_at_10"].idxmax()]
    assert (f"is its own baseline: pass --baseline {second} (the runner-up of its sweep)"
            in capsys.readouterr().err)


@pytest.mark.slow
def test_report_shows_adjusted_p_tied_set_and_winner_on_dev_and_test(sweep):
    from ragexp.cli import tables as report

    text = report.build("ragexp-handbook", run_confirm=True, overrides=tuple(HASH))
    assert "p_adj(nDCG@10)" in text and "Holm-adjusted" in text
    assert "**Tied with the best**" in text and "**Winner on dev and test**" in text
    assert "optimistic" in text and " test |" in text


@pytest.mark.slow
def test_optuna_sweeper_drives_ragexp_and_resumes(tmp_path):
    args = ["-m", "hydra/sweeper=ragexp_search", "hydra.sweeper.n_trials=4", *HASH,
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    first = run_app(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    df = runs(tmp_path)
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    trials = df[df["tags.mlflow.parentRunId"] == parent["run_id"]]
    assert len(trials) == 4 and (trials["status"] == "FINISHED").all()
    assert (trials["params.retriever.name"] == "hybrid").all()
    key = measures.measure_key("nDCG@10")
    best = trials.loc[trials[f"metrics.{key}"].idxmax()]
    result = yaml.safe_load((tmp_path / "multirun" / "optimization_results.yaml").read_text())
    assert result["best_value"] == pytest.approx(best[f"metrics.{key}"])
    assert parent["tags.ragexp.best_run"] == best["run_id"]
    # same seed, same trials: every job is skipped and returns its recorded objective
    again = run_app(tmp_path, *args[:-1], f"hydra.sweep.dir={tmp_path / 'multirun2'}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 skipped" in again.stdout
    result2 = yaml.safe_load((tmp_path / "multirun2" / "optimization_results.yaml").read_text())
    assert result2["best_value"] == pytest.approx(result["best_value"])


def test_objective_must_be_a_configured_measure():
    measures.check_objective("nDCG@10", ["RR@10", "nDCG@10"])
    with pytest.raises(ValueError, match="objective 'R@100' is not among the configured"):
        measures.check_objective("R@100", ["RR@10", "nDCG@10"])
    assert selection.objective({"status": "FINISHED", "ndcg_at_10": 0.4}, "nDCG@10") == 0.4
    with pytest.raises(ValueError, match="no metric 'rr_at_10'"):
        selection.objective({"status": "FINISHED", "run_id": "x", "ndcg_at_10": 0.4}, "RR@10")


@pytest.mark.slow
def test_a_sweep_over_scoring_units_names_no_best_and_writes_no_page(tmp_path):
    # dataset.unit=chunk,section: the sweep named the section run best (nDCG@10 0.553 against
    # 0.480, p_adj 0.020), a gain of the unit read as one of retrieval, and its page ranked them
    proc = run_app(tmp_path, "-m", "dataset.unit=chunk,section", "retriever=bm25",
                   "reranker=none", *HASH, f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = "the runs differ in dataset.unit (chunk, section), so their measures do not compare"
    assert f"no best run, baseline comparison or tie: {said}" in proc.stdout
    df = runs(tmp_path)
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    assert f"no page for sweep {parent['run_id'][:8]}: {said}" in proc.stdout + proc.stderr
    assert pd_missing(parent.get("tags.ragexp.best_run"))
    kids = df[df["tags.mlflow.parentRunId"] == parent["run_id"]]
    assert sorted(kids["params.dataset.unit"]) == ["chunk", "section"]
    assert not any(c.startswith("metrics.vs_baseline.") and kids[c].notna().any() for c in kids)


def pd_missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


@pytest.mark.slow
def test_an_optuna_search_with_a_bad_fixed_override_is_refused_before_any_run(tmp_path):
    """``k=5`` under ``R@100`` refuses every trial: refused before the first, exit 2, naming
    the key, no store and so no parent or trial run (each trial failed in turn, then "No
    trials are completed yet")."""
    proc = run_app(tmp_path, "-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize",
                   "hydra.sweeper.n_trials=2", "k=5", "bm25.k1=interval(0.5,2.0)",
                   "retriever=bm25", "embedder=hash",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}", migrated=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: invalid config (search point #0: bm25.k1=0.5 k=5 ")
    assert proc.stderr.count("k=5 is below the deepest measure cutoff 100 (R@100)") == 1
    assert proc.stderr.rstrip().endswith("nothing was run")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.slow
def test_an_optuna_search_whose_every_trial_fails_ends_failed_saying_why(tmp_path):
    """Every trial fails as it runs (a questions file that is not JSON, which only reading it
    finds): Optuna's sweeper raises ``No trials are completed yet``. The sweep ends FAILED with
    that reason and each trial's failure printed, exit 1, no traceback
    (``SweepCallback.stopped``)."""
    questions = tmp_path / "questions.jsonl"
    questions.write_text("not json\n")
    proc = run_app(tmp_path, "-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize",
                   "hydra.sweeper.n_trials=2", "bm25.k1=interval(0.5,2.0)",
                   "retriever=bm25", "embedder=hash", f"dataset.questions={questions}",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "error: the sweeper stopped: ValueError: No trials are completed yet" in proc.stderr
    assert "sweep FAILED: 2 failed" in proc.stdout
    summary = proc.stdout.split("sweep FAILED: 2 failed", 1)[1]
    failed = [ln for ln in summary.splitlines() if ln.startswith("  FAILED ")]
    assert len(failed) == 2 and all(f"{questions}:1: invalid JSON" in ln for ln in failed)
    df = runs(tmp_path)
    parent = df[df["tags.ragexp.role"] == "sweep"].iloc[0]
    assert parent["status"] == "FAILED"
    assert parent["tags.ragexp.error"].startswith("the sweeper stopped: ValueError")
    assert json.loads(parent["tags.ragexp.jobs"]) == {"failed": 2}
