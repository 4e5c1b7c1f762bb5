"""Choosing among a sweep's runs: the objective a job returns to its sweeper, each job's paired
comparison with the sweep's baseline, and the runs tied with the best.

- **Objective**: ``cfg.objective`` (an ir_measures name, default ``nDCG@10``) on the run's split
  (``dev`` by default), returned by the Hydra entry point so ``hydra/sweeper=optuna`` can
  drive ragexp. A skipped job (identical config already finished) returns the value recorded
  on that run.
- **Baseline**: the sweep's job whose ``ablation`` equals the config key ``baseline`` (default
  ``default``, i.e. ``+ablation=default`` in the sweep). Every other job is tested against it
  for the objective and ``significance.DEFAULT_MEASURES``, overall and per kind, p adjusted
  over the whole sweep's family (Holm), and each run of this sweep gets metrics
  ``vs_baseline.<measure key>[.<kind>].{delta,ci_low,ci_high,p,p_adj,n_needed}``. A sweep
  without such a job (an Optuna search, say) logs no ``vs_baseline.*`` metrics.
- **Best and tied**: the best run has the highest mean objective; a run is tied with it when it
  is not significantly worse after Holm's correction over the sweep's comparisons with the best
  (``stats.tied_with_best``). The parent run gets tags ``ragexp.best_run``,
  ``ragexp.tied_with_best`` and metric ``best.<key>``; every run of this sweep gets the metric
  ``selection.tied_with_best`` (1 or 0).
- **Cheapest tied**: of the tied runs, the one measurement shows cheaper than the best
  (``cost.cheapest_tied``: a latency only beyond its spread, the index's own when the runs
  differ only in index settings; then ``index.bytes``, then ``answer.cost_usd``), else the
  best itself; tags ``ragexp.cheapest_tied`` and ``ragexp.cheapest_tied_label`` on the parent,
  with the best's and its costs on which it is cheaper (``ragexp.cheapest_tied_costs``), and the Pareto front of the objective against each cost
  (``ragexp.pareto``: ``{cost: [run ids, best first]}``). ``ragexp promote --cheapest-tied``
  promotes that run. A run that cannot rank a new question (``decide.replay``: a TREC run
  replayed, precomputed question vectors) is left out of both, and named with why
  (``ragexp.cost_left_out``).

- **Sources**: when the questions come from several sources (hand-written and generated), the
  objective, the baseline tests and the choice above use the questions of ``objective_source``
  (default ``hand``; ``sources.py``).
- **Certificate**: for every source of the questions, and every pair of sources, how far it
  can be trusted to rank the sweep's runs (``sources.certify``): metrics ``certificate.*`` and
  the artifact ``certificate.json`` on the parent, and its lines printed.

``summarise_sweep`` is called from ``ragexp.run.sweep.SweepCallback.on_multirun_end``, when every
job has finished whatever order they ran in.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Mapping

import pandas as pd

from ragexp.decide import compare, cost, figures, labels, replay, sources
from ragexp.errors import InvalidValue
from ragexp.evaluation import significance, stats
from ragexp.evaluation.measures import measure_key
from ragexp.evaluation.stats import ALL, Paired
from ragexp.index.resources import LATENCY_SAMPLE as INDEX_LATENCY_SAMPLE
from ragexp.tracking import store as tracking

log = logging.getLogger(__name__)


def objective(out: Mapping[str, Any], name: str, source: str = sources.ALL_SOURCES) -> float:
    """The objective of a job's outcome (``app.run_logged``'s dict); for a skipped job, the
    value recorded on the finished run it skipped to. With questions from several sources, the
    mean over ``source``'s (``<key>.source.<source>``; ``all``: every question). Raises
    ``InvalidValue`` when the run has no such metric (e.g. it was logged before that measure
    existed) or no such source."""
    key = measure_key(name)
    metrics: Mapping[str, Any] = out
    if out.get("status") == "SKIPPED":

        metrics = tracking.client().get_run(out["run_id"]).data.metrics
    by_source = sorted(k[len(key) + 8:] for k in metrics if k.startswith(f"{key}.source."))
    if by_source and source != sources.ALL_SOURCES:
        if source not in by_source:
            raise InvalidValue(f"objective_source={source!r}: run {out.get('run_id')} has "
                               f"questions of sources {', '.join(by_source)} (or all)")
        key = f"{key}.source.{source}"
    if key not in metrics:
        raise InvalidValue(f"run {out.get('run_id')} has no metric {key!r} for objective {name!r}")
    return float(metrics[key])


def vs_baseline_metrics(tests: list[Paired]) -> dict[str, float]:
    """``vs_baseline.<key>[.<kind>].<field>`` for adjusted tests. Pure. Infinite ``n_needed``
    (no difference) is logged as -1, since MLflow cannot chart infinity; an undefined one (NaN:
    a group of one question) is not logged."""
    out = {}
    for t in tests:
        prefix = f"vs_baseline.{measure_key(t.measure)}" + ("" if t.kind == ALL else f".{t.kind}")
        out.update({f"{prefix}.delta": t.mean_diff, f"{prefix}.ci_low": t.ci_low,
                    f"{prefix}.ci_high": t.ci_high, f"{prefix}.p": t.p,
                    f"{prefix}.p_adj": t.p_adj})
        if not math.isnan(t.n_needed):
            out[f"{prefix}.n_needed"] = -1.0 if math.isinf(t.n_needed) else t.n_needed
    return out


def aligned_scores(tables: Mapping[str, pd.DataFrame], measure: str
                   ) -> tuple[dict[str, pd.Series], list[str]]:
    """Per-question scores of ``measure`` for the runs scored on the same questions as the first
    run, in one order; and the runs left out because their questions differ. Pure."""
    col = significance.column(measure)
    series = {r: t.dropna(subset=[col]).set_index("id")[col].astype(float)
              for r, t in tables.items()}
    first = next(iter(series.values()))
    ids = sorted(first.index)
    kept = {r: s.loc[ids] for r, s in series.items() if set(s.index) == set(ids)}
    return kept, [r for r in series if r not in kept]


def summarise_sweep(parent_id: str, statuses: list[dict], baseline: str, objective_name: str,
                    method: str = "holm", objective_source: str = sources.ALL_SOURCES
                    ) -> list[str]:
    """Log the sweep's comparisons (module docstring), on ``objective_source``'s questions;
    return lines for the console. Each of this sweep's runs gets its ``vs_baseline.*`` and
    ``selection.tied_with_best`` in one ``log_batch``."""
    c = tracking.client()
    done = [s for s in statuses if s.get("status") in ("FINISHED", "SKIPPED") and s.get("run_id")]
    runs = {s["run_id"]: c.get_run(s["run_id"]) for s in done}
    if not runs:
        return []
    own = [r for r, run in runs.items() if run.data.tags.get("mlflow.parentRunId") == parent_id]
    if apart := compare.not_comparable([(r.data.tags, r.data.params) for r in runs.values()]):
        return [f"no best run, baseline comparison or tie: {apart}"]
    every = {r: compare.per_question(r) for r in runs}
    tables = {r: sources.deciding(t, objective_source) for r, t in every.items()}
    tracking.log_batch(parent_id, tags={compare.DECIDED_ON: objective_source})
    name = {r: run.data.tags.get("ragexp.ablation", labels.CUSTOM) for r, run in runs.items()}
    label = labels.of_runs(runs)
    measures = tuple(dict.fromkeys([objective_name, *significance.DEFAULT_MEASURES]))
    per_run: dict[str, dict[str, float]] = {r: {} for r in own}
    lines = [_log_vs_baseline(tables, own, name, label, baseline, measures, method, per_run)]
    metrics = {r: dict(run.data.metrics) for r, run in runs.items()}
    params = {r: dict(run.data.params) for r, run in runs.items()}
    timed = {r: _timed(params[r], len(every[r])) for r in runs}
    lines += _log_best(parent_id, tables, own, label, objective_name, method, metrics, per_run,
                       params, timed)
    for r, logged in per_run.items():
        if logged:
            tracking.log_batch(r, metrics=logged)
    return lines + _log_certificate(parent_id, every, label, objective_name, method,
                                    objective_source)


def _log_certificate(parent_id: str, tables: dict[str, pd.DataFrame], label: dict[str, str],
                     objective_name: str, method: str, objective_source: str) -> list[str]:
    """The certificate of the sweep's question sets (``sources.certify``, coverage from the
    first run's recorded dataset), logged on the parent (``certificate.*`` metrics and
    ``certificate.json``); return its console lines (none when no source is ranked by two
    runs). A failure is logged, tagged ``ragexp.certificate_error`` on the parent and said in
    one line: the sweep's choice, logged before, and its lines stand."""
    try:
        cert = sources.certify(tables, objective_name, objective_source, method,
                               corpus=sources.corpus_of(next(iter(tables))))
        if cert is None:
            return []
        doc = sources.to_json(cert, label)
        tracking.log_batch(parent_id, metrics=sources.metrics(cert))
        tracking.client().log_dict(parent_id, doc, sources.ARTIFACT)
    except Exception as exc:  # noqa: BLE001 - the certificate never hides the choice
        log.exception("the question sets' certificate failed")
        why = tracking.error_summary(exc)
        tracking.log_batch(parent_id, tags={"ragexp.certificate_error": why[:5000]})
        return [f"no certificate of the question sets: {why}"]
    return doc["lines"]


