"""Scoring units: what a ranking is judged as, independent of what the labels name.

``chunk`` (the retrievable unit itself), ``section`` (a chunk's heading path within its
document) or ``document``. A chunk ranking becomes a unit ranking by each unit's best chunk
(MaxP, ``docrank.rank_documents``), retrieved deep enough to fill ``k`` distinct units; chunk
judgements become unit judgements by the best grade of the unit's chunks, so a unit is relevant
when any of its chunks is (labels at quote, section or document level all reach every unit).
"""

from __future__ import annotations

import re

from ragexp.errors import InvalidValue
from ragexp.records import Chunk, Qrels

UNITS = ("chunk", "section", "document")


def check_unit(unit: str, key: str = "dataset.unit") -> str:
    """Return ``unit``; ``ValueError`` naming ``key`` and the choices when it is not one."""
    if unit not in UNITS:
        raise InvalidValue(f"{key}={unit!r} is not a scoring unit; choose one of {', '.join(UNITS)}")
    return unit


def section_id(chunk: Chunk) -> str:
    """``doc#Heading-path/Sub-heading``: whitespace-free (TREC files split on whitespace). Two
    sections with the same heading path in one document are one unit."""
    path = "/".join(re.sub(r"\s+", "-", p.strip()) for p in chunk.heading.split(" > "))
    return f"{chunk.doc_id}#{path}"


def unit_of(chunks: list[Chunk], unit: str) -> dict[str, str]:
    """``{chunk_id: unit id}`` for every chunk."""
    check_unit(unit)
    if unit == "chunk":
        return {c.chunk_id: c.chunk_id for c in chunks}
    if unit == "document":
        return {c.chunk_id: c.doc_id for c in chunks}
    return {c.chunk_id: section_id(c) for c in chunks}


def lift_qrels(qrels: Qrels, mapping: dict[str, str]) -> Qrels:
    """Chunk judgements -> unit judgements: each unit takes the best grade of its chunks."""
    out: Qrels = {}
    for qid, rel in qrels.items():
        lifted: dict[str, int] = {}
        for item, grade in rel.items():
            u = mapping[item]
            lifted[u] = max(grade, lifted.get(u, grade))
        out[qid] = lifted
    return out
