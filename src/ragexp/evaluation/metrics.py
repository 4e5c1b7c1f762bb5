"""Scoring a ranking with the configured measures (``measures.py``), and averaging.

Which queries are averaged (trec_eval's rule on judged data): every query that has judgements
counts, a query whose judgements are all grade 0 with 0 on every measure, and a query missing
from the ranking with 0; a query with no judgements at all is not scored (the dataset reports
it). The handbook judges only its answerable questions, so its means are over those. Queries
weigh equally, overall and per question kind.
"""

from __future__ import annotations

from typing import Iterable

from ragexp.evaluation.measures import DEFAULT, Measure
from ragexp.records import HAND, Qrels, Query, Ranking, ordered


def first_relevant_rank(ranked: list[str], rel: dict[str, int]) -> int | None:
    return next((i for i, d in enumerate(ranked, 1) if rel.get(d, 0) > 0), None)


def per_query(ranking: Ranking, qrels: Qrels,
              measures: Iterable[Measure] = DEFAULT) -> dict[str, dict[str, float]]:
    """``{qid: {measure.key: value}}`` for every query in ``qrels`` (a query missing from the
    ranking, or with no relevant judgement, scores 0)."""
    measures = tuple(measures)
    out = {}
    for qid, rel in qrels.items():
        ranked = ordered(ranking.get(qid, {}))
        out[qid] = {m.key: m(ranked, rel) for m in measures}
    return out


def order_free(measures: Iterable[Measure], qrels: Qrels, units: Iterable[str]
               ) -> tuple[Measure, ...]:
    """The ``measures`` that score every query of ``qrels`` the same on every order of
    ``units`` (ids of every item a ranking can hold): the measures a run whose rankings all
    hold every unit cannot tell configurations apart on (one unit: all of them; a cutoff at or
    past the unit count: ``R@k``, ``Success@k``, ``P@k``). Each query is scored on its best
    order (relevant first, higher grades first) and its worst (that reversed); every measure
    rewards a relevant item ranked earlier, so equal at both ends is equal at every order."""
    units = list(units)
    fixed = []
    for m in measures:
        for rel in qrels.values():
            best = sorted(units, key=lambda u: -rel.get(u, 0))
            if m(best, rel) != m(best[::-1], rel):
                break
        else:
            fixed.append(m)
    return tuple(fixed)


def aggregate(scores: dict[str, dict[str, float]], queries: Iterable[Query]) -> dict[str, float]:
    """Means overall, per kind and, when the questions come from more than one source (hand-written
    and generated), per source: ``<key>``, ``<key>.<kind>``, ``<key>.source.<source>``, over the
    queries in ``scores`` (the output of ``per_query``: its keys are the measures). No scored
    query gives no mean at all (``{}``), never a 0 that looks measured."""
    queries = list(queries)
    kind_of = {q.qid: q.kind for q in queries}
    source_of = {q.qid: q.source for q in queries}
    out: dict[str, float] = {}
    groups: dict[str | None, list[str]] = {None: list(scores)} if scores else {}
    for qid in scores:
        groups.setdefault(kind_of.get(qid, "general"), []).append(qid)
    if len({source_of.get(qid, HAND) for qid in scores}) > 1:
        for qid in scores:
            groups.setdefault(f"source.{source_of.get(qid, HAND)}", []).append(qid)
    for group, qids in groups.items():
        suffix = "" if group is None else f".{group}"
        for key in scores[qids[0]]:
            out[key + suffix] = sum(scores[q][key] for q in qids) / len(qids)
    return out
