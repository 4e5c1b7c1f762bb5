"""Compare runs: a table of what differs and what it measured, and paired significance tests.

The MLflow edge of the comparison: which runs, their metrics and per-question tables. The
statistics are in ``stats.py`` (paired randomisation test, BCa interval, Holm/BH correction,
power) and the families of tests in ``significance.py``.
"""

from __future__ import annotations

import pandas as pd

from ragexp import readers, significance, stats, tracking

MAIN = ("rr_at_10", "ndcg_at_10", "success_at_1", "success_at_10", "r_at_10")
REFUSAL = ("abstain.refused_unanswerable", "abstain.refused_answerable",
           "abstain.cv.refused_unanswerable", "abstain.cv.refused_answerable")
HIDDEN_PARAMS = {"progress", "force", "experiment", "cache_dir", "ablation", "verbose",
                 "objective", "baseline", "reuse_stages", "sweep_report"}
# per_question.csv columns never parsed
TEXT_COLUMNS = ("id", "kind", "question", "top_item", "answer", "cited", "refusal_reason")


def runs_frame(experiment: str, parent: str | None = None,
               run_ids: list[str] | None = None) -> pd.DataFrame:
    """Finished runs: of a sweep (``parent``), the given ids, or else the latest finished run
    of each distinct configuration in the experiment."""
    import mlflow

    tracking.client()
    if run_ids:
        df = mlflow.search_runs(search_all_experiments=True,
                                filter_string="attributes.run_id IN ("
                                + ",".join(f"'{r}'" for r in run_ids) + ")")
        missing = set(run_ids) - set(df.get("run_id", []))
        if missing:
            raise SystemExit(f"unknown run id(s): {', '.join(sorted(missing))}")
        return df.set_index("run_id").loc[run_ids].reset_index()
    filt = "attributes.status = 'FINISHED' and tags.`ragexp.config_hash` != ''"
    searches = [filt]
    if parent:  # its children, and the finished runs it skipped and linked (sweep.SKIP_LINK)
        searches = [f"{filt} and tags.`mlflow.parentRunId` = '{parent}'",
                    f"{filt} and tags.`ragexp.in_sweep.{parent}` = 'skipped'"]
    df = pd.concat([mlflow.search_runs(experiment_names=[experiment], filter_string=f,
                                       order_by=["attributes.start_time DESC"])
                    for f in searches], ignore_index=True)
    if df.empty:
        raise SystemExit(f"no finished runs in experiment {experiment!r}"
                         + (f" under parent run {parent}" if parent else "")
                         + f" (tracking URI {tracking.tracking_uri()})")
    if not parent:
        df = df.drop_duplicates("tags.ragexp.config_hash")
    return df.sort_values("tags.ragexp.ablation", kind="stable").reset_index(drop=True)


def differing_params(df: pd.DataFrame) -> list[str]:
    """Config keys that every run has and that differ between runs. A key only some runs have
    belongs to one option of a group (``embedder.dim`` of ``hash``), and the group's ``name``
    column already shows that choice."""
    cols = [c for c in df.columns if c.startswith("params.")
            and c[len("params."):] not in HIDDEN_PARAMS and df[c].notna().all()]
    return [c for c in cols if df[c].astype(str).nunique() > 1]


def kinds_in(df: pd.DataFrame, metric: str) -> list[str]:
    """Question kinds the runs were measured on, read off their ``<metric>.<kind>`` columns (kinds
    come from the data, so no list of them is fixed in code)."""
    prefix = f"metrics.{metric}."
    return sorted({c[len(prefix):] for c in df.columns if c.startswith(prefix)})


def table(df: pd.DataFrame, per_kind: tuple[str, ...] = ("rr_at_10",)) -> pd.DataFrame:
    """One row per run: name, differing config keys, main metrics, per-kind, refusal rates."""
    out = pd.DataFrame({"run": df["run_id"].str[:8],
                        "name": df.get("tags.ragexp.ablation", pd.Series(["-"] * len(df)))})
    for col in differing_params(df):
        out[col[len("params."):]] = df[col]
    kinds = kinds_in(df, MAIN[0])
    metric_cols = [*MAIN, *(f"{m}.{k}" for m in per_kind for k in kinds), *REFUSAL]
    for m in metric_cols:
        if f"metrics.{m}" in df:
            out[m] = df[f"metrics.{m}"].round(3)
    return out


def per_question(run_id: str) -> pd.DataFrame:
    """A run's ``per_question.csv``, ids as strings exactly as written (``01`` is not ``1``);
    ``readers.InputError`` names the run's file for a missing, empty or repeated id, and a run
    without the table (a FAILED run, say) is an error saying why."""
    try:
        path = tracking.artifact_path(run_id, "per_question.csv")
    except tracking.RunNotFound as exc:  # a FAILED run, say: why it has no table
        raise SystemExit(f"error: {exc}") from None
    try:
        return readers.read_csv(path, TEXT_COLUMNS)
    except readers.InputError as exc:
        raise readers.InputError(f"per_question.csv of run {run_id}", exc.line,
                                 exc.message) from None


def baseline_tests(df: pd.DataFrame, baseline_id: str,
                   measures: tuple[str, ...] = significance.DEFAULT_MEASURES,
                   method: str = "holm") -> dict[str, list[stats.Paired]]:
    """Every run of ``df`` tested against the baseline, overall and per kind, for each measure;
    p adjusted over all of these tests as one family (``significance.family``)."""
    tables = {r: per_question(r) for r in dict.fromkeys([baseline_id, *df["run_id"]])}
    try:
        return significance.family(tables, baseline_id, measures, method)
    except significance.NotPaired as exc:
        raise SystemExit(str(exc)) from None


def with_baseline(df: pd.DataFrame, tab: pd.DataFrame, baseline_id: str,
                  measures: tuple[str, ...] = significance.DEFAULT_MEASURES,
                  method: str = "holm") -> tuple[pd.DataFrame, dict[str, list[stats.Paired]]]:
    """``tab`` with the paired-test columns added (``significance.wide_columns``), and the
    tests themselves."""
    results = baseline_tests(df, baseline_id, measures, method)
    tab = tab.copy()
    for k, v in significance.wide_columns(results, list(df["run_id"]), baseline_id,
                                          measures).items():
        tab[k] = v
    return tab, results


def render(tab: pd.DataFrame, fmt: str = "markdown") -> str:
    if fmt == "csv":
        return tab.to_csv(index=False)
    header = "| " + " | ".join(map(str, tab.columns)) + " |"
    sep = "|" + "|".join("---" for _ in tab.columns) + "|"
    rows = ["| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |"
            for row in tab.itertuples(index=False)]
    return "\n".join([header, sep, *rows])
