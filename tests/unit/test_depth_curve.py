"""The rerank depth curve of a sweep's page: built from the runs' ``rerank.*`` metrics only
when the sweep varies ``reranker.top_n``; end to end, a two-depth sweep's page shows each
run's logged values."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from cli_runs import run_app

from ragexp.report import facts


def _frame(rows):
    return pd.DataFrame(rows)


def _row(run, top_n, reranker="lexical", chunks="120", r=0.5, share=0.9):
    return {"run_id": run, "params.reranker.top_n": str(top_n), "params.reranker.name": reranker,
            "params.chunking.max_words": chunks, f"metrics.rerank.ceiling.r_at_{top_n}": r,
            f"metrics.rerank.ceiling.success_at_{top_n}": r + 0.1,
            "metrics.rerank.first_stage.ndcg_at_10": 0.4,
            "metrics.rerank.reranked.ndcg_at_10": 0.45,
            "metrics.rerank.oracle.ndcg_at_10": 0.5, "metrics.rerank.realised_share": share}


def test_no_curve_without_two_depths():
    runs = _frame([_row("a", 20), _row("b", 20, chunks="60"),
                   {"run_id": "c", "params.reranker.top_n": "0", "params.reranker.name": "none",
                    "params.chunking.max_words": "120"}])
    assert facts.depth_curve(runs, "nDCG@10").empty


def test_curve_reads_each_runs_depth_and_groups_by_the_other_params():
    runs = _frame([_row("b", 40, r=0.7), _row("a", 10, r=0.3), _row("c", 10, chunks="60", r=0.2),
                   {"run_id": "n", "params.reranker.top_n": "0", "params.reranker.name": "none",
                    "params.chunking.max_words": "120"}])
    curve = facts.depth_curve(runs, "nDCG@10")
    assert list(curve["run_id"]) == ["a", "b", "c"]  # by group, then top_n; the run without
    assert list(curve["top_n"]) == [10, 40, 10]      # a reranker is left out
    assert list(curve["group"]) == ["chunking.max_words=120"] * 2 + ["chunking.max_words=60"]
    assert list(curve["ceiling_r"]) == [0.3, 0.7, 0.2]
    assert curve["ceiling_success"].tolist() == pytest.approx([0.4, 0.8, 0.3])
    assert set(curve["oracle"]) == {0.5}


@pytest.mark.slow
def test_a_sweep_over_top_n_shows_the_curve_with_the_logged_values(mlflow_store):
    from ragexp.decide import compare
    from ragexp.report import html as report_html
    from ragexp.report import sweep_data
    from ragexp.tracking import store as tracking

    tmp = mlflow_store.folder
    proc = run_app(tmp, "-m", "embedder=hash", "embedder.dim=256", "reranker.top_n=10,30",
                   f"hydra.sweep.dir={tmp / 's'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    parent = sweep_data.latest_sweep("ragexp-handbook")
    page = Path(tracking.artifact_path(parent, report_html.ARTIFACT)).read_text()
    assert "<h2>Rerank depth</h2>" in page
    depth = ET.fromstring(re.search(r"<h2>Rerank depth</h2>.*?(<svg .*?</svg>)", page,
                                    flags=re.S).group(1))  # the chart, inline and well-formed
    drawn = {p.get("class") for p in depth.iter("{http://www.w3.org/2000/svg}polyline")}
    assert drawn == {"depth ceiling_r", "depth reranked", "depth oracle"}
    runs = compare.runs_frame("ragexp-handbook", parent=parent)
    assert len(runs) == 2
    # both depths are within k: the second job reuses the first one's first-stage search
    assert sorted(runs["metrics.stage.dense_search.built"]) == [0.0, 1.0]
    for _, run in runs.iterrows():
        n = int(run["params.reranker.top_n"])
        for column, key in (("ceiling_r", f"ceiling.r_at_{n}"),
                            ("reranked", "reranked.ndcg_at_10"), ("share", "realised_share")):
            cell = re.search(rf'data-k="depth\|{run["run_id"]}\|{column}" data-v="([^"]+)"', page)
            assert cell, (n, column)
            assert float(cell.group(1)) == pytest.approx(float(run[f"metrics.rerank.{key}"]))
        assert float(run["metrics.rerank.reranked.ndcg_at_10"]) == pytest.approx(
            float(run["metrics.ndcg_at_10"]))
        assert not math.isnan(float(run["metrics.rerank.ceiling.success_at_" + str(n)]))
