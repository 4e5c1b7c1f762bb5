"""Every shown figure says whose questions it averages (``decide.figures``): the run lines,
the sweep's decision line, ``compare``'s compact default table (``--wide``, ``--source``,
``--format csv``) and the sweep's page, on two recorded runs of the handbook's hand-written
and generated questions. A user read 0.930 (every question) against the "best" 0.903 (the
hand-written ones) and could not tell which decides. The shown figures are checked against
means computed here from each run's own per-question table."""

from __future__ import annotations

import contextlib
import io
import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from workspaces import record_run

from ragexp.cli import main as cli
from ragexp.data import shipped
from ragexp.decide import compare, figures, selection
from ragexp.errors import InvalidValue
from ragexp.run.app import run_line
from ragexp.tracking import store as tracking

GOLDEN, GENERATED = shipped.path("handbook/golden"), shipped.path("handbook/golden/generated")
ABLATIONS = {"bm25": "bm25", "dense": "default"}  # retriever -> the ablation that runs it
# what the runs add to their ablation (make tables composes each ablation with them)
OVERRIDES = ("embedder=hash", f"dataset.questions=[{GOLDEN},{GENERATED}]")


@pytest.fixture(scope="module")
def sweep(module_mlflow_store):
    """Two runs (ablations ``bm25`` and ``default``: hash-dense) over both question sources,
    printed lines kept, made the runs of a sweep parent whose choice
    ``selection.summarise_sweep`` logs (as a sweep's end does): ``{"ids", "printed", "parent",
    "lines", "tables"}``, keyed by retriever."""
    base = [*OVERRIDES, "progress=false", f"cache_dir={module_mlflow_store.folder / 'cache'}"]
    ids, printed = {}, {}
    for name, ablation in ABLATIONS.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ids[name] = record_run(f"+ablation={ablation}", *base)["run_id"]
        printed[name] = out.getvalue()
    c = tracking.client()
    parent = c.create_run(c.get_run(ids["bm25"]).info.experiment_id,
                          tags={"ragexp.role": "sweep"}).info.run_id
    for r in ids.values():
        c.set_tag(r, "mlflow.parentRunId", parent)
    lines = selection.summarise_sweep(parent, [{"status": "FINISHED", "run_id": r}
                                               for r in ids.values()],
                                      "default", "nDCG@10", objective_source="hand")
    c.set_terminated(parent, "FINISHED")
    tables = {n: compare.per_question(r) for n, r in ids.items()}
    return {"ids": ids, "printed": printed, "parent": parent, "lines": lines, "tables": tables}


def mean(table: pd.DataFrame, column: str, source: str | None = None) -> tuple[float, int]:
    """The mean of ``column`` over the scored questions of ``source`` (None: all), and their
    count: the reference every shown figure is checked against."""
    rows = table if source is None else table[table["source"] == source]
    scored = rows[column].dropna()
    return float(scored.mean()), len(scored)


