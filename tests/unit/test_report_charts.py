"""The sweep page's charts, SVG written as text (``report/charts.py``): every cell, point and
line sits at the pixel its axes put it (the pixel formulas written out here from the layout the
docstrings state), with the colours, marks and labels of the figure matplotlib drew before; each
document is well-formed XML. The colour map is checked against matplotlib's own where it is
installed."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from ragexp.evaluation.stats import ALL
from ragexp.report import charts
from ragexp.report.facts import Wins

NS = "{http://www.w3.org/2000/svg}"


def _texts(root) -> list[str]:
    return [t.text for t in root.iter(f"{NS}text")]


def _corners(points: str) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in points.split()]


def _flat(pairs) -> list[float]:
    return [v for pair in pairs for v in pair]


def test_greens_anchors_by_hand():
    """ColorBrewer's 9 Greens anchors sit at t = k/8; between them, linear per channel."""
    assert charts.greens(0) == "#f7fcf5" and charts.greens(1) == "#00441b"
    assert charts.greens(0.5) == "#74c476" and charts.greens(0.125) == "#e5f5e0"
    # a quarter of the way from #74c476 (116, 196, 118) to #41ab5d (65, 171, 93), t = 4.25/8:
    # 116 - 51/4 = 103.25, 196 - 25/4 = 189.75, 118 - 25/4 = 111.75 -> (103, 190, 112)
    assert charts.greens(4.25 / 8) == "#67be70"
    assert charts.greens(-1) == charts.greens(0) and charts.greens(2) == charts.greens(1)


def test_greens_matches_matplotlib():
    mpl = pytest.importorskip("matplotlib")
    cmap = mpl.colormaps["Greens"]
    for t in np.linspace(0, 1, 41):
        want = [round(255 * c) for c in cmap(t)[:3]]
        got = [int(charts.greens(t)[k:k + 2], 16) for k in (1, 3, 5)]
        # matplotlib reads a 256-entry table: up to one step of it (< 2 units) apart
        assert max(abs(a - b) for a, b in zip(got, want)) <= 2, (t, got, want)


def _wins() -> Wins:
    values = pd.DataFrame({ALL: {"a": 0.50, "b": 0.70, "c": 0.60},
                           "factual": {"a": 0.90, "b": 0.30, "c": 0.60},
                           "semantic": {"a": 0.40, "b": 0.40, "c": 0.40}})
    return Wins("nDCG@10", values, {ALL: 20, "factual": 12, "semantic": 8},
                winner={ALL: "b", "factual": "a", "semantic": "a"},
                tied={ALL: ("b", "c"), "factual": ("a", "c"), "semantic": ("a", "b", "c")})


