"""Judge verdicts as run metrics and per-question columns (pure functions).

- ``judge.groundedness``: grounded / answered questions with a verdict (every kind);
- ``judge.correctness``: correct / answered answerable questions with a verdict;
- ``judge.correct_answerable``: correct / answerable questions, a refusal counting as not
  correct (answered questions without a readable verdict are left out of both sides);
- each also per kind as ``<metric>.<kind>``; ``judge.graded``, ``judge.unreadable`` (failed or
  unreadable gradings) and the endpoint's ``judge.tokens_in``, ``judge.tokens_out``,
  ``judge.retries``, ``judge.cost_usd`` (tokens of the run's gradings and of the hand labels).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ragexp.answer.base import Answer
from ragexp.answer.llm import Completion, Endpoint
from ragexp.records import Query


def _rate(hits: list[bool]) -> Optional[float]:
    return sum(hits) / len(hits) if hits else None


def judge_metrics(queries: Sequence[Query], answers: Sequence[Answer],
                  verdicts: Sequence) -> dict[str, float]:
    """Rates overall and per kind; ``verdicts[i]`` is None for a question not graded."""
    groups: dict[str, dict[str, list[bool]]] = {}
    unreadable = graded = 0
    for q, a, v in zip(queries, answers, verdicts):
        for scope in ("", f".{q.kind}"):
            g = groups.setdefault(scope, {"groundedness": [], "correctness": [],
                                          "correct_answerable": []})
            if v is not None and v.grounded is not None:
                g["groundedness"].append(v.grounded)
            if q.answerable and v is not None and v.correct is not None:
                g["correctness"].append(v.correct)
            if q.answerable and (a.refused or (v is not None and v.correct is not None)):
                g["correct_answerable"].append(not a.refused and bool(v and v.correct))
        graded += v is not None and not v.error
        unreadable += v is not None and bool(v.error)
    out = {"judge.graded": float(graded), "judge.unreadable": float(unreadable)}
    for scope, g in groups.items():
        for name, hits in g.items():
            rate = _rate(hits)
            if rate is not None:
                out[f"judge.{name}{scope}"] = rate
    return out


def usage_metrics(replies: Sequence[Completion], endpoint: Endpoint) -> dict[str, float]:
    """Tokens the endpoint reported, retries, and cost (absent without a price table)."""
    tin, tout = sum(r.tokens_in for r in replies), sum(r.tokens_out for r in replies)
    out = {"judge.tokens_in": float(tin), "judge.tokens_out": float(tout),
           "judge.retries": float(sum(r.retries for r in replies))}
    cost = endpoint.cost_usd(tin, tout)
    if cost is not None:
        out["judge.cost_usd"] = cost
    return out


def judge_columns(verdicts: Sequence) -> dict[str, list]:
    """``judge_grounded``, ``judge_correct`` (True/False, blank when not graded), ``judge_reason``
    (the judge's one line, or why there is no verdict)."""
    def val(v, key):
        return None if v is None else getattr(v, key)

    return {"judge_grounded": [val(v, "grounded") for v in verdicts],
            "judge_correct": [val(v, "correct") for v in verdicts],
            "judge_reason": ["" if v is None else (v.reason or v.error) for v in verdicts]}
