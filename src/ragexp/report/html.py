"""``ragexp report --html OUT``: one standalone HTML page for a sweep (inline CSS and SVG; no
scripts, fonts or anything fetched), also logged as ``report.html`` on the sweep's parent run.

Sections: headline measures of every run with deltas against the same configuration in the
previous sweep and against the champion (green better, red worse, by each measure's direction;
grey: no change at the precision shown, or measured on other questions); a chart of which
configuration wins on which question kind (also ``--chart SVG``: the README's hero image);
per-kind tables with the paired tests against the sweep's baseline, Holm-adjusted over the
page's whole family; the rerank depth curve when the sweep varies ``reranker.top_n``; the runs'
abstain curves overlaid; and every failed question of every run
with its reason (``question_failures``). The numbers are computed in ``report_facts``; what is
read from MLflow, in ``sweep_data``. Every number cell carries ``data-k`` (what it is) and
``data-v`` (the unrounded value), so tools and tests can read the page back.
"""

from __future__ import annotations

import html
import math
import tempfile
import time
from pathlib import Path

import pandas as pd

from ragexp.data import files
from ragexp.decide import compare, figures, sources
from ragexp.errors import InvalidValue, counted
from ragexp.evaluation import measures as measures_mod
from ragexp.evaluation import question_failures, significance, stats
from ragexp.evaluation.stats import ALL
from ragexp.report import charts as report_charts
from ragexp.report import facts as report_facts
from ragexp.report import sweep_data
from ragexp.report.facts import Delta
from ragexp.report.sweep_data import SweepData
from ragexp.tracking import store as tracking

