"""``chunking=parent_child``: small child chunks are retrieved; the answerer reads their parent.

The children come from any section-keeping chunker (``children``, by default
``MarkdownChunker`` with 40-word windows); a child's parent is its section: every unit under
its heading path in its document (``chunking.numbered_sections``; two sections with the same
path in one document are two parents, as they are two ``section`` units in ``data.units``; a
BEIR passage is one section, so its parent is the whole passage).

What is measured (docs/measuring.md, "Chunking strategies"): what the answerer is given.
The retriever scores children; each parent scores as its best child (MaxP, as a section or a
document does in ``data.units``), and the parents are the run's chunks for judging: the span
rule (``data.relevance``) decides whether a parent holds a question's evidence, so
``dataset.unit=chunk`` ranks parents, ``section`` is the same ranking (a parent is a section)
and ``document`` rolls the parents up by document. Citations name parents, and the answer
metrics judge those.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Protocol, runtime_checkable

from ragexp import settings
from ragexp.data.units import section_ids, unit_of
from ragexp.index.embedders import TokenCounter
from ragexp.records import Chunk, Document
from ragexp.stages.chunking import (WINDOW_KEYS, Chunker, MarkdownChunker, TokenSized,
                                    heading_line, numbered_sections, window_overlaps)


@runtime_checkable
class ParentChunker(Protocol):
    """A chunker whose chunks are read, at answer time, through a larger parent chunk."""

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]: ...

    def parents(self, docs: Iterable[Document], chunks: list[Chunk]) -> dict[str, Chunk]: ...


def section_parents(docs: Iterable[Document],
                    include_headings: bool = True) -> dict[tuple[str, str, int], Chunk]:
    """``{(doc id, heading path, repeat): parent chunk}`` for every section of ``docs``
    (``chunking.numbered_sections``): its id is the section's unit id (``units.section_ids``
    over every section of its document), its text the heading path (when
    ``include_headings``) and then the section's source text, its spans the exact source
    range of that text."""
    drafts = []
    for doc in docs:
        for heading, units, repeat in numbered_sections(doc):
            start, end = units[0].start, units[-1].end
            drafts.append(Chunk(f"{len(drafts)}", doc.doc_id,
                                heading_line(heading, include_headings) + doc.text[start:end],
                                heading, ((start, end),), repeat))
    ids = section_ids(drafts)
    return {(c.doc_id, c.heading, c.repeat): replace(c, chunk_id=ids[c.chunk_id])
            for c in drafts}


# chunking=parent_child's markdown children
children_overlap_below_window = settings.rule_for("chunking.children", WINDOW_KEYS,
                                                  window_overlaps)


@dataclass(frozen=True)
class ParentChildChunker:
    """Chunks are ``children``'s; ``parents`` maps each to its section (module docstring).
    ``include_headings`` prepends the heading path to a parent's text. Children sized in the
    embedder's tokens (``chunking.children.max_tokens``) get its tokenizer through this
    chunker (``TokenSized``)."""

    # the retrieved children; the answerer reads their section (the parent)
    children: Chunker = MarkdownChunker(max_words=40, overlap_words=10)
    include_headings: bool = True  # the parent's text starts with its heading path
    name: str = "parent_child"

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        return self.children.chunk(docs)

    @property
    def needs_tokenizer(self) -> bool:
        return isinstance(self.children, TokenSized) and self.children.needs_tokenizer

    def with_tokenizer(self, tokens: TokenCounter | None) -> ParentChildChunker:
        """This chunker with children sizing in ``tokens`` (what ``children.with_tokenizer``
        raises for None)."""
        return replace(self, children=self.children.with_tokenizer(tokens))

    def parents(self, docs: Iterable[Document], chunks: list[Chunk]) -> dict[str, Chunk]:
        """``{child chunk id: parent chunk}`` for every chunk of ``chunks`` (``chunk(docs)``).
        A child whose section is not one of ``docs``' (a child chunker that does not keep to
        sections) is its own parent."""
        by_section = section_parents(docs, self.include_headings)
        return {c.chunk_id: by_section.get((c.doc_id, c.heading, c.repeat), c) for c in chunks}


def read_through(chunks: list[Chunk], parent_of: dict[str, Chunk]) -> list[Chunk]:
    """What the answerer reads for ``chunks`` (best first): each one's parent (itself when
    ``parent_of`` has none), in order of each parent's best child, each parent once."""
    out: dict[str, Chunk] = {}
    for c in chunks:
        parent = parent_of.get(c.chunk_id, c)
        out.setdefault(parent.chunk_id, parent)
    return list(out.values())


def answer_context(chunker: Chunker, docs: Iterable[Document],
                   chunks: list[Chunk]) -> dict[str, Chunk]:
    """``{chunk id: the chunk the answerer reads for it}``: a ``ParentChunker``'s parents; empty
    for any other chunker, whose chunks are read as they are."""
    return chunker.parents(docs, chunks) if isinstance(chunker, ParentChunker) else {}


def lift_ids(ids: set[str], parent_of: dict[str, Chunk]) -> set[str]:
    """The ids of the chunks the answerer reads for ``ids`` (each one's parent, else itself)."""
    return {parent_of[i].chunk_id if i in parent_of else i for i in ids}


def judged_chunks(chunks: list[Chunk], parent_of: dict[str, Chunk]) -> list[Chunk]:
    """The chunks a run judges: ``chunks`` themselves, or with parents (``answer_context``) each
    parent once, in order of its first child."""
    if not parent_of:
        return chunks
    return list({p.chunk_id: p for p in (parent_of[c.chunk_id] for c in chunks)}.values())


def unit_through(chunks: list[Chunk], parent_of: dict[str, Chunk],
                 unit_of_judged: dict[str, str]) -> dict[str, str]:
    """``{chunk id: unit id}`` of retrieved ``chunks`` when the judged chunks are their parents
    (``unit_of_judged``: ``{parent id: unit id}``); without parents, ``unit_of_judged`` itself."""
    if not parent_of:
        return unit_of_judged
    return {c.chunk_id: unit_of_judged[parent_of[c.chunk_id].chunk_id] for c in chunks}


def rolled_up_units(chunks: list[Chunk], parent_of: dict[str, Chunk],
                    unit: str) -> dict[str, str] | None:
    """``{chunk id: the unit its score rolls up to}`` when a run is judged above its chunks (the
    section or document ``unit``, or parents: ``answer_context``), else ``None`` (each chunk is
    its own unit). ``Resources.unit_of``: what a hybrid part's ``depth`` counts, in a run and
    when the run is served alike."""
    if unit == "chunk" and not parent_of:
        return None
    return unit_through(chunks, parent_of, unit_of(judged_chunks(chunks, parent_of), unit))
