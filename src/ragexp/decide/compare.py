"""Compare runs: a table of what differs and what it measured, and paired significance tests.

The MLflow edge of the comparison: which runs, their metrics and per-question tables. The
statistics are in ``stats.py`` (paired randomisation test, BCa interval, Holm/BH correction,
power) and the families of tests in ``significance.py``.
"""

from __future__ import annotations

import json
import math
from typing import Iterable, Mapping

import pandas as pd

from ragexp.data import readers
from ragexp.decide import figures, labels, replay, sources
from ragexp.errors import NotFound, listed
from ragexp.evaluation import significance, stats
from ragexp.evaluation.measures import measure_key
from ragexp.records import HAND
from ragexp.tracking import store as tracking

MAIN = ("rr_at_10", "ndcg_at_10", "success_at_1", "success_at_10", "r_at_10")
WIDTH = 100  # compare's default table fits a terminal this wide (render)
NAME_MIN = 12  # a run's label is never cut shorter than this to fit WIDTH
REFUSAL = ("abstain.refused_unanswerable", "abstain.refused_answerable",
           "abstain.cv.refused_unanswerable", "abstain.cv.refused_answerable")
HIDDEN_PARAMS = labels.BOOKKEEPING
# per_question.csv columns never parsed
TEXT_COLUMNS = ("id", "kind", "question", "top_item", "answer", "cited", "refusal_reason")
# the data a run was evaluated on: runs to pair, gate or confirm must agree on both
DATA_TAGS = ("corpus_hash", "golden_hash")
# what a run's measures are of: a section-unit run's per-question values paired with a chunk-unit
# run's read a gain of the unit as one of retrieval (+0.288, p 0.016), and the gate passed it
SCORING_PARAMS = ("dataset.unit",)


def not_comparable(runs: Iterable[tuple[Mapping, Mapping]]) -> str:
    """Why runs given as ``(tags, params)`` pairs cannot be ranked against one another (they
    differ in a data tag, ``DATA_TAGS``, or a scoring param, ``SCORING_PARAMS``: their measures
    are of other questions or units), or ``""``. A sweep over ``dataset.unit=chunk,section``
    named the section run best at p < 0.05, a gain of the unit read as one of retrieval."""
    runs = list(runs)
    for key in (*DATA_TAGS, *SCORING_PARAMS):
        values = {str(v) for tags, params in runs
                  if (v := (tags if key in DATA_TAGS else params).get(key)) is not None
                  and not (isinstance(v, float) and math.isnan(v))}
        if len(values) > 1:
            return (f"the runs differ in {key} ({listed(sorted(values), 4)}), so their "
                    f"measures do not compare: sweep each apart")
    return ""


def data_differs(run, other) -> list[str]:
    """What makes two MLflow runs' per-question tables not a pair: the ``DATA_TAGS`` whose
    values differ (a tag neither run has is no difference), then the ``SCORING_PARAMS`` both
    runs hold with different values (``dataset.unit``). The gate and ``confirm`` refuse such a
    pair."""
    tags, params = (run.data.tags, other.data.tags), (run.data.params, other.data.params)
    return [k for k in DATA_TAGS if tags[0].get(k) != tags[1].get(k)] + [
        k for k in SCORING_PARAMS
        if k in params[0] and k in params[1] and str(params[0][k]) != str(params[1][k])]


