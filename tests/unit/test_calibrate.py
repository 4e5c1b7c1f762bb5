"""``decide.calibrate`` and ``ragexp questions calibrate``: the certificate's tau between two
sources' rankings and its bootstrap interval (``evaluation.certificate``, which calibration uses)
checked on calibration's score matrices against scipy's kendalltau and a bootstrap written here,
tiny and all-tied sets, the grid, the choice on fake per-question tables (exact expected point),
and the written settings read back by ``questions generate --settings``;
``tools.question_validity``'s table on the same fake tables: the certificate's verdicts and flag,
computed or as recorded, and its sets of one generator with other settings."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from ragexp.cli import calibrate as cli
from ragexp.cli.main import main
from ragexp.decide import calibrate, sources
from ragexp.errors import InvalidValue
from ragexp.evaluation import certificate as figures
from tools import question_validity as validity

RUNS = ("r1", "r2", "r3", "r4")


def frame(source: str, scores: dict[str, list[float]], prefix: str) -> dict[str, pd.DataFrame]:
    """Per-run tables of one source: question ``{prefix}{j}`` scored ``scores[run][j]``."""
    return {r: pd.DataFrame({"id": [f"{prefix}{j}" for j in range(len(v))],
                             "source": source, "ndcg_at_10": v, "rr_at_10": v})
            for r, v in scores.items()}


def tables(*parts: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    return {r: pd.concat([p[r] for p in parts], ignore_index=True) for r in RUNS}


def noisy(level: list[float], n: int, seed: int) -> dict[str, list[float]]:
    """Scores of the runs on ``n`` questions: run ``i``'s mean near ``level[i]``."""
    rng = np.random.default_rng(seed)
    return {r: list(np.clip(level[i] + rng.normal(0, 0.15, n), 0, 1))
            for i, r in enumerate(RUNS)}


HAND = noisy([0.8, 0.6, 0.4, 0.2], 40, 1)
SAME = noisy([0.7, 0.5, 0.3, 0.1], 30, 2)      # ranks the runs as the hand questions do
REVERSED = noisy([0.1, 0.3, 0.5, 0.7], 30, 3)  # the other way round
SWAPPED = noisy([0.6, 0.8, 0.2, 0.4], 30, 4)   # two pairs swapped


def fake() -> dict[str, pd.DataFrame]:
    return tables(frame("hand", HAND, "h"), frame("same", SAME, "s"),
                  frame("reversed", REVERSED, "v"), frame("swapped", SWAPPED, "w"))


def test_score_matrix_takes_one_source_in_id_order():
    runs, ids, m = calibrate.score_matrix(fake(), "same", "nDCG@10")
    assert runs == list(RUNS) and ids == sorted(f"s{j}" for j in range(30))
    assert m[2, ids.index("s7")] == pytest.approx(SAME["r3"][7])
    with pytest.raises(InvalidValue, match="no nDCG@10 scores"):
        calibrate.score_matrix(fake(), "nobody", "nDCG@10")


def test_tau_and_its_bootstrap_interval_against_scipy_and_a_bootstrap_written_here():
    _, _, a = calibrate.score_matrix(fake(), "hand", "nDCG@10")
    _, _, b = calibrate.score_matrix(fake(), "swapped", "nDCG@10")
    got = figures.bootstrap_tau(a, b, resamples=300, seed=5)
    assert got.median == pytest.approx(scipy_stats.kendalltau(a.mean(1), b.mean(1))[0])
    assert figures.tau(a, b) == got.median
    rng = np.random.default_rng(5)
    taus = []
    for _ in range(300):
        ia, ib = rng.integers(0, a.shape[1], a.shape[1]), rng.integers(0, b.shape[1], b.shape[1])
        taus.append(scipy_stats.kendalltau(a[:, ia].mean(1), b[:, ib].mean(1))[0])
    taus = [t for t in taus if not math.isnan(t)]
    assert got.defined == len(taus)
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(taus, [2.5, 97.5])))
    assert got.low <= got.median <= got.high


def test_identical_sources_agree_fully_and_all_tied_runs_have_no_tau():
    _, _, a = calibrate.score_matrix(fake(), "hand", "nDCG@10")
    assert figures.bootstrap_tau(a, a, resamples=50).median == 1.0
    flat = np.ones((4, 3))
    got = figures.bootstrap_tau(a, flat, resamples=50)
    assert math.isnan(got.median) and got.defined == 0 and sources.interval(got) == "undefined"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_sets_give_a_tau_or_say_why_not(n):
    a = np.arange(4 * n, dtype=float).reshape(4, n)
    got = figures.bootstrap_tau(a, a, resamples=20)
    assert got.median == 1.0 and got.low == got.high == 1.0  # every resample keeps the order
    if n < 2:
        assert math.isnan(figures.split_half(a).median)  # no two halves to rank on
    else:
        assert figures.split_half(a, splits=10).median == 1.0


