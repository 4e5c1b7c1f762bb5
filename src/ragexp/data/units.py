"""Scoring units: what a ranking is judged as, independent of what the labels name.

``chunk`` (the retrievable unit itself), ``section`` (a chunk's section of its document: its
heading path, and which of the sections under that path it is) or ``document``. A chunk
ranking becomes a unit ranking by each unit's best chunk (MaxP, ``docrank.rank_documents``),
retrieved deep enough to fill ``k`` distinct units. A unit is judged by the relevance rule
itself (``relevance.is_relevant``) on the source text of all its chunks, merged
(``unit_chunks``), so its judgements do not depend on how it was chunked (labels at quote,
section or document level all reach every unit).
"""

from __future__ import annotations

import hashlib
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
    """``doc#Heading-path/Sub-heading``: whitespace-free (TREC files split on whitespace). A
    section under a heading path that an earlier section of its document also has (its
    ``repeat``, from the document's structure: ``chunking.numbered_sections``) takes ``@`` and
    its ordinal, ``guide.md#Setup@2``, so it is a unit of its own under every chunking. Not
    one-to-one: a title holding ``/``, ``-`` or ``@`` can give another path's id
    (``section_ids`` tells them apart)."""
    path = "/".join(re.sub(r"\s+", "-", p.strip()) for p in chunk.heading.split(" > "))
    return f"{chunk.doc_id}#{path}" + (f"@{chunk.repeat + 1}" if chunk.repeat else "")


def section_ids(chunks: list[Chunk]) -> dict[str, str]:
    """``{chunk_id: section id}``, one id per section of a document (heading path and repeat):
    ``section_id``, except where two sections of one document give the same id (a top-level
    ``Install/Upgrade`` beside ``Install > Upgrade``; ``Cold storage`` beside ``Cold-storage``;
    a heading ``Setup@2`` beside a second ``Setup``), which made two sections one unit. Then
    every section but the one the id reads as (the first under the path the id spells, ``/``
    between titles, ``-`` for a space) takes ``~`` and 6 hex digits of a sha256 of its path
    (and repeat, after the first): ``guide.md#Install/Upgrade~3f2a9c``. Ids of sections that
    collide with none are as ``section_id`` gives them."""
    by_key = {(c.doc_id, c.heading, c.repeat): section_id(c) for c in chunks}
    keys_of: dict[str, list[tuple]] = {}
    for key, sid in by_key.items():
        keys_of.setdefault(sid, []).append(key)
    for (doc, heading, repeat), sid in by_key.items():
        if (len(keys_of[sid]) > 1
                and (repeat or heading != _read_as(sid[len(doc) + 1:]))):
            named = heading if not repeat else f"{heading}\0{repeat}"
            digest = hashlib.sha256(named.encode()).hexdigest()[:6]
            by_key[(doc, heading, repeat)] = f"{sid}~{digest}"
    return {c.chunk_id: by_key[(c.doc_id, c.heading, c.repeat)] for c in chunks}


def _read_as(path: str) -> str:
    """The heading path a section id's path reads as: titles between ``/``, ``-`` a space."""
    return " > ".join(t.replace("-", " ") for t in path.split("/"))


def unit_of(chunks: list[Chunk], unit: str) -> dict[str, str]:
    """``{chunk_id: unit id}`` for every chunk (sections: ``section_ids``)."""
    check_unit(unit)
    if unit == "chunk":
        return {c.chunk_id: c.chunk_id for c in chunks}
    if unit == "document":
        return {c.chunk_id: c.doc_id for c in chunks}
    return section_ids(chunks)


def unit_chunks(chunks: list[Chunk], unit: str) -> list[Chunk]:
    """One ``Chunk`` per unit (``chunk_id`` the unit id, no text) whose ``spans`` are the source
    ranges of all the unit's chunks, merged (sorted; overlapping or touching ranges made one),
    in the order units first appear: what a unit is judged on. Lifting chunk judgements instead
    (a unit relevant when any chunk is) made a section's labels move with the chunk size: a
    15-word chunk holding half of itself from a quote made its section relevant, where the
    section as one chunk was not (R@1 0.75 at max_words=15, 0.8125 at 120, same ranking)."""
    if unit == "chunk":
        return list(chunks)
    mapping = unit_of(chunks, unit)
    ranges: dict[str, tuple[str, list[tuple[int, int]]]] = {}
    for c in chunks:
        ranges.setdefault(mapping[c.chunk_id], (c.doc_id, []))[1].extend(c.spans)
    return [Chunk(u, doc, "", spans=_merged(spans)) for u, (doc, spans) in ranges.items()]


def _merged(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)