ARTIFACT = tracking.SWEEP_REPORT
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;
margin:24px auto;max-width:1280px;padding:0 16px;color:#1f2328}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:18px 0 6px}.meta{color:#59636e}
.note{color:#59636e;font-size:12px;max-width:1000px}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f6f8fa}td.l,th.l{text-align:left}
.good{color:#1a7f37;background:#dafbe1}.bad{color:#cf222e;background:#ffebe9}
.same{color:#59636e}.na{color:#8c959f}
.d{display:block;font-size:11px;padding:0 3px;border-radius:3px;white-space:nowrap}
.sig{font-weight:700}.best{background:#fff8c5}details{margin:4px 0}summary{cursor:pointer}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #d0d7de;border-radius:6px;
padding:8px 12px;min-width:150px}.card .v{font-size:22px;font-weight:600}
svg{max-width:100%;height:auto}
"""


def esc(v) -> str:
    """Text made safe for HTML content and attribute values."""
    return html.escape(str(v), quote=True)


def fmt(v: float, signed: bool = False) -> str:
    """``report_facts.SHOWN_DECIMALS`` (three) decimals, with a sign when ``signed``; a dash
    for a missing value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    d = report_facts.SHOWN_DECIMALS
    return f"{v:+.{d}f}" if signed else f"{v:.{d}f}"


def num(key: str, v: float, cls: str = "", text: str | None = None) -> str:
    """A table cell showing ``text`` (default: ``v`` to three decimals) that carries ``data-k``
    and the unrounded ``data-v``."""
    c = f' class="{cls}"' if cls else ""
    return f'<td{c} data-k="{esc(key)}" data-v="{esc(repr(float(v)))}">{esc(text or fmt(v))}</td>'


def delta_span(key: str, d: Delta | None, what: str) -> str:
    """A small coloured line under a value: the difference, or why there is none."""
    if d is None:
        return f'<span class="d na" data-k="{esc(key)}">{esc(what)}: –</span>'
    cls = ("na" if not d.comparable or math.isnan(d.diff) else
           "same" if d.better is None else "good" if d.better else "bad")
    label = "0.000" if d.better is None and not math.isnan(d.diff) else fmt(d.diff, True)
    extra = "" if d.comparable else " (other questions)"
    return (f'<span class="d {cls}" data-k="{esc(key)}" data-v="{esc(repr(d.diff))}" '
            f'title="{esc(what)}: {fmt(d.reference)}">{esc(what)} {esc(label)}{extra}</span>')


def _metric(row, key: str) -> float:
    v = row.get(f"metrics.{key}")
    return math.nan if v is None or pd.isna(v) else float(v)


def deciding_key(data: SweepData, key: str) -> str:
    """The metric the page shows for ``key``: with questions of several sources and a deciding
    one (``objective_source``), that source's (``<key>.source.<source>``) where the runs logged
    it, the questions the best run was chosen on; else ``key``, over every question. The
    headline showed every question's values under a best chosen on the hand questions' (0.816
    for the best beside 0.867 for another run)."""
    source = compare.deciding_source(data.runs, data.parent_tags)
    every = next(iter((data.every_table or data.tables).values()))
    own = f"{key}.source.{source}"
    if (source != sources.ALL_SOURCES and len(sources.sources_of(every)) > 1
            and f"metrics.{own}" in data.runs):
        return own
    return key


def source_tag(data: SweepData, key: str, shown_key: str) -> str:
    """Whose questions the page's figures of measure ``key`` average, and how many: ``hand, 45
    q`` (``figures.together`` of each run's ``figures.figure``): the deciding source's when the
    page shows its metric (``shown_key``, ``deciding_key``), else every question's (``all``, or
    the only source); ``""`` for a key that is no per-question measure (refusal and answer
    figures)."""
    every = data.every_table or data.tables
    if key not in next(iter(every.values())):
        return ""
    source = (compare.deciding_source(data.runs, data.parent_tags) if shown_key != key
              else sources.ALL_SOURCES)
    return figures.together(figures.figure(every[r], source, key) for r in data.runs["run_id"])


def headline_section(data: SweepData, heads, order: list[str]) -> list[str]:
    runs = data.runs.set_index("run_id")
    prev = data.previous.set_index("run_id") if data.previous is not None else None
    champ = data.champion.iloc[0] if data.champion is not None and len(data.champion) else None
    shown_keys = {key: deciding_key(data, key) for key, _, _ in heads}
    tags = {key: source_tag(data, key, shown_keys[key]) for key, _, _ in heads}
    heads = [(key, f"{label} ({tags[key]})" if tags[key] else label, higher)
             for key, label, higher in heads]
    out = ["<h2>Headline measures</h2>",
           '<p class="note">Each value with its difference against the same configuration in '
           "the previous sweep (prev) and against the champion (champ): green is better, red "
           "worse, by the measure's direction (fewer answerable questions refused is better); "
           "grey: equal at three decimals, or measured on other questions (other data or "
           "split). Retrieval measures are over the answerable questions of the run's split"
           + (f", of source {esc(compare.deciding_source(data.runs, data.parent_tags))} "
              f"(objective_source: the "
              f"questions the best is chosen on; refusal and answer figures are over every "
              f"source's)" if any(k != shown for k, shown in shown_keys.items()) else "")
           + ".</p>"]
    best = order[0]
    cards = []
    rows = []
    for run_id in order:
        row = runs.loc[run_id]
        prev_row = (prev.loc[data.previous_match[run_id]]
                    if prev is not None and run_id in data.previous_match else None)
        cells = [f'<td class="l">{esc(row["label"])}</td>']
        for key, label, higher in heads:
            shown_key = shown_keys[key]
            v = _metric(row, shown_key)
            dp = dc = None
            if prev_row is not None:
                dp = report_facts.delta(v, _metric(prev_row, shown_key), higher,
                                        report_facts.same_questions(row, prev_row))
            if champ is not None:
                dc = report_facts.delta(v, _metric(champ, shown_key), higher,
                                        report_facts.same_questions(row, champ))
            spans = ((delta_span(f"dprev|{run_id}|{key}", dp, "prev") if prev is not None
                      else "")
                     + (delta_span(f"dchamp|{run_id}|{key}", dc, "champ") if champ is not None
                        else ""))
            cells.append(f'<td data-k="head|{esc(run_id)}|{esc(shown_key)}" '
                         f'data-v="{esc(repr(v))}">{esc(fmt(v))}{spans}</td>')
            if run_id == best:
                cards.append(f'<div class="card"><div>{esc(label)}</div><div class="v">'
                             f"{esc(fmt(v))}</div>{spans}</div>")
        rows.append(f'<tr{" class=best" if run_id == best else ""}>{"".join(cells)}</tr>')
    objective = measures_mod.parse(data.objective).key
    by = (f"{data.objective} ({tags[objective]})" if tags.get(objective) else data.objective)
    out += [f"<h3>Best by {esc(by)}: {esc(runs.loc[best, 'label'])}</h3>",
            f'<div class="cards">{"".join(cards)}</div>', "<h3>Every run</h3>",
            "<table><tr><th class=l>run</th>"
            + "".join(f"<th>{esc(label)}</th>" for _, label, _ in heads) + "</tr>",
            *rows, "</table>"]
    return out


def wins_section(wins, labels, chart_svg: str, first: str | None = None) -> list[str]:
    groups = list(wins.values.columns)
    rows = []
    for run in report_charts.order(wins, first):
        cells = [f'<td class="l">{esc(labels[run])}</td>']
        for g in groups:
            won, worse = run in wins.starred(g), run not in wins.tied[g]
            mark = f" {report_charts.WIN}" if won else f" {report_charts.WORSE}" if worse else ""
            cells.append(num(f"wins|{run}|{g}", wins.values.loc[run, g],
                             "sig" if won else "", fmt(wins.values.loc[run, g]) + mark))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    left = (f'<p class="note">Left out (scored on other questions): '
            f'{esc(", ".join(labels[r] for r in wins.left_out))}</p>' if wins.left_out else "")
    return [f"<h2>Which configuration wins on which kind ({esc(wins.measure)})</h2>", chart_svg,
            "<details><summary>The chart's numbers</summary><table><tr><th class=l>run</th>"
            + "".join(f"<th>{esc(g)} (n={wins.n[g]})</th>" for g in groups) + "</tr>",
            *rows, "</table></details>", left]


def kind_section(data: SweepData, tests, reference: str, ref_label: str,
                 test_measures: list[str], labels, order: list[str],
                 method: str = "holm") -> list[str]:
    kinds = sorted({k for (_, _, k) in tests if k != ALL})
    family = (f"the {len(tests)} tests of these tables (runs x measures x (all questions + "
              f"each kind))")
    out = [f"<h2>Per question kind, against {esc(ref_label)}</h2>",
           f'<p class="note">Mean per kind over the answerable questions, and the paired '
           f"difference against {esc(ref_label)} with its 95% BCa interval, raw p (two-sided "
           f"paired randomisation test) and p_adj; bold: p_adj &lt; {stats.ALPHA}. "
           f"{esc(stats.correction_note(method, family))}</p>"]
    groups = [ALL, *kinds]
    # with several sources, the tables are of the deciding one's questions (sweep_data)
    decided = compare.deciding_source(data.runs, data.parent_tags)
    several = len(sources.sources_of(next(iter((data.every_table or data.tables).values())))) > 1
    whose = (f"All questions of source {decided}" if several and decided != sources.ALL_SOURCES
             else "All questions")
    means = {(run, m): report_facts.group_means(data.tables[run], significance.column(m), groups)
             for run in order for m in test_measures}
    for g in groups:
        head = "".join(f"<th>{esc(m)}</th><th>Δ [95% CI]</th><th>p</th><th>p_adj</th>"
                       for m in test_measures)
        rows = []
        for run in order:
            cells = [f'<td class="l">{esc(labels[run])}</td>']
            for m in test_measures:
                cells.append(num(f"mean|{run}|{m}|{g}", means[(run, m)][g]))
                t = tests.get((run, m, g))
                if t is None:
                    cells.append('<td colspan="3" class="l na">reference</td>'
                                 if run == reference else '<td colspan="3" class="na">–</td>')
                    continue
                sig = t.p_adj < stats.ALPHA
                d = report_facts.delta(t.mean_diff, 0.0, True)  # measures: higher is better
                cls = "same" if d.better is None else "good" if d.better else "bad"
                cells.append(num(f"diff|{run}|{m}|{g}", t.mean_diff, cls + (" sig" if sig else ""),
                                 significance.format_delta(t)))
                cells.append(num(f"p|{run}|{m}|{g}", t.p, "", significance.format_p(t.p)))
                cells.append(num(f"padj|{run}|{m}|{g}", t.p_adj, "sig" if sig else "",
                                 significance.format_p(t.p_adj) + ("*" if sig else "")))
            rows.append("<tr>" + "".join(cells) + "</tr>")
        n = next((t.n for (r, m, k), t in tests.items() if k == g), "")
        out += [f"<h3>{esc(whose) if g == ALL else esc(g)} (n={n})</h3>",
                f"<table><tr><th class=l>run</th>{head}</tr>", *rows, "</table>"]
    return out


def depth_section(data: SweepData) -> list[str]:
    """The rerank depth curve and its table, when the sweep varies ``reranker.top_n`` (else
    nothing)."""
    curve = report_facts.depth_curve(data.runs, data.objective)
    if curve.empty:
        return []
    names = {"ceiling_r": "R@top_n", "ceiling_success": "Success@top_n",
             "first_stage": f"{data.objective} first stage",
             "reranked": f"{data.objective} reranked", "oracle": f"{data.objective} oracle",
             "share": "realised share"}
    rows = [f'<tr><td class="l">{esc(r.group)}</td><td>{r.top_n}</td>'
            + "".join(num(f"depth|{r.run_id}|{c}", getattr(r, c)) for c in names) + "</tr>"
            for r in curve.itertuples()]
    return ["<h2>Rerank depth</h2>",
            '<p class="note">The first stage\'s ceiling at the rerank depth (R@top_n and '
            "Success@top_n before reranking), the objective before and after reranking, the "
            "oracle (the first stage's top_n in the best order the judgements allow) and the "
            "share of the oracle the reranker realises, for each reranker.top_n the sweep "
            "ran.</p>", report_charts.depth_svg(curve, data.objective),
            "<table><tr><th class=l>configuration</th><th>top_n</th>"
            + "".join(f"<th>{esc(n)}</th>" for n in names.values()) + "</tr>", *rows,
            "</table>"]


def abstain_section(data: SweepData, labels) -> list[str]:
    curves = {r: c for r, c in data.curves.items() if c}
    out = ["<h2>Abstain curves</h2>"]
    if not curves:
        return out + ['<p class="note">No run logged an abstain curve (the golden set needs '
                      "answerable and unanswerable questions).</p>"]
    missing = [labels[r] for r, c in data.curves.items() if not c]
    return out + ['<p class="note">For every threshold, the share of unanswerable questions '
                  "refused against the share of answerable ones wrongly refused; dots: each "
                  "run's operating point (the most unanswerable refused within the budget, "
                  "dotted).</p>", report_charts.abstain_svg(curves, labels)] + (
        [f'<p class="note">No curve: {esc(", ".join(missing))}</p>'] if missing else [])


def failures_section(data: SweepData, labels, order: list[str]) -> list[str]:
    col = significance.column(data.objective)
    reasons = question_failures.REASONS
    summary, details = [], []
    runs = data.runs.set_index("run_id")
    for i, run in enumerate(order):
        row = runs.loc[run]
        shown = int(float(row.get("params.answer.n_chunks", 3)))
        unit = str(row.get("params.dataset.unit", "chunk"))
        fails = question_failures.failed_questions(data.tables[run], col, shown,
                                                   "chunk" if unit == "nan" else unit)
        counts = question_failures.counts(fails)
        summary.append(f'<tr><td class="l">{esc(labels[run])}</td>'
                       + "".join(num(f"nfail|{run}|{r}", counts[r], "", str(counts[r]))
                                 for r in reasons)
                       + num(f"nfail|{run}|total", len(fails), "", str(len(fails))) + "</tr>")
        rows = "".join(
            f'<tr data-k="fail|{esc(run)}|{esc(f.id)}"><td class="l">{esc(f.id)}</td>'
            f'<td class="l">{esc(f.kind)}</td><td class="l">{esc(f.question)}</td>'
            f'<td class="l" data-k="reason|{esc(run)}|{esc(f.id)}">{esc(f.reason)}</td>'
            f'<td class="l">{esc(f.detail)}</td></tr>' for f in fails.itertuples())
        note = fails.attrs.get("note")
        details.append(f"<details{' open' if i == 0 else ''}><summary>{esc(labels[run])}: "
                       f"{len(fails)} failed</summary>"
                       + (f'<p class="note">{esc(note)}</p>' if note else "")
                       + "<table><tr><th class=l>id</th><th class=l>kind</th><th class=l>"
                       "question</th><th class=l>why</th><th class=l>detail</th></tr>"
                       + rows + "</table></details>")
    return ["<h2>Failed questions</h2>",
            '<p class="note">A question fails when an answerable one is refused or answered '
            "citing no chunk that holds its evidence, or an unanswerable one is answered. Its "
            "reason is the earliest stage that explains it: retrieval miss (no relevant item "
            "among the passages the answerer was shown), refused (evidence shown, answer "
            "refused: low confidence or every sentence dropped by the citation checker), "
            "unsupported citation (evidence shown, answer cites other chunks), answered "
            "unanswerable.</p>",
            "<table><tr><th class=l>run</th>" + "".join(f"<th>{esc(r)}</th>" for r in reasons)
            + "<th>total</th></tr>", *summary, "</table>", *details]


def certificate_section(data: SweepData, labels, method: str) -> list[str]:
    """The certificate of the sweep's question sets (``decide.sources``): one row per source
    (size, kinds, coverage, split-half tau, pairs told apart, tied with the best, verdict),
    then each pair's and each flag's line; the one the sweep recorded, else computed from its
    runs (no coverage); nothing when no source is ranked by two runs."""
    doc = sources.recorded(data.parent_id)
    if doc is None:
        cert = sources.certify(data.every_table or data.tables, data.objective,
                               compare.deciding_source(data.runs, data.parent_tags), method)
        if cert is None:
            return []
        doc = sources.to_json(cert, labels)
    obj = doc["objective"]
    rows = []
    for name, s in doc["sources"].items():
        r = s["measures"][obj]
        cover = s["coverage"] or {}
        shares = ", ".join(f"{cover[k]} of {cover[k + '_total']} {what}"
                           for k, what in (("docs", "documents"), ("sections", "sections"))
                           if cover.get(k) is not None and cover.get(k + "_total"))
        half = r["split_half"]
        size = str(r["scored"]) + (f' of {s["questions"]}' if r["scored"] != s["questions"]
                                   else "")
        cells = [f'<td class="l">{esc(name)}</td>',
                 num(f"cert|{name}|questions", r["scored"], text=size),
                 f'<td class="l">{esc(", ".join(f"{k} {v}" for k, v in s["kinds"].items()))}'
                 f"</td>",
                 f'<td class="l">{esc(shares or cover.get("note") or "–")}</td>',
                 (num(f"cert|{name}|split_half", half["median"],
                      text=f'{half["median"]:.2f} [{half["p05"]:.2f}, {half["p95"]:.2f}]')
                  if half["p05"] is not None else '<td class="na">–</td>'),
                 (num(f"cert|{name}|power", r["power"],
                      text=f'{r["told_apart"]} of {r["pairs"]}')
                  if r["power"] is not None else '<td class="na">–</td>'),
                 f'<td>{len(r["tied"])} of {len(s["runs"])}</td>',
                 f'<td class="l" data-k="cert|{esc(name)}|verdict">{esc(s["verdict"])} '
                 f'({esc(s["why"])})</td>']
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rest = doc["lines"][1 + len(doc["sources"]):]
    return ["<h2>Question sets: the certificate</h2>",
            f'<p class="note">{esc(doc["lines"][0].rstrip(":"))}; questions: those scored '
            f"on {esc(obj)} (of all the source's). Verdicts: decides (the split halves "
            f"agree, and the best is told apart from at least half the others), ties (they "
            f"agree, but the best cannot be told from most), not enough signal (fewer than "
            f'{doc["settings"]["min_questions"]} questions, split-half tau below '
            f'{doc["settings"]["split_half_floor"]}, or no pair told apart).</p>',
            "<table><tr><th class=l>source</th><th>questions</th><th class=l>kinds</th>"
            "<th class=l>coverage</th><th>split-half tau</th><th>pairs told apart</th>"
            "<th>tied with the best</th><th class=l>verdict</th></tr>", *rows, "</table>",
            *[f'<p class="{"note" if line.startswith("warning") else "meta"}">{esc(line)}</p>'
              for line in rest]]


def cost_section(data: SweepData, labels) -> list[str]:
    """The cheapest run tied with the best and the Pareto fronts of the objective against each
    cost, as the sweep's parent recorded them (``decide.compare.cost_lines``); nothing when it
    recorded none."""
    lines = compare.cost_lines(data.parent_tags, labels)
    if not lines:
        return []
    return ["<h2>The cheapest configuration tied with the best</h2>", "<ul>",
            *[f"<li>{esc(line)}</li>" for line in lines], "</ul>"]


def failed_jobs_section(data: SweepData) -> list[str]:
    """The sweep's jobs that did not finish (``sweep_data.failed_jobs``): overrides, status and
    error of each; nothing when every job finished or was skipped."""
    if not data.failed_jobs and not data.never_ran:
        return []
    missing = ([f'<p class="note">{data.never_ran} of the sweep\'s '
                f'{data.parent_tags.get("ragexp.n_jobs")} jobs never ran (the sweep stopped '
                "before them): this sweep is incomplete.</p>"] if data.never_ran else [])
    if not data.failed_jobs:
        return ["<h2>Failed jobs</h2>", *missing]
    rows = "".join(
        f'<tr data-k="failedjob|{i}"><td class="l">{esc(j.overrides or "(no overrides)")}</td>'
        f'<td class="l">{esc(j.status)}</td><td class="l">{esc(j.error or "–")}</td>'
        f'<td class="l">{esc(j.run_id[:8] if j.run_id else "no run")}</td></tr>'
        for i, j in enumerate(data.failed_jobs))
    n = len(data.failed_jobs)
    jobs = "1 job of this sweep did not finish and is" if n == 1 else (
        f"{n} jobs of this sweep did not finish and are")
    return ["<h2>Failed jobs</h2>", *missing,
            f'<p class="note">{jobs} not on this page; the error is the run\'s '
            "<code>ragexp.error</code> tag (its traceback: the run's <code>error.txt</code>)."
            "</p>",
            "<table><tr><th class=l>overrides</th><th class=l>status</th><th class=l>error</th>"
            "<th class=l>run</th></tr>" + rows + "</table>"]


def build(data: SweepData, method: str = "holm") -> tuple[str, str]:
    """The page's HTML text, and the wins-by-kind chart as an SVG document (for ``--chart``)."""
    labels = dict(zip(data.runs["run_id"], data.runs["label"]))
    measured = [m.name for m in measures_mod.of_run(
        columns=list(next(iter(data.tables.values())).columns))]
    heads = report_facts.headline(data.objective, measured)
    wins = report_facts.wins_by_kind(data.tables, data.objective, method)
    recorded = data.parent_tags.get("ragexp.best_run")  # the sweep's choice leads its ties
    order = report_charts.order(wins, recorded) + wins.left_out
    reference = data.baseline_id or report_facts.best_run(data.tables, data.objective)
    ref_label = (f"the baseline {labels[reference]}" if data.baseline_id
                 else f"the best run {labels[reference]}")
    test_measures = list(dict.fromkeys([measures_mod.parse(data.objective).name,
                                        *significance.DEFAULT_MEASURES]))
    test_measures = [m for m in test_measures if m in measured]
    notes = list(data.notes)
    try:
        tests = report_facts.reference_tests(data.tables, reference, test_measures, method)
    except significance.NotPaired as exc:
        tests = {}
        notes.append(f"no paired tests: {exc}")
    split = data.runs.get("params.split", pd.Series(["?"])).iloc[0]
    title = (f"Which configuration wins on which question kind: {data.objective}, "
             f"{data.experiment}, {split} questions")
    wins_svg = report_charts.wins_svg(wins, labels, title, recorded)
    whole = data.previous_status in (None, "FINISHED")
    prev = (f"previous sweep {data.previous_id[:8]}"
            + ("" if whole else f" ({data.previous_status}: incomplete)")
            + f" ({len(data.previous_match)} of {counted(len(data.runs), 'run')} matched by configuration "
              f"or name)" if data.previous_id else "no previous sweep")
    champ = (f"champion run {data.champion['run_id'].iloc[0][:8]}"
             if data.champion is not None else "no champion registered")
    body = [f"<h1>Sweep {esc(data.parent_id[:8])}: {esc(data.experiment)}</h1>",
            f'<p class="meta">{len(data.runs)} run{"" if len(data.runs) == 1 else "s"} on the '
            f"{esc(split)} questions; objective "
            f"{esc(data.objective)}; compared with {esc(prev)} and {esc(champ)}. Generated "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} by <code>ragexp report --html</code>.</p>",
            *[f'<p class="note">{esc(n)}</p>' for n in notes],
            *failed_jobs_section(data),
            *headline_section(data, heads, order),
            *certificate_section(data, labels, method),
            *cost_section(data, labels),
            *wins_section(wins, labels, wins_svg, recorded)]
    if tests:
        body += kind_section(data, tests, reference, ref_label, test_measures, labels, order,
                             method)
    body += (depth_section(data) + abstain_section(data, labels)
             + failures_section(data, labels, order))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>ragexp sweep {esc(data.parent_id[:8])}</title><style>{CSS}</style>"
            "</head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    return page, wins_svg


def check_outputs(out: Path | None, chart: Path | None) -> None:
    """Refuse output paths before any work (before the sweep is even looked up): ``--chart``
    must end in ``.svg``; each path must not be a folder, and its parent folder must exist and
    be writable; ``--chart`` and ``--html`` must not name the same file (compared resolved).
    Writability is probed with a temporary file created and removed in the folder. Raises
    ``InvalidValue`` naming the option and the path."""
    if chart is not None and chart.suffix.lower() != ".svg":
        raise InvalidValue(f"--chart {chart}: the chart is an SVG document; name the file "
                           f"{chart.with_suffix('.svg').name}")
    for option, path in (("--html", out), ("--chart", chart)):
        if path is None:
            continue
        folder = path.parent
        if path.is_dir():
            raise InvalidValue(f"{option} {path}: is a folder; name a file in it, e.g. "
                               f"{path / ('report.html' if option == '--html' else 'wins.svg')}")
        if not folder.is_dir():
            raise InvalidValue(f"{option} {path}: its folder {folder} does not exist; create "
                               "it first or name a file in an existing folder")
        try:  # a real probe: os.access says yes to root, even on /proc
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise InvalidValue(f"{option} {path}: cannot write in its folder {folder} "
                               f"({exc.strerror or exc})") from exc
    if out is not None and chart is not None and out.resolve() == chart.resolve():
        raise InvalidValue(f"--chart {chart} and --html {out} name the same file; give each "
                           "its own")


def write(parent_id: str, out: Path | None = None, chart: Path | None = None,
          upload: bool = True) -> str:
    """Write the page of sweep ``parent_id`` to ``out`` and/or its wins-by-kind chart to
    ``chart`` (an SVG document), and log the page as ``report.html`` on the parent run when
    ``upload``. Returns one line saying what was written. Raises ``InvalidValue`` for an output
    path ``check_outputs`` refuses (before reading anything), for runs whose measures do not
    compare (``compare.not_comparable``: other data or ``dataset.unit``); a write that fails
    midway leaves
    neither output nor temporary file (``files.write_all``) and is re-raised as ``InvalidValue``
    naming the path."""
    check_outputs(out, chart)
    data = sweep_data.load(parent_id)
    if apart := compare.not_comparable(
            ({k[5:]: v for k, v in row.items() if k.startswith("tags.")},
             {k[7:]: v for k, v in row.items() if k.startswith("params.")})
            for row in data.runs.to_dict("records")):
        raise InvalidValue(f"no page for sweep {parent_id[:8]}: {apart} (its best run, wins and "
                           f"paired tests would rank them)")
    page, chart_svg = build(data)
    texts = {p: t for p, t in ((chart, chart_svg), (out, page)) if p is not None}
    try:
        files.write_all(texts)
    except OSError as exc:
        raise InvalidValue(f"could not write {exc.filename or ', '.join(map(str, texts))}: "
                           f"{exc.strerror or exc}; nothing was written") from exc
    done = [str(p) for p in texts]
    if upload:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / ARTIFACT).write_text(page, encoding="utf-8")
            tracking.client().log_artifact(parent_id, str(Path(d) / ARTIFACT))
        done.append(f"{ARTIFACT} on run {parent_id}")
    n = len(data.runs)
    return f"sweep {parent_id[:8]} ({n} run{'' if n == 1 else 's'}): wrote " + ", ".join(done)
