"""``chunking=semantic``: a chunk ends where the meaning of the text changes.

The method is Greg Kamradt's ("5 Levels of Text Splitting", 2023, level 4; what LangChain's
``SemanticChunker`` implements). Each sentence (``sentence_chunking.sentence_units``) is
embedded together with ``buffer`` sentences on either side of it in its section, by the run's
own embedder. For adjacent sentences ``i`` and ``i + 1`` of one section::

    d_i = 1 - cos(e_i, e_{i+1})

and a boundary falls after sentence ``i`` when ``d_i > P_p(D)``, the ``breakpoint_percentile``
-th percentile (numpy's linear interpolation, as Kamradt computes it) of every such distance in
the document: the similarity of neighbours falls below its ``(100 - p)``-th percentile. Sizes
bound it: a chunk is not closed at a boundary before it holds ``min_words`` words, and is closed
before a sentence that would take it past ``max_words``; a section's end always closes it (a
BEIR passage is one section). A sentence longer than ``max_words`` splits at word boundaries
(``chunking.fit``). Chunks keep exact source offsets, as every ragexp chunker does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np

from ragexp import settings
from ragexp.index.cache import EmbeddingCache
from ragexp.records import Chunk, Document
from ragexp.stages.chunking import Unit, fit, numbered_sections
from ragexp.stages.sentence_chunking import make_chunk, sentence_units


def neighbour_distances(vectors: np.ndarray) -> np.ndarray:
    """(n - 1,) float64: ``1 - cos`` of each row of ``vectors`` (n, dim; rows L2-normalised or
    zero) with the next one. A zero row is at distance 1 from everything."""
    v = np.asarray(vectors, dtype=np.float64)
    return 1.0 - np.einsum("ij,ij->i", v[:-1], v[1:])


def boundaries(distances: list[np.ndarray], percentile: float) -> list[np.ndarray]:
    """For each section's distances (one document), bool arrays: True after sentence ``i`` when
    ``d_i`` exceeds the ``percentile``-th percentile of all the document's distances."""
    pooled = np.concatenate(distances) if distances else np.zeros(0)
    if not len(pooled):
        return [np.zeros(0, dtype=bool) for _ in distances]
    threshold = np.percentile(pooled, percentile)
    return [d > threshold for d in distances]


def segment(units: list[Unit], cut: np.ndarray, min_words: int, max_words: int) -> list[list[Unit]]:
    """A section's ``units`` grouped into chunks: closed at a boundary (``cut[i - 1]``: between
    units ``i - 1`` and ``i``) once a chunk holds ``min_words`` words, and before a unit that
    would take it past ``max_words``."""
    out, start, words = [], 0, 0
    for i, u in enumerate(units):
        if i > start and (words + u.words > max_words or (cut[i - 1] and words >= min_words)):
            out.append(units[start:i])
            start, words = i, 0
        words += u.words
    if units:
        out.append(units[start:])
    return out


def chunk_words(ch, at: str) -> list[str]:
    """A semantic chunker's (or its config ``ch``'s at key ``at``) ``min_words`` is at most its
    ``max_words``."""
    return settings.ordered(f"{at}.min_words", ch.min_words, f"{at}.max_words", ch.max_words,
                            strict=False)


min_below_max_words = settings.rule_for("chunking", ("min_words", "max_words"), chunk_words)


@dataclass(frozen=True, repr=False)
class SemanticChunker:
    """Kamradt's semantic chunking (module docstring). ``embedder`` is the run's embedder
    config (``${embedder}``: a ``_target_`` and its fields), built on first use, so chunks
    stored for the same settings load without a model; sentence vectors go through the
    embedding cache under ``cache_dir``. The embedder's settings are part of this chunker's
    ``repr``, hence of the chunks' stage key; no ``cache_dir`` is, its own or the embedder's
    (where vectors and models are kept changes no chunk).

    Raises ``InvalidValue`` for ``breakpoint_percentile`` outside [0, 100], ``min_words < 0``,
    ``max_words < 10``, ``min_words > max_words`` or ``buffer < 0``."""

    # the chunker builds the embedder itself, only when it chunks, from a plain, resolved copy
    # of its config
    HYDRA_KEYS: ClassVar[dict[str, Any]] = {"_recursive_": False, "_convert_": "all"}

    embedder: dict[str, Any]  # the run's embedder config (``config.schema``: ``${embedder}``)
    # boundary where 1 - cos(neighbours) exceeds this percentile of the document's distances
    breakpoint_percentile: float = field(default=95.0, metadata={"ge": 0, "le": 100})
    min_words: int = field(default=40, metadata={"ge": 0})  # no boundary before this many words
    max_words: int = field(default=160, metadata={"ge": 10})  # always a boundary before more
    buffer: int = field(default=1, metadata={"ge": 0})  # sentences either side, embedded along
    include_headings: bool = True
    # sentence vectors go to the embedding cache under it
    cache_dir: str = field(default=".cache/ragexp", repr=False, compare=False,
                           metadata={"interpolate": "${cache_dir}"})
    name: str = "semantic"

    def __post_init__(self) -> None:
        settings.check(self, "chunking", chunk_words(self, "chunking"))

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        plan = [(doc, [(heading, fit(sentence_units(doc.text, units), doc.text, self.max_words,
                                     self.max_words), repeat)
                       for heading, units, repeat in numbered_sections(doc)])
                for doc in docs]
        texts = [self._context(units, i) for _, sections in plan for _, units, _ in sections
                 for i in range(len(units))]
        vectors, row = self._embed(texts), 0
        chunks: list[Chunk] = []
        for doc, sections in plan:
            distances = []
            for _, units, _ in sections:
                distances.append(neighbour_distances(vectors[row:row + len(units)]))
                row += len(units)
            n = 0
            for (heading, units, repeat), cut in zip(
                    sections, boundaries(distances, self.breakpoint_percentile)):
                for group in segment(units, cut, self.min_words, self.max_words):
                    chunks.append(make_chunk(doc, n, heading, group, self.include_headings,
                                             repeat))
                    n += 1
        return chunks

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        shown["embedder"] = {k: v for k, v in self.embedder.items() if k != "cache_dir"}
        return f"SemanticChunker({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def _context(self, units: list[Unit], i: int) -> str:
        """Sentence ``i`` with ``buffer`` sentences either side (Kamradt's combined sentence)."""
        return " ".join(u.text for u in units[max(0, i - self.buffer):i + self.buffer + 1])

    def _embed(self, texts: list[str]) -> np.ndarray:
        # defer heavy import
        from hydra.utils import instantiate

        embedder = instantiate(self.embedder)
        cache = EmbeddingCache(root=str(Path(self.cache_dir) / "embeddings"))
        return cache.embed(embedder, texts, "passage", progress=False)
