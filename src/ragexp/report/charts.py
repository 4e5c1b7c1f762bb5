"""The charts of a sweep's HTML report as small SVG documents written as text (no matplotlib:
importing and drawing with it was about 1.2 s of the page's 2.5 s for 12 runs): which
configuration wins on which question kind, the runs' abstain curves overlaid, and the rerank
depth curve. Each is one ``<svg>`` element with its ``xmlns``, so the same text sits inline in
the page and stands alone as a ``.svg`` file; no fonts, images or scripts.

The figures are those matplotlib drew before: the same grid, colours (matplotlib's ``Greens``,
``tab10`` and ``tab20``), lines, markers, labels and legends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ragexp.evaluation.stats import ALL, ALPHA
from ragexp.report.abstain_svg import steps_post
from ragexp.report.facts import Wins

WIN, WORSE = "\u2605", "\u25be"  # star: best on the kind; small down triangle: significantly worse
SVG_OPEN = ('<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">')
CHAR_W = 0.6  # a sans-serif character's mean width, in font sizes: to size label columns

# matplotlib's colour maps, as it defines them (matplotlib/_cm.py): Greens is ColorBrewer's
# 9-class sequential scheme interpolated linearly between equally spaced anchors
GREENS = ("#f7fcf5", "#e5f5e0", "#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45",
          "#006d2c", "#00441b")
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
         "#7f7f7f", "#bcbd22", "#17becf")
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728",
         "#ff9896", "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2",
         "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5")

# the wins grid, px
CELL_W, CELL_H = 110, 26
PAD, TITLE_H, HEAD_H, NOTE_LINE = 8, 30, 36, 14


def greens(t: float) -> str:
    """``#rrggbb`` of matplotlib's ``Greens`` colour map at ``t`` in [0, 1] (clipped): linear
    interpolation between the 9 anchors of ``GREENS``."""
    t = min(max(float(t), 0.0), 1.0) * (len(GREENS) - 1)
    i = min(int(t), len(GREENS) - 2)
    a, b = (tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in GREENS[i:i + 2])
    return "#" + "".join(f"{round(x + (y - x) * (t - i)):02x}" for x, y in zip(a, b))


def text_width(text: str, size: float) -> float:
    """Estimated width in px of ``text`` at font ``size`` px (``CHAR_W`` per character)."""
    return len(text) * size * CHAR_W


def order(wins: Wins, first: str | None = None) -> list[str]:
    """Runs from the best overall to the worst (ties keep the table's order), except that
    ``first`` (the sweep's recorded choice, its parent's ``ragexp.best_run``) leads the runs
    whose overall mean equals the top one: the page then names the best the sweep recorded,
    where equal means left the choice to the order runs were read in."""
    overall = wins.values[ALL]
    out = list(overall.sort_values(ascending=False, kind="stable").index)
    if first in out and overall[first] == overall[out[0]]:
        out.remove(first)
        out.insert(0, first)
    return out


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.2f}" y="{y:.2f}" text-anchor="{anchor}"{extra}>'
            f"{escape(text)}</text>")


def wins_svg(wins: Wins, labels: Mapping[str, str], title: str,
             first: str | None = None) -> str:
    """A grid: one row per run (best overall first, ``order``), one column per question group
    (all, then each kind, with its question count). Cell ``(i, j)`` is the rect at
    ``x = grid_left + sum of the widths of columns 0..j-1``, ``y = grid_top + i * CELL_H``
    (``grid_left``: the label column's width past ``PAD``; ``grid_top = TITLE_H + HEAD_H``); a
    column is ``CELL_W`` wide, or as wide as its header needs (a long kind name, 12 px of
    margin), so no header runs over its neighbour's. Cells are filled with ``Greens`` at
    ``0.12 + 0.7 * shade``, where shade runs over the column from its lowest value (0) to its
    highest (1; 1 for every cell when the column's values are equal). It shows the run's mean to
    three decimals, white on cells of shade above 0.6; the column's winner, and every run whose
    mean prints the same (``Wins.starred``), is bold, outlined and starred, runs significantly
    worse than it (Holm within the column) carry a triangle. ``first``: as ``order``'s."""
    runs, groups = order(wins, first), list(wins.values.columns)
    vals = wins.values.loc[runs, groups].to_numpy(float)
    lo, hi = np.nanmin(vals, axis=0), np.nanmax(vals, axis=0)
    shade = np.where(hi > lo, (vals - lo) / np.where(hi > lo, hi - lo, 1), 1.0)
    names = [labels.get(r, r[:8]) for r in runs]
    left = PAD + max([60.0, *(text_width(n, 12) + 12 for n in names)])
    top = TITLE_H + HEAD_H
    heads = ["all questions" if g == ALL else g for g in groups]
    widths = [max(CELL_W, math.ceil(text_width(h, 11) + 12)) for h in heads]
    xs = [left + sum(widths[:j]) for j in range(len(groups))]
    notes = [f"{WIN} best on that kind (ties at three decimals alike); {WORSE} significantly worse than it (paired "
             f"randomisation test, Holm-adjusted within the column, alpha {ALPHA});",
             "unmarked: not distinguishable from the best. Colour: within each column, from its "
             "lowest value (light) to its highest (dark)."]
    width = math.ceil(max(left + sum(widths), PAD + text_width(title, 14),
                          PAD + max(text_width(n, 10) for n in notes)) + PAD)
    height = top + CELL_H * len(runs) + PAD + NOTE_LINE * len(notes) + PAD
    parts = [SVG_OPEN.format(w=width, h=height), f'<rect width="{width}" height="{height}" '
             'fill="white"/>', _text(PAD, 20, title, extra=' font-size="14"')]
    for j, g in enumerate(groups):
        cx = xs[j] + widths[j] / 2
        parts += [_text(cx, TITLE_H + 14, heads[j], "middle"),
                  _text(cx, TITLE_H + 28, f"(n={wins.n[g]})", "middle")]
    for i, (run, name) in enumerate(zip(runs, names)):
        y = top + i * CELL_H
        parts.append(_text(left - 8, y + CELL_H / 2 + 4, name, "end", ' font-size="12"'))
        for j, g in enumerate(groups):
            x, cell_w = xs[j], widths[j]
            won, worse = run in wins.starred(g), run not in wins.tied[g]
            text = f"{vals[i, j]:.3f}" + (f" {WIN}" if won else f" {WORSE}" if worse else "")
            colour = "white" if shade[i, j] > 0.6 else "black"
            parts += [f'<rect class="cell" data-run="{escape(run)}" data-group="{escape(g)}" '
                      f'x="{x:.2f}" y="{y:.2f}" width="{cell_w}" height="{CELL_H}" '
                      f'fill="{greens(0.12 + 0.7 * shade[i, j])}"/>',
                      _text(x + cell_w / 2, y + CELL_H / 2 + 4, text, "middle",
                            f' font-size="12" fill="{colour}"'
                            + (' font-weight="bold"' if won else ""))]
            if won:
                parts.append(f'<rect class="winner" x="{x + 1:.2f}" y="{y + 1:.2f}" '
                             f'width="{cell_w - 2}" height="{CELL_H - 2}" fill="none" '
                             'stroke="black" stroke-width="2"/>')
    note_top = top + CELL_H * len(runs) + PAD
    parts += [_text(PAD, note_top + NOTE_LINE * (k + 1) - 3, n, extra=' font-size="10"')
              for k, n in enumerate(notes)]
    return "\n".join(parts + ["</svg>"]) + "\n"


@dataclass(frozen=True)
class Frame:
    """A plot area: data ``x`` in ``[x_lo, x_hi]`` and ``y`` in ``[y_lo, y_hi]`` drawn on the
    pixel box from ``(left, top)``, ``width`` x ``height`` px (SVG's y axis points down)."""

    left: float
    top: float
    width: float
    height: float
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    def px(self, x: float, y: float) -> tuple[float, float]:
        """Data coordinates -> SVG pixels (linear on both axes)."""
        return (self.left + (x - self.x_lo) / (self.x_hi - self.x_lo) * self.width,
                self.top + self.height - (y - self.y_lo) / (self.y_hi - self.y_lo) * self.height)

    def axes(self, xticks: Sequence[float], yticks: Sequence[float], xlabel: str,
             ylabel: str = "", xfmt: str = ".1f") -> list[str]:
        """The box, tick marks with their values (``xfmt`` for x, one decimal for y) and the
        axis labels (no y label when ``ylabel`` is empty)."""
        x0, y0 = self.left, self.top + self.height
        parts = [f'<rect x="{x0:.2f}" y="{self.top:.2f}" width="{self.width:.2f}" '
                 f'height="{self.height:.2f}" fill="none" stroke="black"/>']
        for t in xticks:
            tx = self.px(t, self.y_lo)[0]
            parts += [f'<line x1="{tx:.2f}" y1="{y0:.2f}" x2="{tx:.2f}" y2="{y0 + 4:.2f}" '
                      'stroke="black"/>', _text(tx, y0 + 16, format(t, xfmt), "middle")]
        for t in yticks:
            ty = self.px(self.x_lo, t)[1]
            parts += [f'<line x1="{x0 - 4:.2f}" y1="{ty:.2f}" x2="{x0:.2f}" y2="{ty:.2f}" '
                      'stroke="black"/>', _text(x0 - 7, ty + 4, f"{t:.1f}", "end")]
        parts.append(_text(x0 + self.width / 2, y0 + 36, xlabel, "middle"))
        if ylabel:
            parts.append(f'<text transform="translate(16 {self.top + self.height / 2:.2f}) '
                         f'rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
        return parts


def _points(pts: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.2f},{y:.2f}" for x, y in pts)


def _legend(x: float, top: float, entries: Sequence[tuple[str, str, str]]) -> list[str]:
    """One line per ``(text, colour, dasharray)`` entry, 16 px apart from ``top``: a 20 px
    line sample, then the text."""
    parts = []
    for i, (text, colour, dash) in enumerate(entries):
        y = top + 16 * i
        d = f' stroke-dasharray="{dash}"' if dash else ""
        parts += [f'<line x1="{x:.2f}" y1="{y - 4:.2f}" x2="{x + 20:.2f}" y2="{y - 4:.2f}" '
                  f'stroke="{colour}" stroke-width="2"{d}/>',
                  _text(x + 25, y, text, extra=' font-size="10"')]
    return parts


def _width(frame: Frame, legend: Sequence[str]) -> int:
    """The document's width: the plot area, then the legend to its right."""
    return math.ceil(frame.left + frame.width + 40 + max([0.0, *(text_width(t, 10)
                                                                 for t in legend)]) + PAD)


TICKS = tuple(i / 5 for i in range(6))  # 0, 0.2, ..., 1
ABSTAIN_FRAME = Frame(60, 15, 425, 335, 0.0, 1.0, 0.0, 1.02)


def abstain_svg(curves: Mapping[str, dict], labels: Mapping[str, str]) -> str:
    """Every run's abstain curve on one axis (``curves``: run id -> the run's
    ``abstain_curve.json``: ``curve`` points ``refused_answerable``/``refused_unanswerable``,
    ``auc``, ``budget``, operating point): share of unanswerable questions refused (y, 0 to
    1.02) against share of answerable ones refused (x, 0 to 1), as the threshold rises (a
    ``steps-post`` line per run, ``tab20`` colours in ``curves``' order), each run's operating
    point as a dot, every refusal budget as a dotted vertical line; the legend to the right.
    Plot area: ``ABSTAIN_FRAME``."""
    frame = ABSTAIN_FRAME
    legend = [(f"{labels.get(run, run[:8])} (AUC {c['auc']:.3f})", TAB20[i % 20], "")
              for i, (run, c) in enumerate(curves.items())]
    width = _width(frame, [t for t, _, _ in legend])
    height = math.ceil(max(frame.top + frame.height + 50, frame.top + 16 * len(legend) + PAD))
    parts = [SVG_OPEN.format(w=width, h=height),
             f'<rect width="{width}" height="{height}" fill="white"/>',
             *frame.axes(TICKS, TICKS, "answerable questions refused (wrongly)",
                         "unanswerable questions refused")]
    _, y_top = frame.px(0, frame.y_hi)
    _, y_bottom = frame.px(0, frame.y_lo)
    for b in sorted({float(c["budget"]) for c in curves.values()}):
        bx = frame.px(b, 0)[0]
        parts.append(f'<line class="budget" x1="{bx:.2f}" y1="{y_bottom:.2f}" x2="{bx:.2f}" '
                     f'y2="{y_top:.2f}" stroke="grey" stroke-dasharray="2,3"/>')
    for i, (run, c) in enumerate(curves.items()):
        colour = TAB20[i % 20]
        xs = [p["refused_answerable"] for p in c["curve"]]
        ys = [p["refused_unanswerable"] for p in c["curve"]]
        ox, oy = frame.px(c["refused_answerable"], c["refused_unanswerable"])
        parts += [f'<polyline class="curve" data-run="{escape(run)}" points="'
                  f'{_points([frame.px(x, y) for x, y in steps_post(xs, ys)])}" fill="none" '
                  f'stroke="{colour}" stroke-width="1.4"/>',
                  f'<circle class="operating-point" data-run="{escape(run)}" cx="{ox:.2f}" '
                  f'cy="{oy:.2f}" r="3" fill="{colour}"/>']
    parts += _legend(frame.left + frame.width + 15, frame.top + 10, legend)
    return "\n".join(parts + ["</svg>"]) + "\n"


DEPTH_LINES = (("ceiling_r", "R@top_n (ceiling)", "6,3", True),  # column, name, dash, markers
               ("reranked", "{objective} reranked", "", True),
               ("oracle", "{objective} oracle", "2,3", False))


def depth_frame(top_n: Sequence[int]) -> Frame:
    """The depth chart's plot area: x over the ``top_n`` values run, with a margin of 5% of
    their span on each side (matplotlib's default; 1 on each side for one value), y 0 to
    1.02."""
    lo, hi = float(min(top_n)), float(max(top_n))
    margin = 0.05 * (hi - lo) if hi > lo else 1.0
    return Frame(60, 15, 425, 300, lo - margin, hi + margin, 0.0, 1.02)


def depth_svg(curve: pd.DataFrame, objective: str) -> str:
    """The rerank depth curve (``facts.depth_curve``): against ``reranker.top_n`` (a tick at
    each value run), the first stage's ``R@top_n`` (its ceiling, dashed, dots), the reranked
    objective (solid, dots) and the oracle objective (dotted), one ``tab10`` colour per
    configuration (groups sorted by name); a missing value breaks its line. Plot area:
    ``depth_frame``."""
    frame = depth_frame(list(curve["top_n"]))
    groups = list(curve.groupby("group", sort=True))
    legend = [(f"{g}: {name.format(objective=objective)}", TAB10[i % 10], dash)
              for i, (g, _) in enumerate(groups) for _, name, dash, _ in DEPTH_LINES]
    width = _width(frame, [t for t, _, _ in legend])
    height = math.ceil(max(frame.top + frame.height + 50, frame.top + 16 * len(legend) + PAD))
    parts = [SVG_OPEN.format(w=width, h=height),
             f'<rect width="{width}" height="{height}" fill="white"/>',
             *frame.axes(sorted(set(curve["top_n"])), TICKS,
                         "reranker.top_n (first-stage items reranked)", xfmt="d")]
    for i, (group, rows) in enumerate(groups):
        colour = TAB10[i % 10]
        for col, _, dash, markers in DEPTH_LINES:
            pts = [frame.px(x, y) if not math.isnan(y) else None
                   for x, y in zip(rows["top_n"], rows[col].astype(float))]
            d = f' stroke-dasharray="{dash}"' if dash else ""
            runs, current = [], []
            for p in pts + [None]:  # consecutive finite points, one line each
                if p is None:
                    runs, current = (runs + [current] if current else runs), []
                else:
                    current.append(p)
            parts += [f'<polyline class="depth {col}" data-group="{escape(group)}" '
                      f'points="{_points(r)}" fill="none" stroke="{colour}" '
                      f'stroke-width="1.4"{d}/>' for r in runs]
            if markers:
                parts += [f'<circle class="depth {col}" data-group="{escape(group)}" '
                          f'cx="{x:.2f}" cy="{y:.2f}" r="2.5" fill="{colour}"/>'
                          for r in runs for x, y in r]
    parts += _legend(frame.left + frame.width + 15, frame.top + 10, legend)
    return "\n".join(parts + ["</svg>"]) + "\n"