def cli_out(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_run_lines_show_the_hand_questions_figures_and_say_so(sweep):
    for name, table in sweep["tables"].items():
        hand, n = mean(table, "ndcg_at_10", "hand")
        every, _ = mean(table, "ndcg_at_10")
        [line] = [ln for ln in sweep["printed"][name].splitlines() if ln.startswith("run ")]
        assert f"[{ABLATIONS[name]}] (hand, {n} q) success_at_1=" in line
        assert f"ndcg_at_10={hand:.3f}" in line and f"ndcg_at_10={every:.3f}" not in line
        assert re.search(r"; every source: abstain\.auc=[0-9.]+$", line)
    assert n == 45 and len(sweep["tables"]["bm25"]) > 45  # the generated ones are there too


def test_the_decision_line_labels_the_best_figure(sweep):
    [best_line] = [ln for ln in sweep["lines"] if ln.startswith("best by")]
    means = {name: mean(t, "ndcg_at_10", "hand") for name, t in sweep["tables"].items()}
    best = max(means, key=lambda k: means[k][0])
    assert best_line.startswith(f"best by nDCG@10 (hand, 45 q): {ABLATIONS[best]} "
                                f"({sweep['ids'][best][:8]}) {means[best][0]:.3f}; tied")


def rows(out: str) -> list[list[str]]:
    """The cells of a markdown table's lines (its header first, the separator left out)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("|") and "---" not in line]


def test_compare_shows_the_deciding_source_labelled_and_fits_a_terminal(sweep, capsys):
    out = cli_out(capsys, "compare", "--parent", sweep["parent"])
    table = [line for line in out.splitlines() if line.startswith("|")]
    head, *body = rows("\n".join(table))
    assert head == ["run", "name", "nDCG@10 (hand, 45 q)", "tied (hand)", "RR@10 (hand)"]
    assert max(map(len, table)) <= compare.WIDTH
    tags = tracking.client().get_run(sweep["parent"]).data.tags  # the sweep's choice
    best, tied = tags["ragexp.best_run"], {e["run_id"] for e in json.loads(
        tags["ragexp.tied_with_best"])}
    for name, rid in sweep["ids"].items():
        [row] = [r for r in body if r[0] == rid[:8]]
        t = sweep["tables"][name]
        assert row[2] == f"{mean(t, 'ndcg_at_10', 'hand')[0]:.3f}"
        assert row[4] == f"{mean(t, 'rr_at_10', 'hand')[0]:.3f}"
        assert row[3] == ("best" if rid == best else "tied" if rid in tied else "")
    assert "hand vs generated: tau " in out  # the sources' certificate, below


def test_compare_source_all_and_another_source_only_when_asked(sweep, capsys):
    t = sweep["tables"]["bm25"]
    for source, ref in (("all", None), ("generated", "generated")):
        out = cli_out(capsys, "compare", "--runs", sweep["ids"]["bm25"], "--source", source)
        value, n = mean(t, "ndcg_at_10", ref)
        head, row = rows(out)
        assert head[2] == f"nDCG@10 ({source}, {n} q)" and row[2] == f"{value:.3f}"
    assert cli.main(["compare", "--runs", sweep["ids"]["bm25"], "--source", "hnd"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --source 'hnd': the run's questions are "
                                               "of sources generated, hand (or all)")


def test_another_sources_figures_keep_the_decision_labelled_with_its_own(sweep, capsys):
    """With --source generated the figures are generated's, the best and tied marks stay the
    sweep's decision, and the column says on whose questions it was taken; a sweep that
    decided on another source than its runs recorded (it re-decided runs it skipped to) is
    shown on the source it decided on."""
    out = cli_out(capsys, "compare", "--parent", sweep["parent"], "--source", "generated")
    head, *body = rows("\n".join(line for line in out.splitlines() if line.startswith("|")))
    assert head[2].startswith("nDCG@10 (generated, ") and head[3] == "tied (hand)"
    tags = tracking.client().get_run(sweep["parent"]).data.tags
    assert tags[compare.DECIDED_ON] == "hand"
    runs = pd.DataFrame({"params.objective_source": ["hand"]})
    assert compare.deciding_source(runs) == "hand"
    assert compare.deciding_source(runs, {compare.DECIDED_ON: "generated"}) == "generated"


def test_compare_with_a_baseline_shows_the_difference_on_the_deciding_source(sweep, capsys):
    ids = sweep["ids"]
    out = cli_out(capsys, "compare", "--runs", ids["bm25"], ids["dense"], "--baseline",
                  ids["dense"])
    table = [line for line in out.splitlines() if line.startswith("|")][:4]
    head, *body = rows("\n".join(table))
    base, other = ({r[0]: r for r in body}[ids[n][:8]] for n in ("dense", "bm25"))
    assert head[2:] == ["nDCG@10 (hand, 45 q)", "Δ vs baseline [95% CI]", "p_adj", "tied (hand)"]
    assert base[3:5] == ["baseline", ""] and max(map(len, table)) <= compare.WIDTH
    diff = (mean(sweep["tables"]["bm25"], "ndcg_at_10", "hand")[0]
            - mean(sweep["tables"]["dense"], "ndcg_at_10", "hand")[0])
    assert other[3].startswith(f"{diff:+.3f} [")
    assert "on the questions of source hand" in out


def test_wide_and_csv_show_every_column_per_source_and_per_kind(sweep, capsys):
    ids = sweep["ids"]
    wide = cli_out(capsys, "compare", "--runs", ids["bm25"], ids["dense"], "--wide")
    csv = pd.read_csv(io.StringIO(cli_out(capsys, "compare", "--runs", ids["bm25"],
                                          ids["dense"], "--format", "csv")))
    head = rows(wide)[0]
    assert head == list(csv.columns)
    for col in ("ndcg_at_10", "ndcg_at_10.source.hand", "ndcg_at_10.source.generated",
                "rr_at_10.source.hand", "rr_at_10.known_item", "rr_at_10.factual",
                "abstain.refused_unanswerable", "retriever.name"):
        assert col in head, col
    bm25 = csv.set_index("run").loc[ids["bm25"][:8]]
    t = sweep["tables"]["bm25"]
    assert bm25["ndcg_at_10.source.generated"] == round(mean(t, "ndcg_at_10", "generated")[0], 3)
    assert bm25["ndcg_at_10"] == round(mean(t, "ndcg_at_10")[0], 3)
    assert "objective_source=hand decides" in wide  # the note under the wide table
    assert "ΔnDCG@10 [95% CI]" in cli_out(capsys, "compare", "--runs", ids["bm25"],
                                          ids["dense"], "--baseline", ids["bm25"], "--wide")


def test_the_page_labels_its_figures_with_their_source(sweep):
    from ragexp.report import html, sweep_data

    page, _ = html.build(sweep_data.load(sweep["parent"]))
    assert "<th>nDCG@10 (hand, 45 q)</th>" in page and "<th>RR@10 (hand, 45 q)</th>" in page
    assert re.search(r"<h3>Best by nDCG@10 \(hand, 45 q\): (bm25|default)</h3>", page)
    assert "<h3>All questions of source hand (n=45)</h3>" in page  # the per-kind tables
    for name, rid in sweep["ids"].items():  # the hand questions' value, as the header says
        [shown] = re.findall(rf'data-k="head\|{rid}\|ndcg_at_10\.source\.hand" '
                             r'data-v="([^"]+)"', page)
        assert float(shown) == pytest.approx(mean(sweep["tables"][name], "ndcg_at_10",
                                                  "hand")[0], abs=1e-12)


# ---- without a store ------------------------------------------------------------------------

def per_question(sources: list[str], scores: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"q{i}" for i in range(len(sources))], "source": sources,
                         "ndcg_at_10": scores})


def test_one_source_shows_its_own_name_and_the_logged_key():
    t = per_question(["generated"] * 3, [1.0, 0.5, None])  # one unanswerable: not counted
    fig = figures.figure(t, "hand", "ndcg_at_10")  # objective_source names another: one decides
    assert fig == figures.Figure("generated", 2, False) and fig.key("ndcg_at_10") == "ndcg_at_10"
    assert fig.label("nDCG@10") == "nDCG@10 (generated, 2 q)"
    assert figures.figure(t.drop(columns="source"), "all", "ndcg_at_10").source == "hand"


def test_several_sources_show_the_asked_one_or_all():
    t = per_question(["hand", "hand", "generated", "generated", "generated"],
                     [1.0, None, 0.0, 0.5, 0.5])
    assert figures.figure(t, "hand", "ndcg_at_10") == figures.Figure("hand", 1, True)
    assert figures.figure(t, "all", "ndcg_at_10") == figures.Figure("all", 4, False)
    assert figures.figure(t, "generated", "ndcg_at_10").key("rr_at_10") == \
        "rr_at_10.source.generated"
    with pytest.raises(InvalidValue, match="--source 'llm': the run's questions are of sources "
                                           "generated, hand"):
        figures.figure(t, "llm", "ndcg_at_10", option="--source")
    # no table: the sources are read off the per-source keys logged
    unread = figures.figure(None, "hand", "ndcg_at_10",
                            ["ndcg_at_10.source.hand", "ndcg_at_10.source.generated"])
    assert unread == figures.Figure("hand", None, True) and unread.tag == "hand"
    assert figures.figure(None, "hand", "ndcg_at_10").source == "hand"


def test_runs_with_other_counts_share_one_label():
    figs = [figures.Figure("hand", 45, True), figures.Figure("hand", 40, True)]
    assert figures.together(figs) == "hand, 40-45 q"
    assert figures.together([figures.Figure("hand", 45, False),
                             figures.Figure("generated", None, False)]) == "hand/generated, 45 q"
    assert figures.together([]) == ""


def test_the_run_line_of_one_source_names_it():
    table = per_question(["generated"] * 2, [1.0, 0.6]).assign(rr_at_10=[1.0, 0.5])
    result = SimpleNamespace(per_question=table,
                             metrics={"rr_at_10": 0.75, "ndcg_at_10": 0.8, "abstain.auc": 0.5})
    cfg = SimpleNamespace(measures=["RR@10", "nDCG@10"], objective_source="hand")
    assert run_line(result, cfg) == ("(generated, 2 q) rr_at_10=0.750  ndcg_at_10=0.800; "
                                     "abstain.auc=0.500")


LONG = ("chunking.include_headings=True chunking.max_words=10 chunking.name=markdown",
        "fusion.k=10 retriever.name=hybrid", "hash_hybrid",
        "chunking.name=sentences chunking.sentences=2 (0949c327)")


@pytest.mark.parametrize("baseline", [False, True])
def test_the_default_table_fits_100_columns_for_realistic_names(baseline):
    tab = pd.DataFrame({"run": [f"{i:08x}" for i in range(len(LONG))], "name": list(LONG),
                        "nDCG@10 (generated, 200 q)": ["0.517"] * len(LONG)})
    if baseline:
        tab["Δ vs baseline [95% CI]"] = ["baseline", *["-0.036 [-0.075, +0.008]*"] * 3]
        tab["p_adj"] = ["", "0.094", "1.000", "<0.001"]
    tab["tied"] = ["best", "tied", "", ""]
    if not baseline:
        tab["RR@10 (generated)"] = ["0.529"] * len(LONG)
    lines = compare.render(tab, width=compare.WIDTH).splitlines()
    assert max(map(len, lines)) <= compare.WIDTH
    names = [r[1] for r in rows("\n".join(lines))[1:]]
    for full, shown in zip(LONG, names):
        assert shown == full or (shown.endswith("…") and full.startswith(shown[:-1])
                                 and len(shown) >= compare.NAME_MIN)
    assert "hash_hybrid" in names  # a short label is never cut
    assert json.dumps(compare.render(tab)).count("…") == 0  # without a width: as it was


def test_make_tables_says_whose_questions_its_overall_figures_average(sweep):
    from ragexp.cli import tables

    md = tables.build("ragexp-handbook", overrides=OVERRIDES)
    assert ("**Overall** (answerable questions: hand, 45 q, which decide: "
            "`objective_source=hand`; each source's choice below)") in md
    t = sweep["tables"]["bm25"]
    [row] = [r for r in rows(md) if r[0] == "bm25" and len(r) == 8]
    assert row[2:4] == [f"{mean(t, 'rr_at_10', 'hand')[0]:.3f}",
                        f"{mean(t, 'ndcg_at_10', 'hand')[0]:.3f}"]
    # the per-kind table too: each kind's mean over the hand questions of that kind alone
    section = md.split("**Per question kind** (questions of source `hand`)", 1)[1]
    head, *body = rows(section.split("\n\n**", 1)[0])
    [kinds_row] = [r for r in body if r[0] == "bm25"]
    hand = t[t["source"] == "hand"]
    for col, name in (("rr_at_10", "RR@10"), ("ndcg_at_10", "nDCG@10")):
        for kind in ("factual", "semantic"):
            value = mean(hand[hand["kind"] == kind], col)[0]
            assert kinds_row[head.index(f"{name} {kind}")] == f"{value:.3f}"
    assert not any(c.endswith("unanswerable") or "known_item" in c for c in head)
