"""Every chunk's analysed terms, stored compactly: one int32 term id per token plus offsets.

A list of Python strings per chunk costs about 60 bytes a token (a million 50-word passages:
about 3 GB); this costs 4 (plus the vocabulary once), pickles in one piece for the stage store,
and still reads as a sequence of term lists: ``tokens[i]`` is chunk i's terms, in order.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Callable, Iterable

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.text.analysis import tokenize


class TokenMatrix(Sequence):
    """``len(t)`` chunks; ``t[i]`` -> list[str] of chunk i's terms (``text.tokenize`` order)."""

    def __init__(self, vocab: list[str], ids: np.ndarray, offsets: np.ndarray):
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise InvalidValue("offsets must start at 0 and end at len(ids)")
        self.vocab, self.ids, self.offsets = vocab, ids, offsets

    @classmethod
    def build(cls, texts: Iterable[str],
              analyse: Callable[[str], list[str]] = tokenize) -> "TokenMatrix":
        index: dict[str, int] = {}
        ids, offsets = array("i"), array("q", [0])
        for text in texts:
            ids.extend(index.setdefault(t, len(index)) for t in analyse(text))
            offsets.append(len(ids))
        return cls(list(index), np.frombuffer(ids, dtype=np.int32) if ids else
                   np.zeros(0, np.int32), np.frombuffer(offsets, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        vocab = self.vocab
        return [vocab[j] for j in self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()]

    def lengths(self) -> np.ndarray:
        """(len(self),) int64: each chunk's number of terms."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.offsets.nbytes