def test_the_grid_is_every_combination_in_the_declared_order():
    points = calibrate.grid({"known_item": {"strategy": ["popular", "discriminative"],
                                            "lam": [0.0, 0.1]}})
    assert [p.name for p in points] == [
        "known_item-strategy=popular-lam=0.0", "known_item-strategy=popular-lam=0.1",
        "known_item-strategy=discriminative-lam=0.0", "known_item-strategy=discriminative-lam=0.1"]
    assert points[1].overrides == ["generator.strategy=popular", "generator.lam=0.1"]
    assert [cli.source_name(p) for p in points[:2]] == ["known_item-popular-0p0",
                                                       "known_item-popular-0p1"]
    with pytest.raises(InvalidValue, match="no value for"):
        calibrate.grid({"known_item": {"lam": []}})


def test_the_point_ranking_the_runs_as_the_tuning_half_does_is_chosen():
    points = ["reversed", "swapped", "same"]
    got = calibrate.calibrate(fake(), points, "nDCG@10", seed=0, resamples=200)
    assert got.chosen == "same" and (got.n_tune, got.n_check) == (20, 20)
    _, ids, hand = calibrate.score_matrix(fake(), "hand", "nDCG@10")
    tune, check = figures.halves(len(ids), np.random.default_rng(0))
    assert sorted([*tune, *check]) == list(range(40)) and not set(tune) & set(check)
    for p in points:
        _, _, m = calibrate.score_matrix(fake(), p, "nDCG@10")
        assert got.tuning[p] == pytest.approx(
            scipy_stats.kendalltau(hand[:, tune].mean(1), m.mean(1))[0])
    assert got.tuning["reversed"] == -1.0 and got.tuning["same"] == 1.0
    _, _, same = calibrate.score_matrix(fake(), "same", "nDCG@10")
    assert got.check.median == pytest.approx(
        scipy_stats.kendalltau(hand[:, check].mean(1), same.mean(1))[0])


def test_equal_taus_go_to_the_first_point_and_undefined_ones_never_win():
    t = fake()
    for r in RUNS:  # a set on which every run scores the same
        t[r] = pd.concat([t[r], pd.DataFrame({"id": ["f0", "f1"], "source": "flat",
                                              "ndcg_at_10": 0.5, "rr_at_10": 0.5})])
    got = calibrate.calibrate(t, ["flat", "same", "same"], "nDCG@10", resamples=20)
    assert got.chosen == "same" and math.isnan(got.tuning["flat"])
    with pytest.raises(InvalidValue, match="every tau is undefined"):
        calibrate.calibrate(t, ["flat"], "nDCG@10", resamples=20)
    with pytest.raises(InvalidValue, match="at least 4 hand questions"):
        small = tables(frame("hand", {r: [0.1, 0.2, 0.3] for r in RUNS}, "h"),
                       frame("same", SAME, "s"))
        calibrate.calibrate(small, ["same"], "nDCG@10")


def chosen_sweep(monkeypatch, t: dict[str, pd.DataFrame]) -> None:
    """``calibrate choose --parent ppp`` reading a sweep of the runs ``RUNS`` whose per-question
    tables are ``t``."""
    monkeypatch.setattr("ragexp.tracking.store.resolve_run_id", lambda ref: "p" * 32)
    monkeypatch.setattr("ragexp.tracking.store.experiment_name_of", lambda run: "x")
    monkeypatch.setattr("ragexp.decide.compare.runs_frame",
                        lambda experiment, parent=None: pd.DataFrame({"run_id": list(RUNS)}))
    monkeypatch.setattr("ragexp.decide.compare.per_question", lambda run: t[run])