def test_wins_grid_cells_sit_in_order_with_their_shade_and_marks():
    """Rows by the all-questions mean (b 0.70, c 0.60, a 0.50); cell (i, j) at
    ``(left + 110 j, 66 + 26 i)``; shade within each column (factual: b 0 -> c 0.5 -> a 1;
    semantic is flat: 1 everywhere) coloured ``Greens(0.12 + 0.7 shade)``; the winner (and runs
    tied with its printed value: all of semantic) bold, starred and outlined, runs outside the tied set marked with the triangle."""
    root = ET.fromstring(charts.wins_svg(_wins(), {"a": "alpha", "b": "beta", "c": "gamma"},
                                         "Which configuration wins"))
    cells = {(r.get("data-run"), r.get("data-group")): r for r in root.iter(f"{NS}rect")
             if r.get("class") == "cell"}
    assert len(cells) == 9
    left = float(cells[("b", ALL)].get("x"))
    rows, cols = ["b", "c", "a"], [ALL, "factual", "semantic"]
    shade = {("b", ALL): 1, ("c", ALL): 0.5, ("a", ALL): 0,
             ("b", "factual"): 0, ("c", "factual"): 0.5, ("a", "factual"): 1,
             ("a", "semantic"): 1, ("b", "semantic"): 1, ("c", "semantic"): 1}
    for i, run in enumerate(rows):
        for j, g in enumerate(cols):
            r = cells[(run, g)]
            assert (float(r.get("x")), float(r.get("y"))) == pytest.approx(
                (left + 110 * j, 66 + 26 * i))
            assert (r.get("width"), r.get("height")) == ("110", "26")
            assert r.get("fill") == charts.greens(0.12 + 0.7 * shade[(run, g)])
    # the label column holds the longest label (5 characters at 12 px, 0.6 em each) or 60 px
    assert left == pytest.approx(8 + 60)
    winners = [(float(r.get("x")), float(r.get("y"))) for r in root.iter(f"{NS}rect")
               if r.get("class") == "winner"]
    # semantic: all three 0.400, a tie on the printed value: every one starred and outlined
    # (drawn row by row: b, c, a)
    assert _flat(winners) == pytest.approx(_flat([(left + 1, 66 + 1),  # b on all questions
                                                  (left + 220 + 1, 66 + 1),  # b, semantic
                                                  (left + 220 + 1, 66 + 26 + 1),  # c, semantic
                                                  (left + 110 + 1, 66 + 52 + 1),  # a, factual
                                                  (left + 220 + 1, 66 + 52 + 1)]))  # a
    texts = {t.text: t for t in root.iter(f"{NS}text")}
    star, tri = charts.WIN, charts.WORSE
    for text, bold, colour in ((f"0.700 {star}", True, "white"), ("0.600", False, "black"),
                               (f"0.500 {tri}", False, "black"), (f"0.300 {tri}", False, "black"),
                               (f"0.900 {star}", True, "white")):
        assert text in texts, text
        assert (texts[text].get("font-weight") == "bold") == bold
        assert texts[text].get("fill") == colour
    # the row labels at their rows' middles, the headers with their counts, the note
    for i, name in enumerate(["beta", "gamma", "alpha"]):
        assert float(texts[name].get("y")) == pytest.approx(66 + 26 * i + 13 + 4)
    shown = _texts(root)
    assert {"all questions", "(n=20)", "factual", "(n=12)", "semantic", "(n=8)",
            "Which configuration wins"} <= set(shown)
    assert any("Holm-adjusted within the column, alpha 0.05" in t for t in shown)


def _curve(points, auc, budget, op):
    return {"curve": [{"refused_answerable": x, "refused_unanswerable": y} for x, y in points],
            "auc": auc, "budget": budget, "refused_answerable": op[0],
            "refused_unanswerable": op[1]}


def test_abstain_curves_overlaid_at_their_pixels():
    """x from 60 to 485 px over [0, 1], y from 350 up to 15 px over [0, 1.02]; each run's
    steps-post line (horizontal first, at the previous y), its operating point in its tab20
    colour, one dotted line per distinct budget, the legend with each AUC."""
    curves = {"r1": _curve([(0, 0), (0.1, 0.4), (0.5, 0.9), (1, 1)], 0.812, 0.1, (0.1, 0.4)),
              "r2": _curve([(0, 0), (0.25, 0.5), (1, 1)], 0.625, 0.2, (0.0, 0.0)),
              "r3": _curve([(0, 0), (1, 1)], 0.5, 0.1, (1.0, 1.0))}
    root = ET.fromstring(charts.abstain_svg(curves, {"r1": "bm25", "r2": "dense"}))

    def px(x, y):
        return 60 + 425 * x, 350 - 335 * y / 1.02

    lines = {p.get("data-run"): p for p in root.iter(f"{NS}polyline")}
    dots = {c.get("data-run"): c for c in root.iter(f"{NS}circle")}
    for colour, (run, c) in zip(("#1f77b4", "#aec7e8", "#ff7f0e"), curves.items()):
        pts = [(p["refused_answerable"], p["refused_unanswerable"]) for p in c["curve"]]
        corners = _corners(lines[run].get("points"))
        assert len(corners) == 2 * len(pts) - 1
        for i, (x, y) in enumerate(pts):
            assert corners[2 * i] == pytest.approx(px(x, y), abs=0.01)
            if i:
                assert corners[2 * i - 1] == pytest.approx(px(x, pts[i - 1][1]), abs=0.01)
        assert lines[run].get("stroke") == colour == dots[run].get("fill")
        assert (float(dots[run].get("cx")), float(dots[run].get("cy"))) == pytest.approx(
            px(c["refused_answerable"], c["refused_unanswerable"]), abs=0.01)
    budgets = sorted(float(b.get("x1")) for b in root.iter(f"{NS}line")
                     if b.get("class") == "budget")
    assert budgets == pytest.approx([px(0.1, 0)[0], px(0.2, 0)[0]], abs=0.01)
    shown = _texts(root)
    assert {"bm25 (AUC 0.812)", "dense (AUC 0.625)", "r3 (AUC 0.500)",
            "answerable questions refused (wrongly)", "unanswerable questions refused",
            "0.0", "0.2", "1.0"} <= set(shown)


