"""Hand-written and generated questions side by side: which questions decide, and the
certificate of every question set of a sweep.

A dataset can hold questions from several sources (``hand``: written by a person, the default;
``generated``: ``ragexp questions generate``). The config key ``objective_source`` (default
``hand``) says which questions drive the objective, the sweep's choice and the gate: ``hand``
(or any source name) takes that source's questions, ``all`` every question. A run whose questions
come from one source is decided by all of them, whatever the key says.

The **certificate** (``certify``; the figures are ``evaluation.certificate``'s) says, for each
source of a sweep's questions, how far it can be trusted to rank the sweep's configurations:
its size, kinds and coverage, its split-half agreement and discriminative power on the
objective (and RR@10), and a verdict (``decides``, ``ties``, ``not enough signal``); for each
pair of sources, tau-b with its bootstrap interval, the inversions, and whether winners and
tied-with-best sets agree. A source other than ``hand`` whose tau with the hand-written
questions is below their own median split-half tau **disagrees with your questions**: it is
never used to decide unless ``objective_source`` names it (or ``all``) explicitly, and the
decision lines say so and why. The sweep logs it on its parent run (``certificate.*`` metrics,
``certificate.json``: ``to_json``), and ``compare --parent``, the page and ``gate`` show its
``lines``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ragexp import legacy
from ragexp.errors import InvalidValue, counted, listed
from ragexp.evaluation import certificate as figures
from ragexp.evaluation import significance, stats
from ragexp.evaluation.measures import measure_key
from ragexp.records import HAND, OVERALL, Document, Query
from ragexp.tracking import store as tracking

ALL_SOURCES = OVERALL  # every source together: no source may be named so
ARTIFACT = tracking.SWEEP_CERTIFICATE
SCHEMA = 1  # certificate.json's ``schema``: raised when a field changes meaning
SECOND_MEASURE = "RR@10"  # certified beside the objective when the runs scored it


def sources_of(table: pd.DataFrame) -> list[str]:
    """The sources of a per-question table's questions, sorted (``hand`` for a table written
    before questions had a source)."""
    if "source" not in table:
        return [HAND]
    return sorted(table["source"].fillna(HAND).astype(str).unique())


def refuse_unknown(source: str, queries) -> None:
    """Raise ``InvalidValue`` when ``objective_source=source`` names none of the sources of
    ``queries`` (the questions a run scores) while they hold several, before the run does any
    work: a typo (``hnd``) ran the whole job and then failed it with a traceback, and in a sweep
    the first skipped job's objective stopped the sweep. ``all``, and any source over questions
    of one source (which decide whole), are taken as they are (``deciding``)."""
    have = sorted({q.source for q in queries})
    if source != ALL_SOURCES and len(have) > 1 and source not in have:
        raise InvalidValue(f"objective_source={source!r}: the scored questions' sources are "
                           f"{', '.join(have)} (or all); nothing was run")


def deciding(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """The rows of a per-question table that decide under ``objective_source=source``: all of
    them when the table has one source or ``source`` is ``all``, else that source's. Raises
    ``InvalidValue`` naming the sources there are when ``source`` is not one of them."""
    have = sources_of(table)
    if source == ALL_SOURCES or len(have) < 2:
        return table
    if source not in have:
        raise InvalidValue(f"objective_source={source!r}: the questions' sources are "
                           f"{', '.join(have)} (or all)")
    return table[table["source"].astype(str) == source]




@dataclass(frozen=True)
class Ranking:
    """A source's figures on one measure over ``runs`` (the configurations, in row order):
    ``scored`` questions; split-half agreement; ``ordered`` pairs (``figures.ordered_pairs``)
    and the share told apart (``power``), on the objective only (``None`` and NaN on another
    measure: every pair's test is most of the certificate's time); the ``best`` run and the
    runs ``tied`` with it (the sweep's rule, ``stats.tied_with_best``); each run's mean."""

    scored: int
    split_half: figures.Spread
    ordered: dict[tuple[int, int], int] | None
    power: float
    best: str
    tied: tuple[str, ...]
    means: dict[str, float]


@dataclass(frozen=True)
class SourceCertificate:
    """One source's certificate: ``n`` questions in the runs' tables, ``kinds`` (count per
    kind), ``coverage`` (``None`` when the corpus could not be read), ``runs`` (the
    configurations its figures rank, in row order), ``rankings`` per measure, and the
    ``verdict`` on the objective with ``why``."""

    source: str
    n: int
    kinds: dict[str, int]
    coverage: figures.Coverage | None
    runs: tuple[str, ...]
    rankings: dict[str, Ranking]
    verdict: str
    why: str


@dataclass(frozen=True)
class Agreement:
    """Two sources over the runs both rank, on one measure: tau-b with its bootstrap interval
    (``figures.bootstrap_tau``; ``tau.median`` is the whole sets' tau), the ``inversions``
    (``(above on a, above on b)`` run pairs; ``None`` on a measure other than the objective,
    whose pairs are not tested), and whether winners and tied sets agree."""

    tau: figures.Spread
    inversions: tuple[tuple[str, str], ...] | None
    winner_agrees: bool
    tied_agree: bool


@dataclass(frozen=True)
class PairCertificate:
    """Sources ``a`` and ``b`` compared, per measure; ``disagrees``: ``b`` is not ``hand``,
    ``a`` is, and ``b``'s tau with ``a`` on the objective is below ``a``'s median split-half
    tau (``None`` when either is undefined or ``a`` is not ``hand``)."""

    a: str
    b: str
    measures: dict[str, Agreement]
    disagrees: bool | None


@dataclass(frozen=True)
class Certificate:
    """A sweep's question sets certified (module docstring): ``objective`` and the other
    ``measures``, the ``deciding`` source (``objective_source``), the correction ``method`` and
    ``alpha``, each source's certificate and each pair's."""

    objective: str
    measures: tuple[str, ...]
    deciding: str
    method: str
    alpha: float
    sources: dict[str, SourceCertificate]
    pairs: list[PairCertificate] = field(default_factory=list)

    def flagged(self) -> list[PairCertificate]:
        """The pairs whose second source disagrees with the hand-written questions."""
        return [p for p in self.pairs if p.disagrees]


def _aligned(tables: Mapping[str, pd.DataFrame], source: str, col: str
             ) -> tuple[list[str], np.ndarray]:
    """The runs scored on the first run's questions of ``source`` on column ``col``, and their
    ``(runs, questions)`` scores, questions sorted by id."""
    series = {}
    for r, t in tables.items():
        rows = t if "source" not in t else t[t["source"].fillna(HAND).astype(str) == source]
        if col in rows:
            series[r] = rows.dropna(subset=[col]).set_index("id")[col].astype(float)
    if not series:
        return [], np.empty((0, 0))
    ids = sorted(next(iter(series.values())).index)
    runs = [r for r, s in series.items() if set(s.index) == set(ids)]
    return runs, np.array([series[r].loc[ids].to_numpy() for r in runs]).reshape(len(runs),
                                                                                  len(ids))


def _ranking(runs: list[str], scores: np.ndarray, measure: str, method: str,
             alpha: float, pairwise: bool) -> Ranking:
    ordered = None if not pairwise else (
        figures.ordered_pairs(scores, measure, method, alpha) if scores.shape[1] else {})
    means = {r: float(m) for r, m in zip(runs, scores.mean(axis=1))} if scores.shape[1] else {}
    if scores.shape[1]:
        tied = stats.tied_with_best(dict(zip(runs, scores)), measure, method, alpha,
                                    intervals=False)
        best, tied_runs = tied.best, tied.tied
    else:
        best, tied_runs = "", tuple(runs)
    return Ranking(scores.shape[1], figures.split_half(scores), ordered,
                   math.nan if ordered is None else figures.power(ordered), best,
                   tuple(tied_runs), means)


def certify(tables: Mapping[str, pd.DataFrame], objective: str, deciding: str = HAND,
            method: str = "holm", alpha: float = stats.ALPHA,
            corpus: tuple[Sequence[Document], Sequence[Query]] | None = None
            ) -> Certificate | None:
    """The certificate of the questions of ``tables`` (``{run id: per-question table}``, every
    source's rows) for ranking those runs by ``objective`` (and ``SECOND_MEASURE`` where scored);
    ``deciding``: the sweep's ``objective_source``. ``corpus``: the documents and questions the
    runs were scored on, for coverage (``None``: not computed). ``None`` when fewer than two runs
    share a source's questions."""
    if not tables:
        return None
    first = next(iter(tables.values()))
    measures = tuple(m for m in dict.fromkeys([objective, SECOND_MEASURE])
                     if significance.column(m) in first)
    if objective not in measures:
        return None
    by_id = {q.qid: q for q in corpus[1]} if corpus is not None else {}
    out: dict[str, SourceCertificate] = {}
    for source in sorted(sources_of(first), key=lambda s: (s != HAND, s)):  # hand first
        runs, _ = _aligned(tables, source, significance.column(objective))
        if len(runs) < 2:
            continue
        rankings = {}
        for m in measures:
            runs_m, scores = _aligned({r: tables[r] for r in runs}, source,
                                      significance.column(m))
            if runs_m == runs:
                rankings[m] = _ranking(runs, scores, m, method, alpha, m == objective)
        rows = first if "source" not in first else \
            first[first["source"].fillna(HAND).astype(str) == source]
        kinds = rows["kind"].astype(str).value_counts() if "kind" in rows else pd.Series(dtype=int)
        main = rankings[objective]
        verdict, why = figures.verdict(main.scored, main.split_half, main.power, len(main.tied),
                                       len(runs))
        cover = None if corpus is None else figures.coverage(
            corpus[0], [by_id[q] for q in rows["id"].astype(str) if q in by_id])
        out[source] = SourceCertificate(source, len(rows), {str(k): int(v) for k, v in
                                                          sorted(kinds.items())},
                                        cover, tuple(runs), rankings, verdict, why)
    if not out:
        return None
    return Certificate(objective, measures, deciding, method, alpha, out,
                       [_pair(out[a], out[b], tables, objective)
                        for a, b in combinations(out, 2)])


def _pair(a: SourceCertificate, b: SourceCertificate, tables: Mapping[str, pd.DataFrame],
          objective: str) -> PairCertificate:
    """Sources ``a`` and ``b`` compared over the runs both rank (``Agreement`` per measure)."""
    runs = [r for r in a.runs if r in b.runs]
    out = {}
    for m in a.rankings:
        if m not in b.rankings:
            continue
        col = significance.column(m)
        sub = {r: tables[r] for r in runs}
        _, sa = _aligned(sub, a.source, col)
        _, sb = _aligned(sub, b.source, col)
        tau = figures.bootstrap_tau(sa, sb)
        inv = None
        if m == objective:
            pa, pb = (_on(runs, s.runs, s.rankings[m].ordered) for s in (a, b))
            inv = tuple((runs[i], runs[j]) for i, j in figures.inversions(pa, pb))
        out[m] = Agreement(tau, inv, bool(_top(a.rankings[m]) & _top(b.rankings[m])),
                           set(a.rankings[m].tied) == set(b.rankings[m].tied))
    disagrees = None
    own = a.rankings[objective].split_half.median
    if a.source == HAND and objective in out and a.verdict != figures.NO_SIGNAL and not (
            math.isnan(own) or math.isnan(out[objective].tau.median)):
        disagrees = out[objective].tau.median < own
    return PairCertificate(a.source, b.source, out, disagrees)


def _top(r: Ranking) -> set[str]:
    """The runs of highest mean (exact ties all of them, to 1e-12): winners agree when the
    two sources' sets meet, not on how a tie was broken."""
    if not r.means:
        return set()
    high = max(r.means.values())
    return {run for run, m in r.means.items() if m >= high - 1e-12}


def _on(runs: list[str], own: tuple[str, ...], ordered: dict[tuple[int, int], int]
        ) -> dict[tuple[int, int], int]:
    """A source's ``ordered`` pairs (over its ``own`` runs) read on the pairs of ``runs``: each
    source's family is its own, whatever runs the other ranks."""
    at = [own.index(r) for r in runs]
    return {(i, j): ordered[(at[i], at[j])] if at[i] < at[j] else -ordered[(at[j], at[i])]
            for i, j in combinations(range(len(runs)), 2)}


def interval(s: figures.Spread) -> str:
    """A tau and its interval as the certificate prints them: ``0.78 [0.65, 0.89]``, the tau
    alone when no resample defined an interval, ``undefined`` when the tau is not."""
    if math.isnan(s.median):
        return "undefined"
    return f"{s.median:.2f}" + ("" if math.isnan(s.low) else f" [{s.low:.2f}, {s.high:.2f}]")


def _share(part: int | None, whole: int | None, what: str) -> str:
    if part is None or not whole:
        return ""
    return f"{part} of {counted(whole, what)} ({part / whole:.0%})"


PAIRS_SHOWN = 3  # sources up to which every pair is printed; beyond, the pairs with yours


def lines(cert: Certificate, label: Mapping[str, str]) -> list[str]:
    """What the sweep prints at its end, and ``compare``, the page and the gate show: one line
    per source, one per pair, and one per source not used to decide (or used against the
    certificate's advice), with why. With more than ``PAIRS_SHOWN`` sources (a calibration's
    grid: 11 sets make 66 pairs) only the pairs with the hand-written questions are printed,
    and one line says where the others are (``certificate.json``, ``certificate.*``)."""
    name = lambda r: label.get(r, r[:8])  # noqa: E731
    obj = cert.objective
    out = [f"question sets ({obj}; split halves: median tau [5th-95th percentile] of "
           f"{figures.SPLITS}; pairs told apart: {stats.CORRECTION_NAMES[cert.method]}, alpha "
           f"{cert.alpha}; objective_source={cert.deciding} decides):"]
    for s in cert.sources.values():
        r = s.rankings[obj]
        kinds = ", ".join(f"{k} {v}" for k, v in s.kinds.items())
        cover = ""
        if s.coverage is not None:
            shown = [x for x in (_share(s.coverage.docs, s.coverage.docs_total, "document"),
                                 _share(s.coverage.sections, s.coverage.sections_total,
                                        "section")) if x]
            cover = (f"; covers {', '.join(shown)}" if shown else "") + (
                f" ({s.coverage.note})" if s.coverage.note else "")
        pairs, told = len(r.ordered), sum(1 for v in r.ordered.values() if v)
        size = counted(r.scored, "question") + (
            f" scored on {obj} of {s.n}" if r.scored != s.n else "")
        out.append(f"{s.source}: {size} ({kinds}){cover}; split-half tau "
                   f"{interval(r.split_half)}; {told} of {counted(pairs, 'pair')} told apart; "
                   f"best {name(r.best)}, {len(r.tied)} of {len(s.runs)} tied with it: "
                   f"{s.verdict} ({s.why})")
    shown = [p for p in cert.pairs if len(cert.sources) <= PAIRS_SHOWN or HAND in (p.a, p.b)]
    for p in shown:
        main = p.measures.get(obj)
        if main is None:
            continue
        ra, rb = cert.sources[p.a].rankings[obj], cert.sources[p.b].rankings[obj]
        others = "".join(f" ({m} {interval(g.tau)})" for m, g in p.measures.items()
                         if m != obj)
        inv = (f"{counted(len(main.inversions), 'inversion')}"
               + (": " + listed((f"{name(x)} above {name(y)} on {p.a}, below on {p.b}"
                                 for x, y in main.inversions), 5, "; ")
                  if main.inversions else ""))
        only = [f"{s} only: " + ", ".join(name(r) for r in mine if r not in theirs)
                for s, mine, theirs in ((p.a, ra.tied, rb.tied), (p.b, rb.tied, ra.tied))
                if set(mine) - set(theirs)]
        out.append(f"{p.a} vs {p.b}: tau {interval(main.tau)}{others}; {inv}; winner "
                   + ("agrees" if main.winner_agrees else
                      f"differs ({p.a} {name(ra.best)}, {p.b} {name(rb.best)})")
                   + "; tied-with-best sets "
                   + ("agree" if main.tied_agree else f"differ ({'; '.join(only)})"))
    if len(shown) < len(cert.pairs):
        out.append(f"(the other {len(cert.pairs) - len(shown)} pairs of sources: the sweep's "
                   f"{ARTIFACT} and certificate.* metrics)")
    return out + flag_lines(cert)


def flag_lines(cert: Certificate) -> list[str]:
    """One line per source that disagrees with the hand-written questions: not used to decide,
    and why; a warning instead when ``objective_source`` names it (or ``all``). When the hand
    questions themselves have not enough signal, one line saying that no set was checked
    against them; when the deciding questions have not enough signal, a warning that the
    sweep's best and its ties rest on none."""
    obj, out = cert.objective, []
    for p in cert.flagged():
        size = counted(cert.sources[p.b].rankings[obj].scored, "question")
        why = (f"tau {interval(p.measures[obj].tau)} with your questions, below their own "
               f"split-half agreement {cert.sources[p.a].rankings[obj].split_half.median:.2f}")
        if cert.deciding in (p.b, ALL_SOURCES):
            out.append(f"warning: {p.b} ({size}) disagrees with your "
                       f"questions ({why}), and objective_source={cert.deciding} decides on "
                       f"them: set objective_source={HAND} to decide on yours")
        else:
            out.append(f"{p.b} ({size}) disagrees with your questions: not used ({why})")
    hand = cert.sources.get(HAND)
    if hand is not None and hand.verdict == figures.NO_SIGNAL and len(cert.sources) > 1:
        out.append(f"no set checked against your questions: they have not enough signal "
                   f"({hand.why}), so a tau with them says nothing either way")
    decided = cert.sources.get(cert.deciding)
    if decided is not None and decided.verdict == figures.NO_SIGNAL:
        out.append(f"warning: the deciding questions ({cert.deciding}) have not enough signal "
                   f"({decided.why}): the best and the runs tied with it are no decision; add "
                   f"questions (ragexp questions plan says how many)")
    return out


def metrics(cert: Certificate) -> dict[str, float]:
    """The parent run's ``certificate.*`` metrics (MLflow-safe names: measure keys, no ``@``);
    undefined figures (NaN) are not logged."""
    out: dict[str, float] = {}
    for s in cert.sources.values():
        pre = f"certificate.{s.source}"
        out[f"{pre}.questions"] = float(s.n)
        out[f"{pre}.verdict"] = figures.VERDICT_CODES[s.verdict]
        out.update({f"{pre}.kind.{k}": float(v) for k, v in s.kinds.items()})
        if s.coverage is not None:
            for what, part, whole in (("docs", s.coverage.docs, s.coverage.docs_total),
                                      ("sections", s.coverage.sections,
                                       s.coverage.sections_total)):
                if part is not None and whole:
                    out[f"{pre}.coverage_{what}"] = part / whole
        for m, r in s.rankings.items():
            key = f"{pre}.{measure_key(m)}"
            out.update({f"{key}.split_half_median": r.split_half.median,
                        f"{key}.split_half_p05": r.split_half.low,
                        f"{key}.split_half_p95": r.split_half.high,
                        f"{key}.power": r.power, f"{key}.tied_with_best": float(len(r.tied)),
                        f"{key}.scored": float(r.scored)})
            if r.ordered is not None:
                out[f"{key}.pairs_told_apart"] = float(sum(1 for v in r.ordered.values() if v))
    for p in cert.pairs:
        pre = f"certificate.{p.a}_vs_{p.b}"
        if p.disagrees is not None:
            out[f"{pre}.disagrees"] = float(p.disagrees)
        for m, g in p.measures.items():
            key = f"{pre}.{measure_key(m)}"
            out.update({f"{key}.kendall_tau": g.tau.median, f"{key}.tau_low": g.tau.low,
                        f"{key}.tau_high": g.tau.high,
                        f"{key}.winner_agrees": float(g.winner_agrees),
                        f"{key}.tied_agree": float(g.tied_agree)})
            if g.inversions is not None:
                out[f"{key}.inversions"] = float(len(g.inversions))
    return {k: float(v) for k, v in out.items() if not math.isnan(v)}


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def to_json(cert: Certificate, label: Mapping[str, str]) -> dict:
    """``certificate.json``, the parent run's artifact: the settings every figure was computed
    with, each source's and each pair's figures (runs by id, with ``labels``), and ``lines``.
    NaN (undefined) is ``null``."""
    def spread(s: figures.Spread, lo: str, hi: str, point: str) -> dict:
        return {point: _num(s.median), lo: _num(s.low), hi: _num(s.high),
                "defined": s.defined, "total": s.total}

    runs = sorted({r for s in cert.sources.values() for r in s.runs})
    return {
        "schema": SCHEMA, "objective": cert.objective, "measures": list(cert.measures),
        "objective_source": cert.deciding, "correction": cert.method, "alpha": cert.alpha,
        "settings": {"splits": figures.SPLITS, "resamples": figures.RESAMPLES,
                     "seed": figures.SEED, "min_questions": figures.MIN_QUESTIONS,
                     "split_half_floor": figures.SPLIT_HALF_FLOOR,
                     "decides_share": figures.DECIDES_SHARE},
        "labels": {r: label.get(r, r[:8]) for r in runs},
        "sources": {s.source: {
            "questions": s.n, "kinds": s.kinds, "verdict": s.verdict, "why": s.why,
            "coverage": None if s.coverage is None else {
                "docs": s.coverage.docs, "docs_total": s.coverage.docs_total,
                "sections": s.coverage.sections, "sections_total": s.coverage.sections_total,
                "note": s.coverage.note},
            "runs": list(s.runs),
            "measures": {m: {"scored": r.scored,
                             "split_half": spread(r.split_half, "p05", "p95", "median"),
                             "pairs": None if r.ordered is None else len(r.ordered),
                             "told_apart": None if r.ordered is None else
                             sum(1 for v in r.ordered.values() if v),
                             "power": _num(r.power), "best": r.best, "tied": list(r.tied),
                             "means": r.means}
                         for m, r in s.rankings.items()}}
            for s in cert.sources.values()},
        "pairs": [{"a": p.a, "b": p.b, "disagrees": p.disagrees,
                   "measures": {m: {**spread(g.tau, "low", "high", "kendall_tau"),
                                    "inversions": None if g.inversions is None else
                                    [list(x) for x in g.inversions],
                                    "winner_agrees": g.winner_agrees,
                                    "tied_agree": g.tied_agree}
                                for m, g in p.measures.items()}}
                  for p in cert.pairs],
        "lines": lines(cert, label)}


def recorded(parent_id: str) -> dict | None:
    """The ``certificate.json`` sweep ``parent_id`` logged; ``None`` for a sweep that logged
    none (one from before the certificate, or with fewer than two runs to rank)."""
    try:
        path = tracking.artifact_path(parent_id, ARTIFACT)
    except tracking.RunNotFound:
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def corpus_of(run_id: str) -> tuple[list[Document], list[Query]] | None:
    """The documents and questions run ``run_id`` was scored on, from its recorded
    ``config.yaml`` (its ``dataset``, instantiated); ``None`` when they cannot be read again
    (the files moved, say): the certificate then says nothing of coverage."""
    # defer heavy import
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    try:
        cfg = legacy.upgrade(OmegaConf.load(tracking.artifact_path(run_id, "config.yaml")))
        dataset = instantiate(cfg.dataset)
        return dataset.documents(), dataset.queries()
    except Exception:  # noqa: BLE001 - coverage is optional; the rest of the certificate stands
        return None


def summary(cert: Certificate) -> list[str]:
    """The certificate in a few short lines (the README's): each source's size and verdict,
    each pair's tau with its interval, and each source not used to decide."""
    obj = cert.objective
    out = [f"{s.source}: {counted(s.rankings[obj].scored, 'question')}, {s.verdict} ({s.why})"
           for s in cert.sources.values()]
    out += [f"{p.a} vs {p.b}: tau {interval(p.measures[obj].tau)} ({obj})"
            for p in cert.pairs if obj in p.measures]
    return out + flag_lines(cert)


def sweep_certificate(parent_id: str, tables: Mapping[str, pd.DataFrame], objective: str,
                      deciding: str, label: Mapping[str, str]) -> dict | None:
    """The certificate of sweep ``parent_id`` as ``certificate.json`` holds it (``to_json``):
    the one it recorded, else computed now from its runs' ``tables`` (``certify``, without
    coverage: a sweep from before the certificate); ``None`` when no source is ranked by two
    runs."""
    doc = recorded(parent_id)
    if doc is not None:
        return doc
    cert = certify(tables, objective, deciding)
    return None if cert is None else to_json(cert, label)


def recorded_lines(parent) -> list[str]:
    """The certificate's lines a sweep's parent run (an MLflow ``Run``) recorded, or a sweep's
    from before the certificate its sources' lines (tag ``ragexp.sources``); none when it
    recorded neither."""
    doc = recorded(parent.info.run_id)
    if doc is not None:
        return list(doc["lines"])
    note = parent.data.tags.get("ragexp.sources")
    return list(json.loads(note)["lines"]) if note else []
