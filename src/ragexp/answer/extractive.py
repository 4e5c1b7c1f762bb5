"""``answer=extractive`` (the default): sentences copied from the retrieved chunks, no model.

After :func:`ragexp.answer.base.refuse_early`, each sentence of the top ``n_chunks`` chunks is
scored by the idf-weighted share of the question's terms it holds,
``sum_{t in Q∩S} idf(t) / sum_{t in Q} idf(t)``; the best ``max_sentences`` scoring at least
``min_overlap`` are kept, each tagged ``[n]`` for its chunk, and passed through the shared
citation checker (:func:`ragexp.answer.base.finish`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ragexp.answer.base import Answer, AnswerInput, body, finish, refuse_early, sources_for
from ragexp.errors import InvalidValue
from ragexp.index.bm25 import BM25Index
from ragexp.text.analysis import split_sentences, tokenize, word_count


@dataclass(frozen=True)
class ExtractiveAnswerer:
    """The answer step's settings, as config (``answer.*``): they trade answer rate against
    refusals and citation precision, so they are swept like any other stage.

    Raises ValueError for ``n_chunks``/``max_sentences`` < 1 or ``min_overlap`` or
    ``min_support`` outside [0, 1].
    """

    n_chunks: int = 3
    max_sentences: int = 2
    min_overlap: float = 0.3
    min_support: float = 0.6
    name: str = "extractive"

    def __post_init__(self) -> None:
        if self.n_chunks < 1 or self.max_sentences < 1:
            raise InvalidValue("answer.n_chunks and answer.max_sentences must be >= 1, got "
                               f"{self.n_chunks} and {self.max_sentences}")
        for key in ("min_overlap", "min_support"):
            if not 0 <= getattr(self, key) <= 1:
                raise InvalidValue(f"answer.{key} must be in [0, 1], got {getattr(self, key)}")

    def answer(self, inputs: Sequence[AnswerInput], bm25: BM25Index,
               progress: bool = False) -> list[Answer]:
        return [self.answer_one(inp, bm25) for inp in inputs]

    def answer_one(self, inp: AnswerInput, bm25: BM25Index) -> Answer:
        sources = sources_for(inp, self.n_chunks)
        early = refuse_early(inp, sources)
        if early is not None:
            return early
        q_terms = set(tokenize(inp.question))
        candidates = []
        for src, chunk in zip(sources, inp.retrieved):
            for rank, line in enumerate(body(chunk).split("\n")):
                for sentence in split_sentences(line):
                    score = bm25.coverage(q_terms, set(tokenize(sentence)))
                    if score >= self.min_overlap and word_count(sentence) >= 3:
                        candidates.append((score, -src.n, -rank, f"{sentence} [{src.n}]"))
        picked = [c[3] for c in sorted(candidates, reverse=True)[:self.max_sentences]]
        return finish(inp, picked, sources, bm25, self.min_support,
                      "no retrieved sentence covers enough of the question, or none kept a "
                      "valid citation")