def test_depth_curve_at_its_pixels_and_a_missing_value_breaks_its_line():
    """x over the depths run (5..20) with 5% of the span (0.75) each side: 60 + 425 (x - 4.25)
    / 16.5 px; y from 315 up to 15 px over [0, 1.02]. Ceiling dashed with dots, reranked solid
    with dots, oracle dotted without; tab10 colours by group name; the oracle's NaN at depth 10
    splits its line in two."""
    curve = pd.DataFrame({"group": ["b", "b", "b", "a", "a"], "top_n": [5, 10, 20, 5, 20],
                          "run_id": list("vwxyz"),
                          "ceiling_r": [0.5, 0.7, 0.9, 0.4, 0.8],
                          "reranked": [0.3, 0.4, 0.45, 0.2, 0.3],
                          "oracle": [0.6, math.nan, 0.8, 0.5, 0.7]})
    root = ET.fromstring(charts.depth_svg(curve, "nDCG@10"))

    def px(x, y):
        return 60 + 425 * (x - 4.25) / 16.5, 315 - 300 * y / 1.02

    lines: dict[tuple[str, str], list] = {}
    for p in root.iter(f"{NS}polyline"):
        lines.setdefault((p.get("data-group"), p.get("class").split()[1]), []).append(p)
    colour = {"a": "#1f77b4", "b": "#ff7f0e"}
    dash = {"ceiling_r": "6,3", "reranked": None, "oracle": "2,3"}
    for g, rows in curve.groupby("group"):
        for col in ("ceiling_r", "reranked", "oracle"):
            finite = [(x, y) for x, y in zip(rows["top_n"], rows[col]) if not math.isnan(y)]
            drawn = lines[(g, col)]
            assert all(p.get("stroke") == colour[g] and p.get("stroke-dasharray") == dash[col]
                       for p in drawn)
            got = [c for p in drawn for c in _corners(p.get("points"))]
            assert _flat(got) == pytest.approx(_flat(px(x, y) for x, y in finite), abs=0.01)
            dots = [(float(c.get("cx")), float(c.get("cy"))) for c in root.iter(f"{NS}circle")
                    if c.get("data-group") == g and c.get("class") == f"depth {col}"]
            assert _flat(dots) == (pytest.approx(_flat(px(x, y) for x, y in finite), abs=0.01)
                                   if col != "oracle" else [])
    assert len(lines[("b", "oracle")]) == 2 and len(lines[("b", "reranked")]) == 1
    shown = _texts(root)
    assert {"5", "10", "20", "a: R@top_n (ceiling)", "b: nDCG@10 reranked", "a: nDCG@10 oracle",
            "reranker.top_n (first-stage items reranked)"} <= set(shown)


