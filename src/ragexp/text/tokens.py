"""Every chunk's analysed terms, stored compactly: one int32 term id per token plus offsets.

A list of Python strings per chunk costs about 60 bytes a token (a million 50-word passages:
about 3 GB); this costs 4 (plus the vocabulary once), pickles in one piece for the stage store,
and still reads as a sequence of term lists: ``tokens[i]`` is chunk i's terms, in order.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain, count
from typing import Callable, Iterable, Iterator

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.text.analysis import pieces, terms_of_pieces, tokenize

_BLOCK = 1 << 20  # piece occurrences expanded into term ids at a time (~30 MB of temporaries)


class _Ids(dict):
    """key -> id; a key never seen gets the next number of ``counter`` (which several such
    dictionaries may share), so ids follow first appearance."""

    def __init__(self, counter: Iterator[int]):
        super().__init__()
        self.counter = counter

    def __missing__(self, key: str) -> int:
        self[key] = i = next(self.counter)
        return i


class TokenMatrix(Sequence):
    """``len(t)`` chunks; ``t[i]`` -> list[str] of chunk i's terms (``text.tokenize`` order)."""

    def __init__(self, vocab: list[str], ids: np.ndarray, offsets: np.ndarray):
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise InvalidValue("offsets must start at 0 and end at len(ids)")
        self.vocab, self.ids, self.offsets = vocab, ids, offsets

    @classmethod
    def build(cls, texts: Iterable[str],
              analyse: Callable[[str], list[str]] = tokenize) -> "TokenMatrix":
        """Analyse ``texts`` (``analyse``: one text -> its terms) into one matrix whose
        vocabulary is in order of first appearance.

        With the default ``text.tokenize``, a text is read as its whitespace-separated pieces
        of normalised text (``text.pieces``), each occurrence mapped to a piece id by one
        dictionary lookup done in C; each distinct piece is then analysed once
        (``text.terms_of_pieces``) and the piece ids expanded into term ids by array operations.
        The terms are ``tokenize``'s, bit for bit, and so is the vocabulary's order: a term
        first appears in the first piece holding it (``tests/unit/test_token_matrix.py``). While
        building, each distinct piece is held once (about 100 bytes with its id) on top of
        4 bytes a piece occurrence. Any other ``analyse`` (term lists given as they are:
        ``analyse=lambda terms: terms``) is called once per text."""
        if analyse is not tokenize:
            term_ids = _Ids(count())
            ids, offsets = array("i"), array("q", [0])
            for text in texts:
                ids.extend(map(term_ids.__getitem__, analyse(text)))
                offsets.append(len(ids))
            return cls(list(term_ids), np.frombuffer(ids, dtype=np.int32) if ids else
                       np.zeros(0, np.int32), np.frombuffer(offsets, dtype=np.int64))
        counter = count()
        by_rule = {True: _Ids(counter), False: _Ids(counter)}  # ASCII rule or general rule
        found, ends = array("i"), array("q", [0])
        for text in texts:
            split, ascii = pieces(text)
            found.extend(map(by_rule[ascii].__getitem__, split))
            ends.append(len(found))
        terms: list = [None] * sum(map(len, by_rule.values()))  # each distinct piece's
        for ascii, known in by_rule.items():
            for i, found_terms in zip(known.values(), terms_of_pieces(list(known), ascii)):
                terms[i] = found_terms
        del by_rule
        term_ids = _Ids(count())
        flat = array("i", map(term_ids.__getitem__, chain.from_iterable(terms)))
        length = np.fromiter(map(len, terms), dtype=np.int64, count=len(terms))
        del terms
        ids, offsets = _expand(np.frombuffer(found, dtype=np.int32) if found else
                               np.zeros(0, np.int32), np.frombuffer(ends, dtype=np.int64),
                               length, np.frombuffer(flat, dtype=np.int32) if flat else
                               np.zeros(0, np.int32))
        return cls(list(term_ids), ids, offsets)

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


def _expand(found: np.ndarray, ends: np.ndarray, length: np.ndarray,
            flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Term ids of every piece occurrence, and each text's offsets into them.

    ``found`` (n_occurrences,) piece ids; ``ends`` (n_texts + 1,) each text's end in
    ``found`` (``ends[0] = 0``); piece p's terms are ``flat[start[p]:start[p] + length[p]]``,
    ``start`` the exclusive cumulative sum of ``length``. Worked ``_BLOCK`` occurrences at a
    time, so temporaries stay bounded whatever the corpus."""
    start = np.cumsum(length) - length
    total = sum(int(length[found[lo:lo + _BLOCK]].sum()) for lo in range(0, len(found), _BLOCK))
    ids = np.empty(total, dtype=np.int32)
    offsets = np.zeros(len(ends), dtype=np.int64)
    base = 0
    for lo in range(0, len(found), _BLOCK):
        p = found[lo:lo + _BLOCK]
        n = length[p]
        upto = np.cumsum(n)
        here = slice(np.searchsorted(ends, lo, "right"),
                     np.searchsorted(ends, lo + len(p), "right"))
        offsets[here] = base + upto[ends[here] - lo - 1]
        # occurrence j's terms: flat[start[p_j] + 0 .. n_j - 1], laid end to end
        ids[base:base + upto[-1]] = flat[np.repeat(start[p] - (upto - n), n)
                                         + np.arange(upto[-1])]
        base += int(upto[-1])
    return ids, offsets