def runs_frame(experiment: str, parent: str | None = None,
               run_ids: list[str] | None = None) -> pd.DataFrame:
    """Finished runs, each once: of a sweep (``parent``: its children and the runs it reused,
    which may be its own children when two of its jobs share an identity), the given ids (in
    their order), or else the latest finished run of each distinct configuration in the
    experiment. Raises ``NotFound`` for an unknown id, or when there is no such run (naming
    the experiments that hold runs: ``tracking.no_runs``; for a ``parent`` that is one of a
    sweep's runs, naming its sweep: ``tracking.refuse_sweep_child``), and
    ``tracking.SweepParentRun`` for a sweep's parent run among ``run_ids``."""
    # defer heavy import
    import mlflow

    tracking.client()
    if run_ids:
        run_ids = list(dict.fromkeys(run_ids))
        df = mlflow.search_runs(search_all_experiments=True,
                                filter_string="attributes.run_id IN ("
                                + ",".join(f"'{r}'" for r in run_ids) + ")")
        missing = set(run_ids) - set(df.get("run_id", []))
        if missing:
            raise NotFound(f"unknown run id(s): {', '.join(sorted(missing))}")
        df = df.set_index("run_id").loc[run_ids].reset_index()
        role = f"tags.{tracking.ROLE_TAG}"
        for parent_id in df.loc[df[role] == tracking.SWEEP_ROLE, "run_id"] if role in df else []:
            tracking.refuse_sweep_parent(tracking.client().get_run(parent_id))
        return df
    filt = "attributes.status = 'FINISHED' and tags.`ragexp.config_hash` != ''"
    searches = [filt]
    if parent:  # its children, and the finished runs it skipped and linked (sweep.SKIP_LINK)
        searches = [f"{filt} and tags.`mlflow.parentRunId` = '{parent}'",
                    f"{filt} and tags.`ragexp.in_sweep.{parent}` = 'skipped'"]
    ids = tracking.experiment_ids(experiment)
    df = stacked([mlflow.search_runs(experiment_ids=ids, filter_string=f,
                                     order_by=["attributes.start_time DESC"])
                  for f in searches]) if ids else pd.DataFrame()
    if df.empty:  # NotFound: the CLI prints its one line, exit 2
        if parent:  # nothing under one of a sweep's runs: say which sweep it belongs to
            tracking.refuse_sweep_child(parent)
        raise tracking.no_runs(experiment, "finished runs"
                               + (f" under parent run {parent}" if parent else ""))
    df = df.drop_duplicates("run_id" if parent else "tags.ragexp.config_hash")
    return df.sort_values("tags.ragexp.ablation", kind="stable").reset_index(drop=True)


def stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``search_runs`` frames as one, rows in order: of the frames with rows (all of them when
    none has), each with its columns put in one order (the order they first appear) before
    concatenating. MLflow orders a frame's columns as it met the keys, so two searches hold the
    same keys in other orders, and concatenating them as they were gave one block per numeric
    column (163 for a sweep with two skipped jobs; an empty search's frame did it too): pandas
    then warned, on ``ragexp report --html``, that the frame was highly fragmented at the first
    column added to it."""
    kept = [f for f in frames if len(f)] or frames[:1]
    columns = list(dict.fromkeys(c for f in kept for c in f.columns))
    return pd.concat([f[[c for c in columns if c in f.columns]] for f in kept],
                     ignore_index=True)


def differing_params(df: pd.DataFrame) -> list[str]:
    """Config keys that differ between runs, as ``compare``'s columns: those every run has,
    and those only some runs have that a label names (``labels.columns``; otherwise such a key
    belongs to one option of a group, ``embedder.dim`` of ``hash``, and the group's ``name``
    column already shows that choice). Sorted by key: MLflow returns params in no fixed order,
    and a table regenerated by command must come out the same. The rule is the labels'
    (``labels.differing``: no bookkeeping key, no copy such as ``retriever.fusion.k`` beside
    ``fusion.k``)."""
    return [f"params.{k}" for k in labels.columns(_ablations(df), _params(df))]


def kinds_in(df: pd.DataFrame, metric: str) -> list[str]:
    """Question kinds the runs were measured on, read off their ``<metric>.<kind>`` columns (kinds
    come from the data, so no list of them is fixed in code)."""
    prefix = f"metrics.{metric}."
    return sorted({c[len(prefix):] for c in df.columns
                   if c.startswith(prefix) and not c.startswith(f"{prefix}source.")})


def sources_in(df: pd.DataFrame, metric: str) -> list[str]:
    """Question sources the runs logged ``metric`` for one by one (``<metric>.source.<source>``
    columns; a run with questions of one source logs none), ``hand`` first."""
    prefix = f"metrics.{metric}.source."
    return sorted({c[len(prefix):] for c in df.columns if c.startswith(prefix)},
                  key=lambda s: (s != HAND, s))


DECIDED_ON = "ragexp.objective_source"  # the sweep parent's tag: the source its choice used


def deciding_source(df: pd.DataFrame, sweep_tags: Mapping[str, str] | None = None) -> str:
    """The question source whose questions decide for these runs: the one the sweep's choice
    used (``sweep_tags``' ``ragexp.objective_source``), else ``objective_source`` as the runs
    recorded it (a sweep that re-decided runs it skipped to recorded another source than
    theirs), ``hand`` for runs recorded before sources existed."""
    if sweep_tags and sweep_tags.get(DECIDED_ON):
        return sweep_tags[DECIDED_ON]
    col = df.get("params.objective_source")
    return str(col.dropna().iloc[0]) if col is not None and col.notna().any() else HAND


def table(df: pd.DataFrame, per_kind: tuple[str, ...] = ("rr_at_10",)) -> pd.DataFrame:
    """``compare --wide`` (and ``--format csv``): one row per run: name, differing config keys,
    the main metrics over every question, then per question source (``<key>.source.<source>``,
    when the runs' questions have several), per kind, and the refusal rates; columns named as
    the metrics are logged."""
    names = run_labels(df)
    out = pd.DataFrame({"run": df["run_id"].str[:8], "name": df["run_id"].map(names)})
    kept = [labels.measured_keys(p) for p in _params(df).values()]
    for col in differing_params(df):  # as labels print them; blank where a run ignores it
        key = col[len("params."):]
        out[key] = [labels.shown(str(v)) if key in k else "" for v, k in zip(df[col], kept)]
    kinds = kinds_in(df, MAIN[0])
    by_source = [f"{m}.source.{s}" for m in MAIN for s in sources_in(df, m)]
    metric_cols = [*MAIN, *by_source, *(f"{m}.{k}" for m in per_kind for k in kinds), *REFUSAL]
    for m in metric_cols:
        if f"metrics.{m}" in df:
            out[m] = df[f"metrics.{m}"].round(3)
    return out


def objective_of(df: pd.DataFrame) -> str:
    """The objective the runs were chosen by (config key ``objective``, as recorded; ``nDCG@10``
    for runs that recorded none)."""
    col = df.get("params.objective")
    return str(col.dropna().iloc[0]) if col is not None and col.notna().any() else "nDCG@10"


def compact(df: pd.DataFrame, source: str | None = None,
            sweep_tags: Mapping[str, str] | None = None,
            tests: tuple[Mapping[str, list[stats.Paired]], str, str] | None = None
            ) -> pd.DataFrame:
    """``compare``'s default table, for a terminal: one row per run: id, label, the objective
    and one more main measure (RR@10, or nDCG@10 when RR@10 is the objective) of the questions
    of ``source`` (default: the one that decides, ``deciding_source``; ``all``: every source's),
    their headers labelled with that source and the questions counted (``figures``: ``nDCG@10
    (hand, 45 q)``), to three decimals, and, with the tags of the runs' sweep (``sweep_tags``),
    whether each run is the sweep's best or tied with it (``tied``: chosen on the sweep's
    deciding source). ``tests``: ``(baseline_tests``'s
    results, the baseline's run id, the measure tested``)``, shown beside the objective's
    figures, in place of the second measure, as the difference with the baseline and its
    interval (``Δ vs baseline [95% CI]``; ``ΔRR@10 [95% CI]`` for a measure other than the
    objective) and adjusted p. Every other number is a
    logged metric; ``table`` has every column. Raises ``InvalidValue`` for a ``source`` none
    of the runs' several sources is."""
    option = "--source" if source else "objective_source"
    decided = deciding_source(df, sweep_tags)
    source = source or decided
    objective = objective_of(df)
    names = [objective, "nDCG@10" if measure_key(objective) == "rr_at_10" else "RR@10"]
    rows, key = list(df.to_dict("records")), measure_key(objective)
    shown = [figures.figure(_readable_table(row["run_id"]), source, key,
                            [c[len("metrics."):] for c, v in row.items()
                             if c.startswith(f"metrics.{key}.source.") and pd.notna(v)],
                            option) for row in rows]

    def values(name: str) -> list[str]:
        keys = [f"metrics.{fig.key(measure_key(name))}" for fig in shown]
        return [f"{float(row[k]):.3f}" if pd.notna(row.get(k)) else ""
                for row, k in zip(rows, keys)]

    out = pd.DataFrame({"run": df["run_id"].str[:8], "name": df["run_id"].map(run_labels(df))})
    out[f"{names[0]} ({figures.together(shown)})"] = values(names[0])
    if tests is not None:  # beside the figures it is the difference of
        results, baseline, measure = tests
        paired = significance.wide_columns(results, list(df["run_id"]), baseline, [measure])
        same = measure_key(measure) == key  # else the header names the measure tested
        out["Δ vs baseline [95% CI]" if same else f"Δ{measure} [95% CI]"] = paired[
            f"Δ{measure} [95% CI]"]
        out["p_adj"] = ["" if r == baseline else p
                        for r, p in zip(df["run_id"], paired[f"p_adj({measure})"])]
    if sweep_tags and sweep_tags.get("ragexp.best_run"):
        best = sweep_tags["ragexp.best_run"]
        tied = {e["run_id"] for e in json.loads(sweep_tags.get("ragexp.tied_with_best", "[]"))}
        several = len(sources_in(df, key)) > 1  # the tied marks name the questions they rest on
        out[f"tied ({decided})" if several else "tied"] = [
            "best" if r == best else "tied" if r in tied else "" for r in df["run_id"]]
    if tests is None:
        plain = figures.together(f._replace(n=None) for f in shown)
        out[f"{names[1]} ({plain})"] = values(names[1])
    return out


def wide_note(df: pd.DataFrame) -> str:
    """The line under ``table`` (``compare --wide``) when the runs' questions have several
    sources: which columns average which questions, and which source decides; ``""`` with
    one source."""
    have = sources_in(df, MAIN[0])
    if not have:
        return ""
    return (f"{', '.join(MAIN)} and the per-kind columns average every source's questions "
            f"({', '.join(have)}); <measure>.source.<source>: that source's alone; "
            f"objective_source={deciding_source(df)} decides (the default table shows its "
            f"figures)")


def _readable_table(run_id: str) -> pd.DataFrame | None:
    """A run's per-question table (``per_question``), or None where it has none or it cannot be
    read: its figures' sources are then read off its per-source metrics."""
    try:
        return per_question(run_id)
    except (tracking.RunNotFound, readers.InputError):
        return None


def per_question(run_id: str) -> pd.DataFrame:
    """A run's ``per_question.csv``, ids as strings exactly as written (``01`` is not ``1``);
    ``readers.InputError`` names the run's file for a missing, empty or repeated id, and a run
    without the table (a FAILED run, say) raises ``tracking.RunNotFound`` saying why (the CLI:
    one line, exit 2)."""
    path = tracking.artifact_path(run_id, "per_question.csv")  # RunNotFound says why not
    try:
        return readers.read_csv(path, TEXT_COLUMNS)
    except readers.InputError as exc:
        raise readers.InputError(f"per_question.csv of run {run_id}", exc.line,
                                 exc.message) from None


def certificate_of(parent_id: str, df: pd.DataFrame) -> dict | None:
    """The certificate of sweep ``parent_id``'s question sets as ``certificate.json`` holds it
    (``sources.sweep_certificate``): the one it recorded, else computed from its runs ``df``
    (``runs_frame``: their per-question tables, recorded objective and ``objective_source``);
    ``None`` when no source is ranked by two runs."""
    tables = {r: per_question(r) for r in df["run_id"]}
    objective = str(df["params.objective"].iloc[0]) if "params.objective" in df else "nDCG@10"
    return sources.sweep_certificate(parent_id, tables, objective, deciding_source(df),
                                     run_labels(df))


def baseline_tests(df: pd.DataFrame, baseline_id: str,
                   measures: tuple[str, ...] = significance.DEFAULT_MEASURES,
                   method: str = "holm", source: str | None = None
                   ) -> dict[str, list[stats.Paired]]:
    """Every run of ``df`` tested against the baseline, overall and per kind, for each measure;
    p adjusted over all of these tests as one family (``significance.family``). With questions
    from several sources, on those of ``source`` (default: the deciding source,
    ``deciding_source``, as the sweep's own ``vs_baseline`` tests are; ``all``: every
    question)."""
    differ = other_data(df, baseline_id)
    if differ:  # as the gate and confirm refuse them (paired tests on other data said nothing)
        raise significance.NotPaired(
            f"{len(differ)} run(s) were evaluated on other data than baseline "
            f"{baseline_id[:8]} ({'; '.join(differ[:3])}): pair runs of the same corpus, "
            f"questions and dataset.unit")
    source = source or deciding_source(df)
    tables = {r: sources.deciding(per_question(r), source)
              for r in dict.fromkeys([baseline_id, *df["run_id"]])}
    return significance.family(tables, baseline_id, measures, method)


def other_data(df: pd.DataFrame, baseline_id: str) -> list[str]:
    """``"<run id[:8]>: corpus_hash, golden_hash differ"`` for each run of ``df`` whose data
    tags (``DATA_TAGS``, the gate's and confirm's too) or scoring params (``SCORING_PARAMS``)
    differ from the baseline's row; a tag a run lacks (a FAILED run
    has none) is not a difference: its missing table is refused by name later."""
    cols = [f"tags.{t}" for t in DATA_TAGS if f"tags.{t}" in df] + [
        f"params.{k}" for k in SCORING_PARAMS if f"params.{k}" in df]
    base = df[df["run_id"] == baseline_id]
    if not cols or base.empty:
        return []
    ref = base.iloc[0]
    out = []
    for _, row in df.iterrows():
        keys = [c.split(".", 1)[1] for c in cols
                if pd.notna(row[c]) and pd.notna(ref[c]) and row[c] != ref[c]]
        if keys and row["run_id"] != baseline_id:
            out.append(f"{row['run_id'][:8]}: {', '.join(keys)} differ")
    return out


def with_baseline(df: pd.DataFrame, tab: pd.DataFrame, baseline_id: str,
                  measures: tuple[str, ...] = significance.DEFAULT_MEASURES,
                  method: str = "holm", source: str | None = None
                  ) -> tuple[pd.DataFrame, dict[str, list[stats.Paired]]]:
    """``tab`` with the paired-test columns added (``significance.wide_columns``), and the
    tests themselves (on ``source``'s questions: ``baseline_tests``)."""
    results = baseline_tests(df, baseline_id, measures, method, source)
    tab = tab.copy()
    for k, v in significance.wide_columns(results, list(df["run_id"]), baseline_id,
                                          measures).items():
        tab[k] = v
    return tab, results


def render(tab: pd.DataFrame, fmt: str = "markdown", width: int | None = None) -> str:
    """``tab`` as a markdown table (``csv``: as CSV). ``width``: columns padded to line up, and
    the ``name`` column's labels cut short (ending ``…``) so that no line is longer than
    ``width`` characters, as far as labels of ``NAME_MIN`` characters allow (``compare``'s
    default table, for an 80-100 column terminal)."""
    if fmt == "csv":
        return tab.to_csv(index=False)
    cells = [list(map(str, tab.columns))] + [["" if pd.isna(v) else str(v) for v in row]
                                             for row in tab.itertuples(index=False)]
    if width is None:
        header, *rows = ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join([header, "|" + "|".join("---" for _ in tab.columns) + "|", *rows])
    sizes = [max(len(row[i]) for row in cells) for i in range(len(tab.columns))]
    if "name" in tab.columns:
        i = list(tab.columns).index("name")
        room = width - (sum(sizes) - sizes[i] + 3 * len(sizes) + 1)
        sizes[i] = max(min(sizes[i], room), NAME_MIN, len("name"))
        for row in cells[1:]:
            if len(row[i]) > sizes[i]:
                row[i] = row[i][:sizes[i] - 1] + "…"
    lines = ["| " + " | ".join(c.ljust(n) for c, n in zip(row, sizes)) + " |" for row in cells]
    sep = "|" + "|".join("-" * (n + 2) for n in sizes) + "|"
    return "\n".join([lines[0], sep, *lines[1:]])


def cost_lines(tags: dict[str, str], names: dict[str, str]) -> list[str]:
    """What a sweep's parent run records about cost (its ``tags``: ``selection``'s
    ``ragexp.cheapest_tied*``, ``ragexp.pareto`` and the runs left out of both for replaying
    rankings, ``ragexp.cost_left_out``; the best itself, ``ragexp.best_run``, when
    no tied run is measurably cheaper) as lines, runs named by ``names`` (run id
    -> label, else the id's first 8 characters); ``[]`` for a sweep that recorded none. Pure."""
    label = lambda r: names.get(r, r[:8])  # noqa: E731
    lines = []
    chosen = tags.get("ragexp.cheapest_tied")
    if chosen and chosen == tags.get("ragexp.best_run"):
        lines.append(f"cheapest tied with the best: the best itself, {label(chosen)} (no tied "
                     f"run is measurably cheaper)")
    elif chosen:
        costs = json.loads(tags.get("ragexp.cheapest_tied_costs", "{}"))
        detail = "; ".join(f"{c} {v['cheapest']:.4g} vs {v['best']:.4g} for the best"
                           for c, v in costs.items())
        lines.append(f"cheapest tied with the best: {label(chosen)}"
                     + (f" ({detail})" if detail else ""))
    for c, front in json.loads(tags.get("ragexp.pareto", "{}")).items():
        lines.append(f"Pareto front, objective against {c}: {', '.join(map(label, front))}")
    left_out = json.loads(tags.get("ragexp.cost_left_out", "[]"))
    if left_out:
        lines.append(replay.left_out_line({e["run_id"]: e["why"] for e in left_out},
                                          {e["run_id"]: names.get(e["run_id"], e["label"])
                                           for e in left_out}))
    return lines


def run_labels(df) -> dict[str, str]:
    """``{run id: label}`` of runs shown together (a data frame of ``mlflow.search_runs``), by
    the one naming rule (``decide.labels``): the ablation's name, else the settings that tell
    a run of overrides apart from the others, keys only some runs have included (runs of
    overrides are all ablation ``custom``, which names none of them), else the id's first 8
    characters."""
    return labels.labels(_ablations(df), _params(df))


def _ablations(df) -> dict[str, str | None]:
    """``{run id: recorded ablation}`` of a ``search_runs`` frame, None where none is."""
    ablations = df.get("tags.ragexp.ablation", pd.Series([None] * len(df)))
    return {r: None if pd.isna(a) else a for r, a in zip(df["run_id"], ablations)}


def _params(df) -> dict[str, dict[str, str]]:
    """``{run id: {config key: recorded value}}`` of a ``search_runs`` frame's ``params.*``."""
    cols = [c for c in df.columns if c.startswith("params.")]
    return {r: {c[len("params."):]: str(v) for c, v in zip(cols, vals) if not pd.isna(v)}
            for r, vals in zip(df["run_id"], df[cols].itertuples(index=False))}