def test_a_long_kind_name_widens_its_column_and_no_header_overlaps():
    """A trial: a 37-character kind name ran over its neighbours' headers in 110 px columns.
    Its column is as wide as the header needs; the columns after it move right by as much;
    every header fits its own column."""
    long = "factual_questions_with_long_kind_name"
    wins = _wins()
    wins = Wins(wins.measure, values=wins.values.rename(columns={"factual": long}),
                n={(long if g == "factual" else g): v for g, v in wins.n.items()},
                winner={(long if g == "factual" else g): v for g, v in wins.winner.items()},
                tied={(long if g == "factual" else g): v for g, v in wins.tied.items()})
    root = ET.fromstring(charts.wins_svg(wins, {"a": "alpha", "b": "beta", "c": "gamma"}, "t"))
    cells = {r.get("data-group"): r for r in root.iter(f"{NS}rect")
             if r.get("class") == "cell" and r.get("data-run") == "b"}
    x = {g: float(r.get("x")) for g, r in cells.items()}
    w = {g: float(r.get("width")) for g, r in cells.items()}
    need = len(long) * 11 * charts.CHAR_W + 12
    assert w[ALL] == 110 and w["semantic"] == 110 and need <= w[long] < need + 1
    assert x[long] == pytest.approx(x[ALL] + 110)
    assert x["semantic"] == pytest.approx(x[long] + w[long])
    heads = {t.text: float(t.get("x")) for t in root.iter(f"{NS}text")
             if t.text in ("all questions", long, "semantic")}
    for g, head in ((ALL, "all questions"), (long, long), ("semantic", "semantic")):
        half = len(head) * 11 * charts.CHAR_W / 2
        assert x[g] <= heads[head] - half and heads[head] + half <= x[g] + w[g]
    assert float(root.get("width")) >= x["semantic"] + 110


def test_runs_tied_on_the_printed_value_are_starred_alike():
    """A trial: ``hybrid_convex 0.588 ★`` beside ``chunks_semantic 0.588`` without one. The
    star goes to every run whose mean prints the same at three decimals as the winner's: 0.5884
    and 0.5876 both print 0.588; 0.5874 prints 0.587 and is not starred."""
    from ragexp.report import html as report_html

    values = pd.DataFrame({ALL: {"a": 0.5884, "b": 0.5876, "c": 0.5874}})
    wins = Wins("nDCG@10", values, {ALL: 40}, {ALL: "a"}, {ALL: ("a", "b", "c")})
    assert wins.starred(ALL) == {"a", "b"}
    root = ET.fromstring(charts.wins_svg(wins, {"a": "alpha", "b": "beta", "c": "gamma"}, "t"))
    cells = [t.text for t in root.iter(f"{NS}text") if t.text and t.text.startswith("0.58")]
    assert sorted(cells) == ["0.587", f"0.588 {charts.WIN}", f"0.588 {charts.WIN}"]
    outlined = [r for r in root.iter(f"{NS}rect") if r.get("class") == "winner"]
    assert len(outlined) == 2
    page = "".join(report_html.wins_section(wins, {"a": "alpha", "b": "beta", "c": "gamma"}, ""))
    assert page.count(f"0.588 {charts.WIN}") == 2 and f"0.587 {charts.WIN}" not in page


def test_the_sweeps_recorded_best_leads_the_runs_tied_with_the_top_mean():
    """The page and its chart name the best the sweep recorded (``ragexp.best_run``) where
    equal means leave the order to how runs were read; a recorded run below the top keeps its
    place, and an unknown one changes nothing."""
    import pandas as pd

    from ragexp.evaluation.stats import ALL
    from ragexp.report import charts
    from ragexp.report.facts import Wins

    values = pd.DataFrame({ALL: [0.9296, 0.9296, 0.5, 0.9296]}, index=["a", "b", "c", "d"])
    wins = Wins("nDCG@10", values, {ALL: 16}, {ALL: "a"}, {ALL: ("a", "b", "d")})
    assert charts.order(wins) == ["a", "b", "d", "c"]
    assert charts.order(wins, "d") == ["d", "a", "b", "c"]
    assert charts.order(wins, "c") == ["a", "b", "d", "c"]
    assert charts.order(wins, "zz") == charts.order(wins)
    svg = charts.wins_svg(wins, dict(zip("abcd", "abcd")), "t", "d")
    assert svg.index(">d</text>") < svg.index(">a</text>")
