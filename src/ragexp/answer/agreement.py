"""How far to trust the judge: its agreement with hand-labelled answers, as Cohen's kappa.

The labels file (``judge.labels``; shipped: ``golden/judge/labels.jsonl``)
holds real handbook questions with an answer, the passages it cites (verbatim from the corpus) and a person's
``grounded`` / ``correct`` labels. Every ``judge=llm`` run grades them with the same prompt as
the run's answers; kappa below ``judge.kappa_floor`` (or undefined) marks the run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable, Optional, Sequence

from ragexp.errors import InvalidValue, path_problem

FIELDS = {"id": str, "question": str, "answer": str, "reference": str, "passages": list,
          "grounded": bool, "correct": bool}


@dataclass(frozen=True)
class GradeItem:
    """What the judge sees: ``passages`` are ``(n, text)`` as the answerer was shown them;
    ``reference`` is "" when there is none (then correctness is not graded)."""

    question: str
    answer: str
    passages: tuple[tuple[int, str], ...]
    reference: str = ""


@dataclass(frozen=True)
class Verdict:
    """``grounded``/``correct`` are None when not graded or unreadable (``error`` says why)."""

    grounded: Optional[bool]
    correct: Optional[bool]
    reason: str
    error: str = ""


@dataclass(frozen=True)
class Label:
    label_id: str
    item: GradeItem
    grounded: bool
    correct: bool
    docs: tuple[str, ...]  # the passage documents, for checking quotes against the corpus


def load_labels(path: str | Path) -> list[Label]:
    """Read the labels file. Raises ValueError naming ``file:line`` on invalid JSON, a missing
    or mistyped field, a duplicate id, or a passage without ``n``/``doc``/``text``."""
    path = Path(path)
    if problem := path_problem(path, "file"):
        raise InvalidValue(f"judge.labels={str(path)!r}: {problem} (run from the project root "
                           f"or give an absolute path)")
    out, seen = [], set()
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidValue(f"{where}: invalid JSON ({exc.msg})") from exc
        if not isinstance(rec, dict):
            raise InvalidValue(f"{where}: expected a JSON object")
        for key, kind in FIELDS.items():
            if not isinstance(rec.get(key), kind):
                raise InvalidValue(f"{where}: field {key!r} must be a {kind.__name__}")
        if rec["id"] in seen:
            raise InvalidValue(f"{where}: duplicate id {rec['id']!r}")
        seen.add(rec["id"])
        passages = []
        for p in rec["passages"]:
            if not (isinstance(p, dict) and isinstance(p.get("n"), int)
                    and isinstance(p.get("doc"), str) and isinstance(p.get("text"), str)):
                raise InvalidValue(f"{where}: each passage needs n (int), doc and text (strings)")
            passages.append(p)
        item = GradeItem(rec["question"], rec["answer"],
                         tuple((p["n"], f"{p['doc']}\n{p['text']}") for p in passages),
                         rec["reference"])
        out.append(Label(rec["id"], item, rec["grounded"], rec["correct"],
                         tuple(p["doc"] for p in passages)))
    if not out:
        raise InvalidValue(f"judge.labels={str(path)!r} holds no labels")
    return out


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters over the same items (Cohen 1960)::

        kappa = (p_o - p_e) / (1 - p_e),   p_o = share of items rated alike,
        p_e = sum_c p_a(c) * p_b(c)         (agreement expected by chance)

    Returns nan when ``p_e == 1`` (both raters gave one and the same label to every item:
    agreement is undefined) and raises ValueError on lists of different or zero length.
    """
    if len(a) != len(b) or not a:
        raise InvalidValue(f"kappa needs two equally long, non-empty ratings ({len(a)}, {len(b)})")
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b)) / n
    labels = sorted(set(a) | set(b), key=repr)  # one summation order in every process
    p_e = sum((list(a).count(c) / n) * (list(b).count(c) / n) for c in labels)
    if math.isclose(p_e, 1.0):
        return math.nan
    return (p_o - p_e) / (1 - p_e)


def agreement_metrics(labels: Sequence[Label], verdicts: Sequence[Verdict],
                      floor: float) -> tuple[dict[str, float], dict[str, str]]:
    """``judge.kappa_groundedness``, ``judge.kappa_correctness`` over the labels the judge gave
    a readable verdict for, ``judge.agreement_n``, and ``judge.below_floor`` (1.0 when either
    kappa is below ``floor`` or undefined), plus the tag ``ragexp.judge_agreement``."""
    pairs = [(lab, v) for lab, v in zip(labels, verdicts) if v.grounded is not None
             and v.correct is not None]
    out = {"judge.agreement_n": float(len(pairs))}
    kappas = {}
    for key in ("grounded", "correct"):
        name = {"grounded": "groundedness", "correct": "correctness"}[key]
        kappas[name] = (cohen_kappa([getattr(lab, key) for lab, _ in pairs],
                                    [getattr(v, key) for _, v in pairs]) if pairs else math.nan)
        if not math.isnan(kappas[name]):
            out[f"judge.kappa_{name}"] = kappas[name]
    below = any(math.isnan(k) or k < floor for k in kappas.values())
    out["judge.below_floor"] = float(below)
    shown = ", ".join(f"{k} {v:.2f}" for k, v in kappas.items())
    verdict = "BELOW FLOOR" if below else "ok"
    tag = (f"{verdict}: Cohen's kappa {shown} vs floor {floor} on {len(pairs)} of "
           f"{len(labels)} hand labels")
    return out, {"ragexp.judge_agreement": tag}
