"""Which questions a run got wrong, and why, from its per-question table. Pure: no I/O.

A question **fails** when the answer a user would get is wrong in a way the golden set can see:

- an answerable question (one the run scored: its measure cell is filled) is refused, or is
  answered without any cited chunk holding its evidence (``cited_relevant == 0``);
- an unanswerable question (measure cell empty) is answered instead of refused.

Each failure gets one reason, the earliest stage that explains it:

==========================  ===============================================================
``retrieval miss``          answerable; no relevant item among the ``shown`` passages the
                            answerer was given (``first_relevant_rank`` empty or > ``shown``)
``refused``                 answerable; evidence was shown, yet the answer was refused (the
                            detail is the run's ``refusal_reason``: low confidence, or every
                            sentence dropped by the citation checker)
``unsupported citation``    answerable; evidence was shown and it answered, citing only chunks
                            that hold none of the evidence
``answered unanswerable``   unanswerable; answered instead of refused
==========================  ===============================================================

``first_relevant_rank`` is a rank in the run's scoring unit (``dataset.unit``): for chunks it
is exactly whether the evidence was among the passages shown; for sections or documents (ranked
by their best chunk) it is the rank of the first relevant unit, which the detail names as such.

A table logged before ``cited_relevant`` existed cannot show unsupported citations: answered
questions are then not judged, and :func:`failed_questions` says so in ``attrs["note"]``.
"""

from __future__ import annotations

import math

import pandas as pd

from ragexp.errors import InvalidValue

REASONS = ("retrieval miss", "refused", "unsupported citation", "answered unanswerable")
COLUMNS = ("id", "kind", "question", "reason", "detail")


def _flag(value) -> bool | None:
    """A boolean cell as pandas read it (bool, 'True'/'False', 1/0) or None when empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


def _rank(value) -> int | None:
    n = _number(value)
    return None if n is None else int(n)


def _number(value) -> float | None:
    """A float cell, or None when empty or not a number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _text(row, col: str) -> str:
    v = row.get(col, "")
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def failed_questions(table: pd.DataFrame, score_column: str, shown: int,
                     unit: str = "chunk") -> pd.DataFrame:
    """Failed questions of one run, one row each: ``id``, ``kind``, ``question``, ``reason``
    (one of :data:`REASONS`), ``detail`` (a sentence with the numbers behind it).

    ``table``: a run's ``per_question.csv`` (columns ``id``, ``kind``, ``score_column``,
    ``first_relevant_rank``, ``answered``, ``refusal_reason``, ``cited``, ``abstain_signal``,
    optional ``question`` and ``cited_relevant``); ``score_column``: a measure's column (its
    emptiness marks an unanswerable question); ``shown``: passages the answerer was given
    (the run's ``answer.n_chunks``); ``unit``: the run's scoring unit. Raises ``InvalidValue``
    (a ``ValueError``) when a needed column is missing or ``shown < 1``.
    """
    need = {"id", "kind", score_column, "first_relevant_rank", "answered"}
    missing = need - set(table.columns)
    if missing:
        raise InvalidValue(f"per-question table lacks column(s) {', '.join(sorted(missing))}")
    if shown < 1:
        raise InvalidValue(f"shown passages must be >= 1, got {shown}")
    judge_citations = "cited_relevant" in table.columns
    rows = []
    for row in table.to_dict("records"):
        answered = _flag(row["answered"])
        if answered is None:
            continue  # no answer recorded for this question: nothing to judge
        if pd.isna(row[score_column]):
            failure = _unanswerable_failure(row, answered)
        else:
            failure = _answerable_failure(row, answered, shown, unit, judge_citations)
        if failure:
            rows.append({"id": str(row["id"]), "kind": str(row["kind"]),
                         "question": _text(row, "question"), "reason": failure[0],
                         "detail": failure[1]})
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out.attrs["note"] = ("" if judge_citations else
                         "this run's per-question table has no cited_relevant column (logged "
                         "by an older ragexp): answered questions were not checked for "
                         "unsupported citations")
    return out


def _unanswerable_failure(row: dict, answered: bool) -> tuple[str, str] | None:
    """``(reason, detail)`` for an unanswerable question's row: a failure only if answered."""
    if not answered:
        return None
    signal = _number(row.get("abstain_signal"))
    return "answered unanswerable", (
        (f"confidence {signal:.3f} was not below the refusal threshold"
         if signal is not None else "no confidence recorded")
        + f"; cited {_text(row, 'cited') or 'nothing'}")


def _answerable_failure(row: dict, answered: bool, shown: int, unit: str,
                        judge_citations: bool) -> tuple[str, str] | None:
    """``(reason, detail)`` for an answerable question's row, or None when it was answered
    with a citation that holds evidence (or its citations were not judged). Refused or
    unsupported: a retrieval miss when no relevant ``unit`` was among the ``shown`` passages,
    else a refusal or an unsupported citation."""
    cited = _text(row, "cited")
    rank = _rank(row["first_relevant_rank"])
    n_rel = _rank(row.get("cited_relevant")) if judge_citations else None
    unsupported = answered and judge_citations and (n_rel or 0) == 0
    if answered and not unsupported:
        return None
    if rank is None or rank > shown:
        where = (f"no relevant {unit} retrieved" if rank is None
                 else f"first relevant {unit} at rank {rank}")
        then = (f"refused ({_text(row, 'refusal_reason') or 'no reason recorded'})"
                if not answered else f"answered citing {cited or 'nothing'}")
        return "retrieval miss", f"{where}, the answerer was shown the top {shown}; {then}"
    if not answered:
        return "refused", (f"evidence at rank {rank} of {shown} shown; "
                           f"{_text(row, 'refusal_reason') or 'no reason recorded'}")
    return "unsupported citation", (f"evidence at rank {rank} of {shown} shown, but the answer "
                                    f"cites {cited or 'nothing'}, none holding it")


def counts(failures: pd.DataFrame) -> dict[str, int]:
    """Failures per reason, every reason listed (0 when none)."""
    found = failures["reason"].value_counts().to_dict() if len(failures) else {}
    return {r: int(found.get(r, 0)) for r in REASONS}
