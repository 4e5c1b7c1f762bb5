"""`ragexp report --html`: the sweep's page. Its numbers are checked against the runs' MLflow
metrics and per-question tables with independent code (numpy means, exact sign-flip
enumeration, statsmodels' Holm), its deltas' signs and colours against each measure's direction,
its failure reasons against a planted table, and the page is found logged on the sweep's parent
run."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import run_app
from statsmodels.stats.multitest import multipletests

from ragexp.data import readers
from ragexp.decide import compare
from ragexp.evaluation import question_failures
from ragexp.evaluation.stats import ALL
from ragexp.report import facts as report_facts
from ragexp.report import html as report_html

HASH = ["embedder=hash", "embedder.dim=256"]


class Cells(HTMLParser):
    """Every element carrying ``data-k``: ``{key: (data-v or None, class, text)}``."""

    def __init__(self, text: str):
        super().__init__()
        self.cells, self._open = {}, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for entry in self._open:
            entry[3].append(tag)
        if "data-k" in a:
            self._open.append([a["data-k"], a.get("data-v"), a.get("class", ""), [], []])

    def handle_data(self, data):
        for entry in self._open:
            entry[4].append(data)

    def handle_endtag(self, tag):
        for entry in list(self._open):
            if entry[3]:
                entry[3].pop()
            else:
                self._open.remove(entry)
                key, v, cls, _, text = entry
                self.cells[key] = (None if v is None else float(v), cls, "".join(text))


# --- deltas: sign and colour by the measure's direction -------------------------------------

@pytest.mark.parametrize("value, ref, higher, better, colour", [
    (0.60, 0.50, True, True, "good"),     # nDCG up: better
    (0.40, 0.50, True, False, "bad"),     # nDCG down: worse
    (0.20, 0.10, False, False, "bad"),    # more answerable questions refused: worse
    (0.05, 0.10, False, True, "good"),    # fewer answerable questions refused: better
    (0.5004, 0.5, True, None, "same"),    # prints as 0.000: no change
    (0.5006, 0.5, True, True, "good"),    # prints as +0.001
])
def test_delta_sign_and_colour_follow_the_measures_direction(value, ref, higher, better, colour):
    d = report_facts.delta(value, ref, higher)
    assert d.diff == pytest.approx(value - ref) and d.better is better
    span = Cells(report_html.delta_span("k", d, "prev")).cells["k"]
    assert colour in span[1].split() and span[0] == pytest.approx(value - ref)
    shown = "0.000" if better is None else f"{value - ref:+.3f}"
    assert span[2] == f"prev {shown}"


def test_delta_on_other_questions_or_missing_is_grey():
    other = report_facts.delta(0.9, 0.1, True, comparable=False)
    cell = Cells(report_html.delta_span("k", other, "champ")).cells["k"]
    assert "na" in cell[1].split() and "other questions" in cell[2]
    missing = report_facts.delta(math.nan, 0.1, True)
    assert missing.better is None and "na" in Cells(
        report_html.delta_span("k", missing, "prev")).cells["k"][1].split()
    assert report_facts.same_questions({"tags.golden_hash": "a", "params.split": "dev"},
                                       {"tags.golden_hash": "a", "params.split": "dev"})
    assert not report_facts.same_questions({"tags.golden_hash": "a", "params.split": "dev"},
                                           {"tags.golden_hash": "a", "params.split": "test"})


def test_headline_direction_table():
    heads = report_facts.headline("nDCG@10", ["Success@1", "RR@10", "nDCG@10", "R@10"])
    keys = [k for k, _, _ in heads]
    assert keys[:3] == ["ndcg_at_10", "rr_at_10", "success_at_1"]  # objective first
    assert "r_at_10" not in keys  # only the usual headline measures the runs measured
    higher = {k: h for k, _, h in heads}
    assert higher["abstain.cv.refused_answerable"] is False
    assert higher["abstain.cv.refused_unanswerable"] is True and higher["abstain.auc"] is True


# --- failed questions: a planted per-question table ----------------------------------------

PLANTED = """id,kind,question,ndcg_at_10,first_relevant_rank,answered,refusal_reason,cited,cited_relevant,abstain_signal
q1,factual,ok answered,1.0,1,True,,a#1,1,0.9
q2,factual,evidence at 5,0.4,5,False,confidence below the run's refusal threshold,,0,0.1
q3,semantic,nothing relevant,0.0,,True,,a#1,0,0.8
q4,procedural,shown but refused,0.6,2,False,no retrieved sentence covers enough,,0,0.7
q5,identifier,cites the wrong chunks,0.5,3,True,,b#2 c#1,0,0.8
q6,unanswerable,no answer exists,,,True,,d#4,0,0.95
q7,unanswerable,refused rightly,,,False,confidence below,,0,0.05
q8,factual,rank 3 answered,0.5,3,True,,e#1 e#2,2,0.9
q9,factual,rank 3 refused,0.5,3,False,no retrieved sentence covers enough,,0,0.9
"""


def planted(tmp: Path) -> pd.DataFrame:
    (tmp / "per_question.csv").write_text(PLANTED)
    return readers.read_csv(tmp / "per_question.csv", compare.TEXT_COLUMNS)  # as compare reads


def test_failure_reasons_on_a_planted_table(tmp_path):
    fails = question_failures.failed_questions(planted(tmp_path), "ndcg_at_10", shown=3)
    got = dict(zip(fails["id"], fails["reason"]))
    assert got == {"q2": "retrieval miss", "q3": "retrieval miss", "q4": "refused",
                   "q5": "unsupported citation", "q6": "answered unanswerable",
                   "q9": "refused"}
    detail = dict(zip(fails["id"], fails["detail"]))
    assert "rank 5" in detail["q2"] and "top 3" in detail["q2"] and "refusal threshold" in detail[
        "q2"]
    assert "no relevant chunk retrieved" in detail["q3"] and "a#1" in detail["q3"]
    assert "b#2 c#1" in detail["q5"] and "0.950" in detail["q6"]
    assert question_failures.counts(fails) == {"retrieval miss": 2, "refused": 2,
                                               "unsupported citation": 1,
                                               "answered unanswerable": 1}
    assert fails.attrs["note"] == ""
    # with more passages shown, q2's evidence was shown: refused, not a retrieval miss
    wider = question_failures.failed_questions(planted(tmp_path), "ndcg_at_10", shown=5)
    assert dict(zip(wider["id"], wider["reason"]))["q2"] == "refused"
    docs = question_failures.failed_questions(planted(tmp_path), "ndcg_at_10", 3, "document")
    assert "first relevant document at rank 5" in dict(zip(docs["id"], docs["detail"]))["q2"]
    quiet = planted(tmp_path).assign(abstain_signal=float("nan"))
    q6 = question_failures.failed_questions(quiet, "ndcg_at_10", 3).set_index("id").loc["q6"]
    assert q6["reason"] == "answered unanswerable" and "no confidence recorded" in q6["detail"]


def test_a_table_without_cited_relevant_is_not_judged_on_citations(tmp_path):
    old = planted(tmp_path).drop(columns=["cited_relevant", "question"])
    fails = question_failures.failed_questions(old, "ndcg_at_10", shown=3)
    assert set(fails["id"]) == {"q2", "q4", "q6", "q9"}  # q3, q5: answered, citations unknown
    assert "cited_relevant" in fails.attrs["note"]
    with pytest.raises(ValueError, match="first_relevant_rank"):
        question_failures.failed_questions(old.drop(columns=["first_relevant_rank"]),
                                           "ndcg_at_10", 3)


# --- wins by kind: independent means, exact sign-flip p, statsmodels' Holm -------------------

def exact_p(d: np.ndarray) -> float:
    """Two-sided sign-flip p by enumerating all 2**n flips: share with |mean| >= observed."""
    obs = abs(d.mean())
    flips = np.array(list(itertools.product([1, -1], repeat=len(d))))
    means = np.abs((flips * d).mean(axis=1))
    return float((means >= obs - 1e-12).mean())


def test_group_means_by_hand():
    """Means over the scored questions (NaN cells are unanswerable ones), by hand: all of them
    (0.2 + 0.4 + 0.9) / 3, alpha (0.2 + 0.4) / 2, beta 0.9; a kind with no scored question
    (gamma) and one absent (delta) are NaN."""
    table = pd.DataFrame({"id": list("abcdef"),
                          "kind": ["alpha", "alpha", "beta", "beta", "gamma", "alpha"],
                          "ndcg_at_10": [0.2, 0.4, 0.9, math.nan, math.nan, math.nan]})
    means = report_facts.group_means(table, "ndcg_at_10", [ALL, "alpha", "beta", "gamma",
                                                           "delta"])
    assert means[ALL] == pytest.approx(1.5 / 3) and means["alpha"] == pytest.approx(0.3)
    assert means["beta"] == 0.9 and math.isnan(means["gamma"]) and math.isnan(means["delta"])


@pytest.mark.slow
def test_wins_by_kind_against_independent_computation():
    rng = np.random.default_rng(7)
    ids = [f"q{i:02d}" for i in range(13)]  # 2**13 <= 10,000: stats' sign-flip p is exact
    kinds = ["alpha"] * 7 + ["beta"] * 6
    base = rng.uniform(0.1, 0.6, len(ids))
    lift_a = np.array([0.35 if k == "alpha" else 0.0 for k in kinds])
    lift_b = np.array([0.3 if k == "beta" else 0.0 for k in kinds])
    noise = lambda: rng.normal(0, 0.02, len(ids))  # noqa: E731
    scores = {"X": np.clip(base + lift_a + noise(), 0, 1), "Y": np.clip(base + lift_b + noise(),
                                                                          0, 1),
              "Z": np.clip(base + noise(), 0, 1)}
    tables = {r: pd.DataFrame({"id": ids, "kind": kinds, "ndcg_at_10": s})
              for r, s in scores.items()}
    tables["Z"] = pd.concat([tables["Z"], pd.DataFrame(
        {"id": ["u1"], "kind": ["unanswerable"], "ndcg_at_10": [np.nan]})])  # not scored
    wins = report_facts.wins_by_kind(tables, "nDCG@10")
    assert list(wins.values.columns) == [ALL, "alpha", "beta"]
    for g in wins.values.columns:
        mask = np.ones(len(ids), bool) if g == ALL else np.array(kinds) == g
        assert wins.n[g] == mask.sum()
        means = {r: float(s[mask].mean()) for r, s in scores.items()}
        for r in scores:
            assert wins.values.loc[r, g] == pytest.approx(means[r], abs=1e-12)
        best = max(means, key=means.get)
        assert wins.winner[g] == best
        others = [r for r in scores if r != best]
        diffs = [scores[r][mask] - scores[best][mask] for r in others]
        p_adj = multipletests([exact_p(d) for d in diffs], method="holm")[1]
        tied = {best} | {r for r, d, p in zip(others, diffs, p_adj)
                         if not (d.mean() < 0 and p < 0.05)}
        assert set(wins.tied[g]) == tied
    assert wins.winner["alpha"] == "X" and wins.winner["beta"] == "Y"  # the planted lifts
    assert "Z" not in wins.tied["alpha"]  # 7 questions, all worse: exact p 2/128, Holm 0.031


# --- end to end: two sweeps and a champion in a temporary store ------------------------------

@pytest.fixture(scope="module")
def sweeps(module_mlflow_store):
    from ragexp.cli import main as cli
    from ragexp.report import sweep_data
    from ragexp.tracking import store as tracking

    tmp = module_mlflow_store.folder
    first = run_app(tmp, "-m", "+ablation=default,bm25", *HASH, "sweep_report=false",
                    f"hydra.sweep.dir={tmp / 's1'}")
    assert first.returncode == 0, first.stderr[-3000:]
    sweep1 = sweep_data.latest_sweep("ragexp-handbook")
    # sweep_report=false: no page, and the command that builds it later is printed
    assert f"ragexp report --html report.html --parent {sweep1}" in first.stdout
    with pytest.raises(tracking.RunNotFound, match="has no report.html"):
        tracking.artifact_path(sweep1, report_html.ARTIFACT)
    runs1 = compare.runs_frame("ragexp-handbook", parent=sweep1).set_index("tags.ragexp.ablation")
    assert cli.main(["promote", runs1.loc["bm25", "run_id"]]) == 0  # the champion
    # the second sweep changes BM25 (so every matched run moves) and adds a configuration
    second = run_app(tmp, "-m", "+ablation=default,bm25,chunks_small", *HASH, "bm25.k1=0.9",
                    f"hydra.sweep.dir={tmp / 's2'}")
    assert second.returncode == 0, second.stderr[-3000:]
    sweep2 = sweep_data.latest_sweep("ragexp-handbook")
    assert sweep2 != sweep1
    page = Path(tracking.artifact_path(sweep2, report_html.ARTIFACT)).read_text()
    return tmp, sweep1, sweep2, runs1, page, second


def metric(run: pd.Series, key: str) -> float:
    v = run.get(f"metrics.{key}")
    return math.nan if v is None or pd.isna(v) else float(v)


@pytest.mark.slow
def test_page_is_logged_on_the_parent_and_headline_deltas_are_right(sweeps):
    _, sweep1, sweep2, runs1, page, proc = sweeps
    assert "report.html on run" in proc.stdout
    # standalone: nothing to run or fetch (SVG namespace URIs are names, not fetches)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    refs = re.findall(r'(?:src|href)="([^"]*)"', page) + re.findall(r"url\(([^)]*)\)", page)
    assert all(r.startswith(("#", "data:")) for r in refs), set(refs) - {
        r for r in refs if r.startswith(("#", "data:"))}
    charts = re.findall(r"<svg .*?</svg>", page, flags=re.S)  # wins, abstain curves: inline
    assert len(charts) == 2 and all(ET.fromstring(c) is not None for c in charts)
    cells = Cells(page).cells
    runs2 = compare.runs_frame("ragexp-handbook", parent=sweep2).set_index("tags.ragexp.ablation")
    champ = runs1.loc["bm25"]
    heads = report_facts.headline("nDCG@10", ["nDCG@10", "RR@10", "Success@1", "R@100"])
    coloured = set()
    for name, run in runs2.iterrows():
        rid = run["run_id"]
        for key, _, higher in heads:
            v, _, text = cells[f"head|{rid}|{key}"]
            if math.isnan(metric(run, key)):
                assert math.isnan(v)
                continue
            assert v == pytest.approx(metric(run, key), abs=1e-12)
            assert text.startswith(f"{metric(run, key):.3f}")
            for kind, ref in (("dprev", runs1.loc[name] if name in runs1.index else None),
                              ("dchamp", champ)):
                d, cls, _ = cells[f"{kind}|{rid}|{key}"]
                if ref is None:  # chunks_small is new in this sweep: no previous value
                    assert d is None and "na" in cls.split()
                    continue
                want = metric(run, key) - metric(ref, key)
                assert d == pytest.approx(want, abs=1e-12)
                colour = ("same" if abs(want) < 0.0005 else
                          "good" if (want > 0) == higher else "bad")
                assert colour in cls.split(), (name, key, want, cls)
                coloured.add(colour)
    assert {"good", "bad"} <= coloured  # both colours were exercised by the changed BM25


@pytest.mark.slow
def test_per_kind_tables_match_metrics_and_compares_tests(sweeps):
    _, _, sweep2, _, page, _ = sweeps
    cells = Cells(page).cells
    runs2 = compare.runs_frame("ragexp-handbook", parent=sweep2)
    base = runs2.set_index("tags.ragexp.ablation").loc["default", "run_id"]
    measures = ("nDCG@10", "RR@10")
    results = compare.baseline_tests(runs2, base, measures)  # what `ragexp compare` computes
    raw = []
    for _, run in runs2.iterrows():
        rid = run["run_id"]
        table = compare.per_question(rid)
        base_t = compare.per_question(base).set_index("id")
        kinds = sorted(table.dropna(subset=["ndcg_at_10"])["kind"].unique())
        for m, key in (("nDCG@10", "ndcg_at_10"), ("RR@10", "rr_at_10")):
            for g in [ALL, *kinds]:
                mean = cells[f"mean|{rid}|{m}|{g}"][0]
                assert mean == pytest.approx(metric(run, key if g == ALL else f"{key}.{g}"),
                                             abs=1e-9)
                if rid == base:
                    assert f"diff|{rid}|{m}|{g}" not in cells
                    continue
                t = table.dropna(subset=[key])
                if g != ALL:
                    t = t[t["kind"] == g]
                d = t[key].to_numpy(float) - base_t.loc[t["id"], key].to_numpy(float)
                assert cells[f"diff|{rid}|{m}|{g}"][0] == pytest.approx(d.mean(), abs=1e-12)
                test = next(x for x in results[rid] if x.measure == m and x.kind == g)
                assert cells[f"p|{rid}|{m}|{g}"][0] == pytest.approx(test.p)
                raw.append((cells[f"p|{rid}|{m}|{g}"][0], cells[f"padj|{rid}|{m}|{g}"][0]))
    adjusted = multipletests([p for p, _ in raw], method="holm")[1]
    assert [a for _, a in raw] == pytest.approx(list(adjusted))
    for _, run in runs2.iterrows():  # the chart's numbers are the runs' metrics too
        rid = run["run_id"]
        assert cells[f"wins|{rid}|{ALL}"][0] == pytest.approx(metric(run, "ndcg_at_10"))
        assert cells[f"wins|{rid}|semantic"][0] == pytest.approx(
            metric(run, "ndcg_at_10.semantic"))


@pytest.mark.slow
def test_failed_questions_on_the_page_agree_with_the_per_question_tables(sweeps):
    _, _, sweep2, _, page, _ = sweeps
    cells = Cells(page).cells
    runs2 = compare.runs_frame("ragexp-handbook", parent=sweep2)
    seen = set()
    for _, run in runs2.iterrows():
        rid, shown = run["run_id"], int(run["params.answer.n_chunks"])
        for q in compare.per_question(rid).to_dict("records"):
            reason = cells.get(f"reason|{rid}|{q['id']}", (None, "", None))[2]
            answerable = not pd.isna(q["ndcg_at_10"])
            rank = q["first_relevant_rank"]
            evidence_shown = not pd.isna(rank) and rank <= shown
            answered = bool(q["answered"])
            if not answerable:
                assert reason == ("answered unanswerable" if answered else None), q
            elif answered and q["cited_relevant"] > 0:
                assert reason is None, q
            elif not evidence_shown:
                assert reason == "retrieval miss", q
            else:
                assert reason == ("refused" if not answered else "unsupported citation"), q
            seen.add(reason)
        total = cells[f"nfail|{rid}|total"][0]
        assert total == sum(k.startswith(f"reason|{rid}|") for k in cells)
    assert {"retrieval miss", "refused", None} <= seen


@pytest.mark.slow
def test_report_command_writes_html_and_chart_and_markdown_still_works(sweeps, tmp_path,
                                                                       capsys):
    from ragexp.cli import main as cli

    _, sweep1, _, _, _, _ = sweeps
    out, chart = tmp_path / "r.html", tmp_path / "wins.svg"
    assert cli.main(["report", "--html", str(out), "--chart", str(chart), "--parent",
                     sweep1[:8], "--no-upload"]) == 0
    text = out.read_text()
    assert "no previous sweep" in text
    drawn = chart.read_text()
    root = ET.fromstring(drawn)  # a standalone SVG document, the one the page inlines
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and drawn.strip() in text
    assert len(root.findall("{http://www.w3.org/2000/svg}rect[@class='winner']")) >= 1
    assert cli.main(["report", "--chart", str(tmp_path / "wins.png"), "--parent",
                     sweep1[:8]]) == 2  # refused, one line: the chart is SVG
    assert "name the file wins.svg" in capsys.readouterr().err
    assert not (tmp_path / "wins.png").exists()
    capsys.readouterr()
    assert cli.main(["report", "--overrides", *HASH]) == 0  # the markdown tables, as before
    md = capsys.readouterr().out
    # the figures' source and count (one source: its own name)
    assert re.search(r"\*\*Overall\*\* \(answerable questions: hand, 45 q\)", md)
    assert "| bm25 | BM25 alone." in md


@pytest.mark.slow
def test_a_previous_sweep_that_did_not_end_whole_is_named_as_incomplete(sweeps, tmp_path):
    from mlflow import MlflowClient

    from ragexp.cli import main as cli

    _, sweep1, sweep2, _, _, _ = sweeps
    client, out = MlflowClient(), tmp_path / "r.html"
    args = ["report", "--html", str(out), "--parent", sweep2[:8], "--no-upload"]
    client.set_terminated(sweep1, "KILLED")
    try:
        assert cli.main(args) == 0
        assert f"previous sweep {sweep1[:8]} (KILLED: incomplete) (" in out.read_text()
    finally:
        client.set_terminated(sweep1, "FINISHED")
    assert cli.main(args) == 0
    assert f"previous sweep {sweep1[:8]} (2 of 3 runs matched" in out.read_text()


def test_artifact_path_gives_a_local_run_its_own_file(mlflow_store, tmp_path, monkeypatch):
    """A local artifact root answers with the run's own file (no temporary copy), the bytes
    logged, reading the run's record once; an artifact the run lacks is still
    ``RunNotFound`` saying the run's status."""
    from mlflow.utils.file_utils import local_file_uri_to_path

    from ragexp.tracking import store as tracking

    c = tracking.client()
    run = c.create_run(tracking.ensure_experiment("paths")).info.run_id
    logged = tmp_path / "per_question.csv"
    logged.write_text("id,ndcg_at_10\n01,0.5\n")
    c.log_artifact(run, str(logged))
    path = Path(tracking.artifact_path(run, "per_question.csv"))
    root = Path(local_file_uri_to_path(c.get_run(run).info.artifact_uri))
    assert path == root / "per_question.csv" and path.read_text() == "id,ndcg_at_10\n01,0.5\n"
    reads = []
    get_run = c.get_run
    monkeypatch.setattr(c, "get_run", lambda r: reads.append(r) or get_run(r))
    assert tracking.artifact_path(run, "per_question.csv") == str(path) and reads == []
    with pytest.raises(tracking.RunNotFound, match="has no abstain_curve.json: it is RUNNING"):
        tracking.artifact_path(run, "abstain_curve.json")