def _log_vs_baseline(tables: dict[str, pd.DataFrame], own: list[str], name: dict[str, str],
                     label: dict[str, str], baseline: str, measures: tuple[str, ...],
                     method: str, per_run: dict[str, dict[str, float]]) -> str:
    """Test every run (``tables``: run id -> per-question table) against the job whose
    ablation is ``baseline`` (``significance.family``, ``method`` over the whole family) and
    add ``vs_baseline.*`` to the metrics ``per_run`` logs on this sweep's ``own`` runs; return
    the console line saying so, or why there are none (no such job, or runs not scored on the
    same questions)."""
    base = [r for r in tables if name[r] == baseline]
    if not base:
        return (f"no job with ablation {baseline!r} (config key baseline): no vs_baseline "
                f"metrics")
    try:
        results = significance.family(tables, base[0], measures, method)
    except significance.NotPaired as exc:
        return f"no vs_baseline metrics: {exc}"
    for r, tests in results.items():
        if r in own:
            per_run[r].update(vs_baseline_metrics(tests))
    return f"vs_baseline metrics logged against {label[base[0]]} ({base[0][:8]})"


def _log_best(parent_id: str, tables: dict[str, pd.DataFrame], own: list[str],
              label: dict[str, str], objective_name: str, method: str,
              metrics: Mapping[str, Mapping[str, float]],
              per_run: dict[str, dict[str, float]], params: Mapping[str, Mapping[str, str]],
              timed: Mapping[str, dict[str, int]]) -> list[str]:
    """Choose the best run by mean ``objective_name`` and the runs tied with it
    (``stats.tied_with_best``, ``method`` over the comparisons with the best); log them on the
    parent (``best.<key>``, ``ragexp.best_run``, ``ragexp.tied_with_best``, ...) and add
    ``selection.tied_with_best`` (1 or 0) to what ``per_run`` logs on this sweep's ``own``
    runs, and the cheapest tied
    run and the Pareto fronts from the runs' ``metrics`` and ``params`` (``_log_cheapest``;
    ``timed``: questions timed per run and latency); return console lines, the best's figure
    labelled with the source and count of the questions it averages (``figures``: ``best by
    nDCG@10 (hand, 45 q)``; ``tables`` hold the deciding rows only)."""
    scores, left_out = aligned_scores(tables, objective_name)
    tied = stats.tied_with_best(scores, objective_name, method, intervals=False)
    key = measure_key(objective_name)
    best_value = float(scores[tied.best].mean())
    tracking.log_batch(parent_id, metrics={f"best.{key}": best_value,
                                           "selection.tied_with_best.count": len(tied.tied)},
                       tags={"ragexp.best_run": tied.best,
                             "ragexp.best_label": label[tied.best],
                             "ragexp.tied_with_best": json.dumps(
                                 [{"run_id": r, "label": label[r]} for r in tied.tied]),
                             "ragexp.selection_rule": f"{objective_name} on the run's split; "
                             f"tied = not significantly worse than the best, "
                             f"{stats.CORRECTION_NAMES[method]} over {len(scores) - 1} tests"})
    for r in own:
        if r in scores:
            per_run[r]["selection.tied_with_best"] = float(r in tied.tied)
    shown = figures.figure(tables[tied.best], "all", significance.column(objective_name))
    lines = [f"best by {shown.label(objective_name)}: {label[tied.best]}"
             + (f" ({tied.best[:8]})" if label[tied.best] != tied.best[:8] else "") + " "
             + f"{best_value:.3f}; tied with it ({stats.CORRECTION_NAMES[method]}, alpha "
             f"{stats.ALPHA}): {', '.join(label[r] for r in tied.tied)}"]
    if left_out:
        lines.append(f"left out of the choice (scored on other questions): "
                     f"{', '.join(label[r] for r in left_out)}")
    quality = {r: float(s.mean()) for r, s in scores.items()}
    return lines + _log_cheapest(parent_id, tied, quality, metrics, label, params, timed)


