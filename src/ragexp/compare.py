"""Compare runs: a table of what differs and what it measured, and paired significance tests.

Paired tests are over per-question scores of the same golden questions (answerable ones), for
run R against baseline B with ``d_i = R_i - B_i``:

- mean difference ``mean(d)`` with a 95% bootstrap interval (BCa, 10,000 resamples of d);
- p-value of a two-sided paired randomisation test: under H0 each ``d_i`` is as likely to be
  ``-d_i``, so the null distribution of ``mean(d)`` comes from 10,000 random sign flips
  (scipy.stats.permutation_test). Seeds are fixed, so the output is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ragexp import readers, tracking

MAIN = ("rr_at_10", "ndcg_at_10", "success_at_1", "success_at_10", "r_at_10")
REFUSAL = ("abstain.refused_unanswerable", "abstain.refused_answerable",
           "abstain.cv.refused_unanswerable", "abstain.cv.refused_answerable")
HIDDEN_PARAMS = {"progress", "force", "experiment", "cache_dir", "ablation", "verbose"}
TEXT_COLUMNS = ("id", "kind", "top_item", "answer")  # per_question.csv columns never parsed
N_RESAMPLES = 10_000
ALPHA = 0.05


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
    if parent:
        filt += f" and tags.`mlflow.parentRunId` = '{parent}'"
    df = mlflow.search_runs(experiment_names=[experiment], filter_string=filt,
                            order_by=["attributes.start_time DESC"])
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
    ``readers.InputError`` names the run's file for a missing, empty or repeated id."""
    try:
        path = tracking.artifact_path(run_id, "per_question.csv")
    except tracking.RunNotFound as exc:  # a FAILED run, say: why it has no table
        raise SystemExit(f"error: {exc}") from None
    try:
        return readers.read_csv(path, TEXT_COLUMNS)
    except readers.InputError as exc:
        raise readers.InputError(f"per_question.csv of run {run_id}", exc.line,
                                 exc.message) from None


@dataclass(frozen=True)
class Paired:
    metric: str
    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int


def paired_test(run: np.ndarray, base: np.ndarray, metric: str) -> Paired:
    d = np.asarray(run, float) - np.asarray(base, float)
    if len(d) == 0:
        raise ValueError("no paired questions")
    if np.allclose(d, d[0]):
        return Paired(metric, float(d.mean()), float(d[0]), float(d[0]),
                      1.0 if d[0] == 0 else 0.0, len(d))
    perm = stats.permutation_test((d,), np.mean, permutation_type="samples",
                                  n_resamples=N_RESAMPLES, alternative="two-sided",
                                  random_state=0)
    boot = stats.bootstrap((d,), np.mean, n_resamples=N_RESAMPLES, confidence_level=0.95,
                           random_state=0)
    ci = boot.confidence_interval
    return Paired(metric, float(d.mean()), float(ci.low), float(ci.high), float(perm.pvalue),
                  len(d))


def against_baseline(run_id: str, baseline_id: str) -> tuple[list[Paired], list[str]]:
    """Paired tests on RR@10 and nDCG@10, and the kinds whose RR@10 got worse (``*``: p < 0.05)."""
    base = per_question(baseline_id)
    run = per_question(run_id)
    if set(base["id"]) != set(run["id"]):
        raise SystemExit(f"runs {run_id[:8]} and {baseline_id[:8]} were evaluated on different "
                         f"questions: a paired test needs the same golden set")
    merged = run.merge(base, on=["id", "kind"], suffixes=("", "_base"))
    merged = merged[merged["kind"] != "unanswerable"].dropna(subset=["rr_at_10"])
    tests = [paired_test(merged[c], merged[f"{c}_base"], name)
             for c, name in (("rr_at_10", "rr_at_10"), ("ndcg_at_10", "ndcg_at_10"))]
    worse = []
    for kind, group in merged.groupby("kind"):
        t = paired_test(group["rr_at_10"], group["rr_at_10_base"], "rr_at_10")
        if t.mean_diff < 0:
            worse.append(f"{kind}{'*' if t.p_value < ALPHA else ''} ({t.mean_diff:+.3f})")
    return tests, worse


def with_baseline(df: pd.DataFrame, tab: pd.DataFrame, baseline_id: str) -> pd.DataFrame:
    tab = tab.copy()
    cols: dict[str, list] = {k: [] for k in ("ΔRR@10 [95% CI]", "p(RR@10)", "ΔnDCG@10 [95% CI]",
                                             "p(nDCG@10)", "kinds worse")}
    for run_id in df["run_id"]:
        if run_id == baseline_id:
            for k in cols:
                cols[k].append("baseline")
            continue
        tests, worse = against_baseline(run_id, baseline_id)
        for t, label in zip(tests, ("RR@10", "nDCG@10")):
            cols[f"Δ{label} [95% CI]"].append(f"{t.mean_diff:+.3f} [{t.ci_low:+.3f}, "
                                              f"{t.ci_high:+.3f}]")
            cols[f"p({label})"].append(f"{t.p_value:.3f}")
        cols["kinds worse"].append(", ".join(worse) or "none")
    for k, v in cols.items():
        tab[k] = v
    return tab


def render(tab: pd.DataFrame, fmt: str = "markdown") -> str:
    if fmt == "csv":
        return tab.to_csv(index=False)
    header = "| " + " | ".join(map(str, tab.columns)) + " |"
    sep = "|" + "|".join("---" for _ in tab.columns) + "|"
    rows = ["| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |"
            for row in tab.itertuples(index=False)]
    return "\n".join([header, sep, *rows])


NOTE = ("Paired tests over per-question scores of the answerable golden questions: Δ = run − "
        "baseline; 95% CI by BCa bootstrap (10,000 resamples); p from a two-sided paired "
        "randomisation (sign-flip) test, 10,000 permutations. 'kinds worse' lists kinds whose "
        "RR@10 fell, * where p < 0.05.")
