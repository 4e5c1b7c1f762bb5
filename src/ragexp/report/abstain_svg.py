"""One run's abstain curve as a small standalone SVG, written as text (no matplotlib: drawing
the PNG with it cost about 1 s per run, a tenth of a warm run's wall time).

The figure is the one matplotlib drew before: refused answerable questions (x) against refused
unanswerable questions (y), as a step line that holds each point's y until the next x
(matplotlib's ``steps-post``), the budget as a dotted vertical line and the operating point as
a red dot, both axes from 0 to 1 (y to 1.02) with ticks every 0.2.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

WIDTH, HEIGHT = 500, 400  # px, as matplotlib's 5 x 4 in at 100 dpi
LEFT, RIGHT, TOP, BOTTOM = 60, 15, 15, 50  # margins around the plot area, px
Y_MAX = 1.02


def to_px(x: float, y: float) -> tuple[float, float]:
    """Data coordinates (both in [0, 1]) -> SVG pixels: x grows rightwards from ``LEFT``, y
    upwards from ``HEIGHT - BOTTOM`` (SVG's y axis points down)."""
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    return LEFT + x * w, HEIGHT - BOTTOM - y / Y_MAX * h


def steps_post(xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
    """The corners of a ``steps-post`` line through ``(xs[i], ys[i])``: from each point
    horizontally to the next x, then vertically to its y."""
    out: list[tuple[float, float]] = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i:
            out.append((x, ys[i - 1]))
        out.append((x, y))
    return out


def abstain_svg(result) -> str:
    """The SVG document for ``result`` (a ``stages.abstain.AbstainResult``: its ``curve``
    points, ``signal``, ``auc``, ``budget``, ``threshold`` and operating point
    ``refused_answerable``/``refused_unanswerable``), about 3-6 KB for a golden set's curve."""
    xs = [p.refused_answerable for p in result.curve]
    ys = [p.refused_unanswerable for p in result.curve]
    line = " ".join(f"{px:.2f},{py:.2f}" for px, py in (to_px(x, y) for x, y in
                                                        steps_post(xs, ys)))
    x0, y0 = to_px(0, 0)
    x1, y1 = to_px(1, Y_MAX)
    bx = to_px(result.budget, 0)[0]
    ox, oy = to_px(result.refused_answerable, result.refused_unanswerable)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<rect x="{x0:.2f}" y="{y1:.2f}" width="{x1 - x0:.2f}" height="{y0 - y1:.2f}" '
             f'fill="none" stroke="black"/>']
    for i in range(6):
        t = i / 5
        tx, ty = to_px(t, t)
        parts += [f'<line x1="{tx:.2f}" y1="{y0:.2f}" x2="{tx:.2f}" y2="{y0 + 4:.2f}" '
                  f'stroke="black"/>',
                  f'<text x="{tx:.2f}" y="{y0 + 16:.2f}" text-anchor="middle">{t:.1f}</text>',
                  f'<line x1="{x0 - 4:.2f}" y1="{ty:.2f}" x2="{x0:.2f}" y2="{ty:.2f}" '
                  f'stroke="black"/>',
                  f'<text x="{x0 - 7:.2f}" y="{ty + 4:.2f}" text-anchor="end">{t:.1f}</text>']
    legend = [(f"{result.signal} signal (AUC {result.auc:.3f})", "#1f77b4"),
              (f"budget {result.budget:.3f}", "grey"),
              (f"operating point, tau={result.threshold:.3f}", "red")]
    parts += [f'<polyline class="curve" points="{line}" fill="none" stroke="#1f77b4" '
              f'stroke-width="1.5"/>',
              f'<line class="budget" x1="{bx:.2f}" y1="{y0:.2f}" x2="{bx:.2f}" y2="{y1:.2f}" '
              f'stroke="grey" stroke-dasharray="2,3"/>',
              f'<circle class="operating-point" cx="{ox:.2f}" cy="{oy:.2f}" r="4" fill="red"/>',
              f'<text x="{(x0 + x1) / 2:.2f}" y="{HEIGHT - 12}" text-anchor="middle">'
              f'answerable questions refused (wrongly)</text>',
              f'<text transform="translate(16 {(y0 + y1) / 2:.2f}) rotate(-90)" '
              f'text-anchor="middle">unanswerable questions refused</text>']
    for i, (text, colour) in enumerate(legend):
        ly = y0 - 52 + 16 * i
        parts += [f'<line x1="{x1 - 215:.2f}" y1="{ly - 4:.2f}" x2="{x1 - 195:.2f}" '
                  f'y2="{ly - 4:.2f}" stroke="{colour}" stroke-width="2"/>',
                  f'<text x="{x1 - 190:.2f}" y="{ly:.2f}" font-size="9">{escape(text)}</text>']
    return "\n".join(parts + ["</svg>"]) + "\n"