def test_choose_writes_the_settings_that_generate_reads(tmp_path, monkeypatch, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"known_item": {"strategy": ["popular", "discriminative"],
                                                   "mean_length": [3]}}, sort_keys=False))
    names = ["known_item-popular-3", "known_item-discriminative-3"]
    t = tables(frame("hand", HAND, "h"), frame(names[0], REVERSED, "p"),
               frame(names[1], SAME, "d"))
    chosen_sweep(monkeypatch, t)
    out = tmp_path / "calibrated.yaml"
    assert main(["questions", "calibrate", "choose", "--parent", "ppp", "--grid", str(grid),
                 "--write", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "chosen: known_item-discriminative-3" in printed
    assert "| known_item-popular-3 | -1.00 |" in printed
    written = yaml.safe_load(out.read_text())
    assert written == {"generator": "known_item",
                       "overrides": ["generator.strategy=discriminative",
                                     "generator.mean_length=3"]}
    target = tmp_path / "q.jsonl"
    assert main(["questions", "generate", "--settings", str(out), "--n", "3", "--out",
                 str(target), "progress=false"]) == 0
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["generator"]["strategy"] == "discriminative"


def test_choose_names_the_sources_when_the_sweep_scored_no_grid_set(monkeypatch, capsys):
    t = tables(frame("hand", HAND, "h"), frame("same", SAME, "s"))
    chosen_sweep(monkeypatch, t)
    assert main(["questions", "calibrate", "choose", "--parent", "ppp"]) == 2
    assert "scored none of the grid's sets (its sources: hand, same)" in capsys.readouterr().err


def test_sets_writes_one_file_per_point_with_its_source(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"known_item": {"lam": [0.0, 0.2]}}))
    out = tmp_path / "sets"
    assert main(["questions", "calibrate", "sets", "--out", str(out), "--n", "4", "--grid",
                 str(grid)]) == 0
    for name, lam in (("known_item-0p0", 0.0), ("known_item-0p2", 0.2)):
        rows = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and {r["source"] for r in rows} == {name}
        assert {r["generator"]["lam"] for r in rows} == {lam}
    assert "known_item-0p0: asked" in capsys.readouterr().out


def test_a_kinds_mix_is_a_grid_key_asked_in_turn_and_written_for_generate(
        tmp_path, monkeypatch, capsys):
    """``kinds`` in the grid is the kinds mix (``[]``: every kind): each point's set asks its
    kinds alone, its source names them, ``choose`` writes the chosen mix and ``generate
    --settings`` asks it; a mix that is not a list of kinds is refused."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"structure": {"kinds": [[], ["procedural", "identifier"]],
                                                  "context": [0]}}, sort_keys=False))
    points = cli.load_grid(str(grid))
    assert [cli.source_name(p) for p in points] == ["structure-all-0",
                                                    "structure-procedural_identifier-0"]
    assert [p.kinds for p in points] == [(), ("procedural", "identifier")]
    assert points[1].overrides == ["generator.context=0"]
    out = tmp_path / "sets"
    assert main(["questions", "calibrate", "sets", "--out", str(out), "--n", "6", "--grid",
                 str(grid), "progress=false"]) == 0
    kinds = {n: {json.loads(line)["kind"] for line in (out / f"{n}.jsonl").read_text()
                 .splitlines()} for n in ("structure-all-0", "structure-procedural_identifier-0")}
    assert kinds["structure-procedural_identifier-0"] == {"procedural", "identifier"}
    assert len(kinds["structure-all-0"]) > 2
    names = ["structure-all-0", "structure-procedural_identifier-0"]
    t = tables(frame("hand", HAND, "h"), frame(names[0], REVERSED, "a"),
               frame(names[1], SAME, "m"))
    chosen_sweep(monkeypatch, t)
    written = tmp_path / "calibrated.yaml"
    assert main(["questions", "calibrate", "choose", "--parent", "ppp", "--grid", str(grid),
                 "--write", str(written)]) == 0
    assert yaml.safe_load(written.read_text()) == {
        "generator": "structure", "overrides": ["generator.context=0"],
        "kinds": ["procedural", "identifier"]}
    target = tmp_path / "q.jsonl"
    assert main(["questions", "generate", "--settings", str(written), "--n", "4", "--out",
                 str(target), "progress=false"]) == 0
    assert {json.loads(line)["kind"] for line in target.read_text().splitlines()} == {
        "procedural", "identifier"}
    capsys.readouterr()
    with pytest.raises(InvalidValue, match="each value of kinds is a list of kinds"):
        calibrate.grid({"structure": {"kinds": ["procedural"]}})


def test_settings_that_are_not_a_calibrated_file_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lam: 0.1\n")
    assert main(["questions", "generate", "--settings", str(bad), "--out",
                 str(tmp_path / "q.jsonl")]) == 2
    assert "expected generator: NAME, overrides: [...] and optionally kinds" in \
        capsys.readouterr().err


def validity_sweep(monkeypatch, t: dict[str, pd.DataFrame], recorded: dict | None = None):
    """``tools.question_validity`` reading a sweep of the runs ``RUNS`` whose per-question
    tables are ``t``, its parent run holding the certificate ``recorded`` (none: computed)."""
    chosen_sweep(monkeypatch, t)
    monkeypatch.setattr("ragexp.decide.compare.run_labels",
                        lambda df: {r: f"cfg_{r}" for r in df["run_id"]})
    monkeypatch.setattr("ragexp.decide.sources.recorded", lambda parent: recorded)


def rows_of(text: str) -> dict[str, list[str]]:
    """The table's rows by source: corpus, source, n, tau nDCG@10, tau RR@10, split-half tau,
    best, tied, verdict, flag."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| toy")]
    return {c[1]: c for c in cells}


