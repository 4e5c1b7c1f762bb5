"""``ragexp traces mine``: served traces read back, the ones that look wrong flagged, grouped into
failure modes, and written as candidate golden questions for a person to accept.

A trace (``tracing.py``) is flagged for each of these reasons, checked in this order:

- ``marked_wrong``: a user marked it wrong (``POST /feedback``);
- ``citations_dropped``: the citation checker dropped at least one sentence;
- ``answered_below_threshold``: answered although its confidence was below the threshold;
- ``refused_confident``: refused although its confidence was at or above the threshold (the
  refusal came from the answerer, not the abstain rule);
- ``low_overlap``: answered, and the answer holds less than ``min_overlap`` of the question's
  terms, ``|terms(Q) ∩ terms(A)| / |terms(Q)|`` (terms as ``text.tokenize`` makes them).

Failure modes: flagged traces are grouped by their first reason, then, within a reason, by
agglomerative clustering of the questions' embeddings (scikit-learn, cosine distance, average
linkage, cut at ``distance``); a mode is ``<reason>/<n>``, labelled by its commonest terms.

Candidates are in the golden format (``golden.py``) plus ``mode``, ``reason``, ``trace_id`` and
``run_id``: ``kind`` ``general``, the served answer as ``answer`` and the document and section
of the first cited (else shown, else retrieved) chunk as ``evidence``. They are suggestions:
a person corrects them (or sets ``kind`` to ``unanswerable`` and drops the evidence) and
accepts them with ``ragexp traces accept``, which validates them exactly as the golden set is
validated before adding any.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ragexp.data import files
from ragexp.errors import NotFound
from ragexp.serving.tracing import FEEDBACK_NAME, WRONG_TAG
from ragexp.text.analysis import tokenize
from ragexp.tracking import store as tracking

REASONS = ("marked_wrong", "citations_dropped", "answered_below_threshold",
           "refused_confident", "low_overlap")
MIN_OVERLAP = 0.3
DISTANCE = 0.6


@dataclass(frozen=True)
class Served:
    """One served request as its trace recorded it (``tracing.py``'s attributes)."""

    trace_id: str
    request: str  # "answer" or "search"
    question: str
    run_id: str = ""
    refused: bool | None = None  # None: a search
    reason: str = ""
    confidence: float | None = None
    threshold: float | None = None
    dropped: int = 0
    cited: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    retrieved: tuple[str, ...] = ()
    answer: str = ""
    marked_wrong: bool = False
    comment: str = ""


@dataclass
class Mode:
    name: str
    reason: str
    label: str
    members: list[Served] = field(default_factory=list)


def overlap(question: str, answer: str) -> float:
    """Share of the question's distinct terms found in the answer (0..1; 1 for a question
    without terms)."""
    q = set(tokenize(question))
    return len(q & set(tokenize(answer))) / len(q) if q else 1.0


def flags(s: Served, min_overlap: float = MIN_OVERLAP) -> list[str]:
    """The reasons (``REASONS`` order) for which ``s`` looks wrong; empty when it looks fine."""
    out = []
    if s.marked_wrong:
        out.append("marked_wrong")
    if s.dropped > 0:
        out.append("citations_dropped")
    if s.request == "answer" and s.confidence is not None and s.threshold is not None:
        if not s.refused and s.confidence < s.threshold:
            out.append("answered_below_threshold")
        if s.refused and s.confidence >= s.threshold:
            out.append("refused_confident")
    if s.request == "answer" and s.refused is False and overlap(s.question, s.answer) < min_overlap:
        out.append("low_overlap")
    return out


def from_trace(trace) -> Served:
    """A ``Served`` from an MLflow ``Trace`` written by ``tracing.Tracer``."""

    spans = {s.name: s.attributes for s in trace.data.spans if s.parent_id is not None}
    root = next(s for s in trace.data.spans if s.parent_id is None)
    tags = trace.info.tags
    inputs = root.inputs or {}
    outputs = root.outputs or {}
    ab, an = spans.get("abstain", {}), spans.get("answer", {})
    retrieved = spans.get("rerank", spans.get("retrieve", {})).get("ragexp.chunk_ids", [])
    wrong, comment = tags.get(WRONG_TAG) == "true", ""
    feedback = sorted((a for a in (trace.info.assessments or []) if a.name == FEEDBACK_NAME),
                      key=lambda a: a.create_time_ms or 0)
    if feedback:
        wrong = bool(feedback[-1].feedback.value)
        comment = feedback[-1].rationale or ""
    request = tags.get("ragexp.request", "answer")
    return Served(
        trace.info.trace_id, request, str(inputs.get("question", "")),
        tags.get("ragexp.run_id", ""),
        an.get("ragexp.refused") if request == "answer" else None,
        an.get("ragexp.refusal_reason", ""), ab.get("ragexp.confidence"),
        ab.get("ragexp.threshold"), int(an.get("ragexp.citations_dropped", 0) or 0),
        tuple(an.get("ragexp.citations_kept", [])), tuple(an.get("ragexp.sources", [])),
        tuple(retrieved), str(outputs.get("text", "")) if request == "answer" else "",
        wrong, comment)


def read(experiment: str, run_id: str | None = None,
         max_traces: int | None = None) -> list[Served]:
    """Traces of ``experiment`` (only those of ``run_id`` if given), newest first. Raises
    ``LookupError`` when the experiment does not exist."""
    # defer heavy import
    import mlflow


    exp = tracking.client().get_experiment_by_name(experiment)
    if exp is None:
        raise NotFound(f"no experiment {experiment!r} in {tracking.tracking_uri()}: serve "
                          f"with traces on (`ragexp serve`) first")
    where = f"tags.`ragexp.run_id` = '{run_id}'" if run_id else None
    traces = mlflow.search_traces(locations=[exp.experiment_id], filter_string=where,
                                  max_results=max_traces, return_type="list",
                                  order_by=["timestamp_ms DESC"])
    return [from_trace(t) for t in traces if t.info.tags.get("ragexp.request")]


def modes(flagged: Sequence[tuple[Served, list[str]]], embed: Callable[[list[str]], np.ndarray],
          distance: float = DISTANCE) -> list[Mode]:
    """Failure modes: by first reason, then by clustering the questions' embeddings
    (``embed``: texts -> (n, d) array) with scikit-learn's ``AgglomerativeClustering`` (cosine
    distance, average linkage, ``distance_threshold=distance``). Largest modes first."""
    # defer heavy import
    from sklearn.cluster import AgglomerativeClustering

    out: list[Mode] = []
    by_reason: dict[str, list[Served]] = {}
    for s, why in flagged:
        by_reason.setdefault(why[0], []).append(s)
    for reason in REASONS:
        members = by_reason.get(reason, [])
        if not members:
            continue
        if len(members) == 1:
            labels = np.zeros(1, dtype=int)
        else:
            vectors = np.asarray(embed([s.question for s in members]), dtype=np.float64)
            labels = AgglomerativeClustering(n_clusters=None, metric="cosine",
                                             linkage="average",
                                             distance_threshold=distance).fit_predict(vectors)
        groups: dict[int, list[Served]] = {}
        for label, s in zip(labels, members):
            groups.setdefault(int(label), []).append(s)
        ranked = sorted(groups.values(), key=lambda g: (-len(g), g[0].question))
        for i, group in enumerate(ranked, start=1):
            # each question's distinct terms in text order: ties in the count keep that order,
            # so the label is the same in every process (a set's order is not)
            terms = Counter(t for s in group for t in dict.fromkeys(tokenize(s.question)))
            label = " ".join(t for t, _ in terms.most_common(3))
            out.append(Mode(f"{reason}/{i}", reason, label, group))
    return sorted(out, key=lambda m: (-len(m.members), REASONS.index(m.reason),
                                      int(m.name.split("/")[1])))


def candidate(s: Served, mode: Mode, chunk_places: dict[str, tuple[str, str]]) -> dict:
    """One golden-format candidate for ``s`` (see the module docstring);
    ``chunk_places``: chunk id -> (document, heading path) of the served run's chunks."""
    qid = "mined-" + hashlib.sha256(" ".join(s.question.split()).lower().encode()).hexdigest()[:10]
    where = next((chunk_places[c] for c in (*s.cited, *s.sources, *s.retrieved)
                  if c in chunk_places), None)
    evidence = []
    if where:
        doc, heading = where
        evidence.append({"doc": doc, "section": heading} if heading else {"doc": doc})
    return {"id": qid, "kind": "general", "question": s.question,
            "answer": s.answer if s.refused is False else "", "evidence": evidence,
            "mode": mode.name, "reason": mode.reason, "mode_label": mode.label,
            "trace_id": s.trace_id, "run_id": s.run_id,
            **({"comment": s.comment} if s.comment else {})}


def candidates(found: list[Mode], chunk_places: dict[str, tuple[str, str]]) -> list[dict]:
    """One candidate per distinct question (its first, largest mode wins), modes in order."""
    seen, out = set(), []
    for mode in found:
        for s in mode.members:
            rec = candidate(s, mode, chunk_places)
            if rec["id"] not in seen:
                seen.add(rec["id"])
                out.append(rec)
    return out


def write_candidates(path: str | Path, records: list[dict]) -> None:
    """``records`` as JSON lines after a ``//`` comment saying how to accept them (the golden
    reader skips ``//`` lines); written to a temporary file and renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = ("// Candidate golden questions mined from served traces (ragexp traces mine). "
            "Check each: correct 'answer', 'evidence' and 'kind' (or kind 'unanswerable' with "
            "no evidence), then: ragexp traces accept THIS_FILE --into GOLDEN_FILE [--id ID ...]")
    files.write_atomic(path, head + "\n" + "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                  for r in records))


def table(found: list[Mode], served: int, flagged: int) -> str:
    """A markdown summary: one row per mode with its size and an example question; the
    counts line alone when there is no mode (a table of no rows is only its header)."""
    lines = [f"{served} traces read, {flagged} flagged, {len(found)} failure modes"]
    if not found:
        return lines[0]
    lines += ["", "| mode | reason | traces | commonest terms | example question |",
              "|---|---|---|---|---|"]
    for m in found:
        example = " ".join(m.members[0].question.split())[:70].replace("|", "\\|")
        lines.append(f"| {m.name} | {m.reason} | {len(m.members)} | {m.label} | {example} |")
    return "\n".join(lines)