def _timed(params: Mapping[str, str], questions: int) -> dict[str, int]:
    """Questions a run timed alone, per latency: the whole path its first ``latency_sample``
    (default ``pipeline.LATENCY_SAMPLE``, 100), the index ``resources.LATENCY_SAMPLE`` (200),
    each at most the run's ``questions``."""
    return {"time.query_p95_ms": min(int(params.get("latency_sample", 100)), questions),
            "index.search_p95_ms": min(INDEX_LATENCY_SAMPLE, questions)}


def _log_cheapest(parent_id: str, tied: stats.Tied, quality: dict[str, float],
                  metrics: Mapping[str, Mapping[str, float]], label: dict[str, str],
                  params: Mapping[str, Mapping[str, str]],
                  timed: Mapping[str, dict[str, int]]) -> list[str]:
    """Log the cheapest of the ``tied`` runs that can serve (``servable_choice``) and the
    Pareto front of ``quality`` (the mean objective of each run that can serve) against each
    cost on the parent, and the runs left out of both for replaying rankings or vectors
    (``ragexp.cost_left_out``: ``[{run_id, label, why}]``); return the console lines (none when
    no cost is known for every tied run that can serve)."""
    found, reference, left_out = servable_choice(list(tied.tied), tied.best, quality, metrics,
                                                 params)
    fronts = cost.fronts({r: q for r, q in quality.items() if r not in left_out}, metrics)
    tags = {"ragexp.pareto": json.dumps(fronts), "ragexp.cost_left_out": json.dumps(
        [{"run_id": r, "label": label[r], "why": why} for r, why in left_out.items()])}
    lines = []
    if found is not None:
        cheap = found.run
        tags.update({"ragexp.cheapest_tied": cheap, "ragexp.cheapest_tied_label": label[cheap],
                     "ragexp.cheapest_tied_costs": json.dumps(
                         {c: {"cheapest": metrics[cheap][c], "best": metrics[reference][c]}
                          for c in found.cheaper})})
        lines.append(cheapest_line(found, reference, metrics, label, timed))
        if reference != tied.best:
            lines[-1] += (f"; the best, {label[tied.best]}, cannot serve: compared with "
                          f"{label[reference]}, the best tied run that can")
    elif reference is None and left_out:
        lines.append("cheapest tied with the best: none: every tied run replays rankings or "
                     "vectors made for the evaluation's questions, so none can serve")
    if left_out:
        lines.append(replay.left_out_line(left_out, label))
    tracking.log_batch(parent_id, tags=tags)
    return lines