def test_a_reversed_set_is_flagged_and_an_agreeing_one_is_not(monkeypatch):
    t = tables(frame("hand", HAND, "h"), frame("same", SAME, "s"),
               frame("reversed", REVERSED, "v"))
    validity_sweep(monkeypatch, t)
    text = validity.table("p" * 32, "toy")
    assert "computed from its runs, as the sweep recorded none" in text
    rows = rows_of(text)
    assert rows.keys() == {"hand", "same", "reversed"}
    assert rows["hand"][6:8] == ["cfg_r1", "cfg_r1"]  # best, and the only run tied with it
    means = {s: [pd.Series(v).mean() for v in scores.values()]
             for s, scores in (("hand", HAND), ("reversed", REVERSED))}
    tau = scipy_stats.kendalltau(means["hand"], means["reversed"])[0]
    assert rows["reversed"][3].startswith(f"{tau:.2f} [")
    cert = sources.certify(t, "nDCG@10")
    for source, row in rows.items():  # the certificate's verdict, as it says it
        mine = cert.sources[source]
        assert row[8] == f"{mine.verdict} ({mine.why})"
    assert "disagrees with the human questions beyond their noise" in rows["reversed"][9]
    assert rows["same"][9] == "within the human questions' noise"
    assert rows["hand"][9] == ""


def test_the_table_reads_the_certificate_the_sweep_recorded(monkeypatch):
    t = tables(frame("hand", HAND, "h"), frame("same", SAME, "s"))
    doc = sources.to_json(sources.certify(t, "nDCG@10"), {r: f"cfg_{r}" for r in RUNS})
    doc["sources"]["same"]["verdict"], doc["sources"]["same"]["why"] = "ties", "as recorded"
    doc["pairs"][0]["disagrees"] = True
    validity_sweep(monkeypatch, t, recorded=doc)
    text = validity.table("p" * 32, "toy")
    assert "recorded on its parent run" in text
    same = rows_of(text)["same"]
    assert same[8] == "ties (as recorded)" and "disagrees" in same[9]


def test_a_set_of_one_generator_with_other_settings_is_written_under_its_own_source(
        tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(validity.subprocess, "run", lambda cmd, check: calls.append(cmd))
    name, spec = validity.parse_set("structure_ctx2=structure:generator.context=2,"
                                    "generator.min_words=3")
    assert (name, spec) == ("structure_ctx2",
                            ("structure", ["generator.context=2", "generator.min_words=3"]))
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot" / "known_item.jsonl").write_text("{}\n")  # kept as it is
    validity.pilot_sets(tmp_path, {"known_item": ("known_item", []), name: spec}, 5)
    [cmd] = calls
    assert cmd[cmd.index("--generator") + 1] == "structure"
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "pilot" / "structure_ctx2.jsonl")
    assert {"source=structure_ctx2", "generator.context=2", "generator.min_words=3"} <= set(cmd)
    for bad in ("structure", "x=structure:context=2", "=structure"):
        with pytest.raises(ValueError, match="expected NAME=GENERATOR"):
            validity.parse_set(bad)


def test_settings_and_a_generator_together_are_refused(tmp_path, capsys):
    written = tmp_path / "calibrated.yaml"
    written.write_text("generator: structure\noverrides: [generator.context=1]\n")
    assert main(["questions", "generate", "--settings", str(written), "--generator",
                 "known_item", "--out", str(tmp_path / "q.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --settings {written} names its generator: give --settings or --generator "
        f"known_item, not both")
    assert not (tmp_path / "q.jsonl").exists()
