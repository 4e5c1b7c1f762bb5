"""The charts of a sweep's HTML report (matplotlib, drawn offline): which configuration wins on
which question kind, and the runs' abstain curves overlaid. Each returns a matplotlib figure;
:func:`svg` turns one into inline SVG text (no external fonts, images or scripts)."""

from __future__ import annotations

import io
from typing import Mapping

import numpy as np
import pandas as pd

from ragexp.evaluation.stats import ALL, ALPHA
from ragexp.report.facts import Wins

WIN, WORSE = "\u2605", "\u25be"  # star: best on the kind; small down triangle: significantly worse


def _pyplot():
    # defer heavy import
    import matplotlib

    matplotlib.use("Agg")
    # defer heavy import
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, selectable, no font files
    return plt


def svg(fig) -> str:
    """The figure as an ``<svg>`` element (XML prologue and DOCTYPE removed), then closed."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def save_png(fig, path, dpi: int = 110) -> None:
    fig.savefig(path, format="png", dpi=dpi, bbox_inches="tight")
    _pyplot().close(fig)


def order(wins: Wins) -> list[str]:
    """Runs from the best overall to the worst (ties keep the table's order)."""
    return list(wins.values[ALL].sort_values(ascending=False, kind="stable").index)


def wins_figure(wins: Wins, labels: Mapping[str, str], title: str):
    """A grid: one row per run (best overall first), one column per question group (all, then
    each kind, with its question count). Each cell shows the run's mean; colour runs from the
    column's lowest (light) to its highest (dark) value; the column's winner is outlined and
    starred, runs significantly worse than it (Holm within the column) carry a triangle."""
    plt = _pyplot()

    runs, groups = order(wins), list(wins.values.columns)
    vals = wins.values.loc[runs, groups].to_numpy(float)
    lo, hi = np.nanmin(vals, axis=0), np.nanmax(vals, axis=0)
    shade = np.where(hi > lo, (vals - lo) / np.where(hi > lo, hi - lo, 1), 1.0)
    fig, ax = plt.subplots(figsize=(1.35 * len(groups) + 3.2, 0.42 * len(runs) + 1.6))
    ax.imshow(0.12 + 0.7 * shade, cmap="Greens", vmin=0, vmax=1, aspect="auto")
    for i, run in enumerate(runs):
        for j, g in enumerate(groups):
            won = wins.winner[g] == run
            worse = run not in wins.tied[g]
            text = f"{vals[i, j]:.3f}" + (f" {WIN}" if won else f" {WORSE}" if worse else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    fontweight="bold" if won else "normal",
                    color="white" if shade[i, j] > 0.6 else "black")
            if won:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                           edgecolor="black", linewidth=2))
    ax.set_xticks(range(len(groups)),
                  [f"{'all questions' if g == ALL else g}\n(n={wins.n[g]})" for g in groups])
    ax.set_yticks(range(len(runs)), [labels.get(r, r[:8]) for r in runs])
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=11, pad=10, loc="left")
    ax.text(0, -0.3 / len(runs), f"{WIN} best on that kind; {WORSE} significantly worse than "
            f"it (paired randomisation test, Holm-adjusted within the column, alpha {ALPHA});\n"
            f"unmarked: not distinguishable from the best. Colour: within each column, from "
            f"its lowest value (light) to its highest (dark).", transform=ax.transAxes,
            fontsize=8, ha="left", va="top")
    return fig


def abstain_figure(curves: Mapping[str, dict], labels: Mapping[str, str]):
    """Every run's abstain curve on one axis: share of unanswerable questions refused against
    share of answerable ones refused, as the threshold rises (steps), each run's operating point
    as a dot, and the refusal budget as a dotted line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    cmap = plt.get_cmap("tab20")
    budgets = set()
    for i, (run, c) in enumerate(curves.items()):
        colour = cmap(i % 20)
        xs = [p["refused_answerable"] for p in c["curve"]]
        ys = [p["refused_unanswerable"] for p in c["curve"]]
        ax.plot(xs, ys, drawstyle="steps-post", color=colour, linewidth=1.4,
                label=f"{labels.get(run, run[:8])} (AUC {c['auc']:.3f})")
        ax.scatter([c["refused_answerable"]], [c["refused_unanswerable"]], color=colour,
                   zorder=3, s=22)
        budgets.add(float(c["budget"]))
    for b in sorted(budgets):
        ax.axvline(b, linestyle=":", color="grey")
    ax.set_xlabel("answerable questions refused (wrongly)")
    ax.set_ylabel("unanswerable questions refused")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return fig


def depth_figure(curve: pd.DataFrame, objective: str):
    """The rerank depth curve (``facts.depth_curve``): against ``reranker.top_n``, the first
    stage's ``R@top_n`` (its ceiling, dashed) and the reranked and oracle objective (solid and
    dotted), one colour per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    cmap = plt.get_cmap("tab10")
    for i, (group, rows) in enumerate(curve.groupby("group", sort=True)):
        colour, x = cmap(i % 10), rows["top_n"]
        ax.plot(x, rows["ceiling_r"], "--", color=colour, marker="o", markersize=3,
                label=f"{group}: R@top_n (ceiling)")
        ax.plot(x, rows["reranked"], "-", color=colour, marker="o", markersize=3,
                label=f"{group}: {objective} reranked")
        ax.plot(x, rows["oracle"], ":", color=colour, label=f"{group}: {objective} oracle")
    ax.set_xlabel("reranker.top_n (first-stage items reranked)")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return fig