def servable_choice(tied: list[str], best: str, quality: Mapping[str, float],
                    metrics: Mapping[str, Mapping[str, float]],
                    params: Mapping[str, Mapping[str, str]]
                    ) -> tuple[cost.Cheapest | None, str | None, dict[str, str]]:
    """``(cheapest, reference, left out)``: ``cost.cheapest_tied`` among the ``tied`` runs that
    can rank a new question (``replay.replays`` of their ``params``), against ``best`` or, when
    the best replays, the tied run of highest ``quality`` that can (``reference``; None when
    none can, and then no cheapest); ``left out``: ``{run id: why}`` of every run of
    ``quality`` that replays. A TREC run's latency is a file lookup: a sweep named one "714.3x
    less" time than the best, tied at nDCG@10 0.500 against 1.000 on 4 questions. Pure."""
    left_out = {r: why for r in dict.fromkeys([*tied, *quality])
                if (why := replay.replays(params.get(r, {})))}
    can = [r for r in tied if r not in left_out]
    if not can:
        return None, None, left_out
    reference = best if best in can else max(can, key=lambda r: quality.get(r, -math.inf))
    return cost.cheapest_tied(can, reference, metrics, params), reference, left_out


def cheapest_line(found: cost.Cheapest, best: str, metrics: Mapping[str, Mapping[str, float]],
                  label: Mapping[str, str], timed: Mapping[str, dict[str, int]]) -> str:
    """The console line for ``found``: what it is cheaper on, or ``the best itself`` when no
    tied run is measurably cheaper; with the rule the latency was compared by and how many
    questions were timed."""
    lat = found.latency
    noise = ""
    if lat is not None:
        n = sorted({timed[r][lat] for r in (found.run, best)})
        noise = (f"{lat} counts as lower only below the other run's median, "
                 f"{' and '.join(map(str, n))} questions timed")
    if not found.cheaper:
        return (f"cheapest tied with the best: the best itself, {label[best]} (no tied run is "
                f"measurably cheaper" + (f"; {noise})" if noise else ")"))
    detail = "; ".join(cost_phrase(c, metrics[found.run][c], metrics[best][c])
                       for c in found.cheaper)
    return f"cheapest tied with the best: {label[found.run]} ({detail}" \
        + (f"; {noise}" if lat in found.cheaper else "") + ")"


def cost_phrase(key: str, cheap: float, best: float) -> str:
    """``"time.query_p95_ms 1.2 vs 11 for the best: 9.2x less"`` (``x less`` only when both
    are positive and the cheap one is lower)."""
    ratio = f": {best / cheap:.1f}x less" if 0 < cheap < best else ""
    return f"{key} {cheap:.4g} vs {best:.4g} for the best{ratio}"
