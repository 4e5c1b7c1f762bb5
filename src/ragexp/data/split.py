"""Dev and test questions: choose a configuration on dev, confirm it on test. Pure.

A configuration picked as the best of many on some questions is flattered on those questions:
part of its lead is luck that will not repeat (the winner's curse). So a sweep selects on
``dev`` and the choice is confirmed on ``test`` questions no selection has seen
(``ragexp confirm``).

Split rule, stratified by question source and kind and the same in every process and on every
machine: within each (source, kind), questions are ordered by ``sha256(f"{seed}:{kind}:{id}")``
and the first ``floor(test_share * n + 0.5)`` go to ``test``, the rest to ``dev``; questions of
a source and kind with the same text (``same_text_key``) count as one, the one whose id sorts
first, and go where it goes. Adding a question moves no other question between splits unless it
lands at the cut of its own source and kind; adding a generated set whose kinds are the
hand-written ones (``structure``) moves no hand-written question (within one source the rule is
the kind-stratified split it always was, so no earlier split changes).

Which questions a run scores (config key ``split``, default ``auto``; ``effective``): a dataset
with a split of its own (its config names one, as BEIR's ``dataset.split`` does) is scored
whole, so its numbers compare with published ones; questions without one (your own, the
handbook's) are seen through ragexp's split above, ``dev`` by default. ``dev``, ``test`` and
``all`` ask for one explicitly. The run's first log line says what was chosen (``rule``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Iterable

from ragexp.data.readers import DataError
from ragexp.errors import InvalidValue, counted
from ragexp.records import Chunk, Document, Qrels, Query

SPLITS = ("dev", "test", "all")
SEED, TEST_SHARE = 0, 0.5  # the run config's defaults (split_seed, split_test_share)
AUTO = "auto"


def effective(split: str, own_split: str | None) -> str:
    """The split a run scores: ``split`` itself unless it is ``auto``; then ``all`` for a
    dataset with a split of its own (``own_split``, e.g. BEIR's ``dataset.split``; None when it
    has none) and ``dev`` for questions without one. Raises ``InvalidValue`` for any other
    name."""
    if split not in (*SPLITS, AUTO):
        raise InvalidValue(f"split must be one of {', '.join((AUTO, *SPLITS))}, got {split!r}")
    if split != AUTO:
        return split
    return "all" if own_split else "dev"


def rule(requested: str, chosen: str, own_split: str | None, scored: int, total: int,
         seed: int, test_share: float) -> str:
    """The run's first line on its questions: ``scoring N of M questions: rule ...``, naming
    the rule that chose them (``effective``)."""
    how = f"split={requested}" + (f" -> {chosen}" if requested == AUTO else "")
    if chosen == "all":
        why = (f"the dataset's own split (dataset.split={own_split}) scored whole, comparable "
               f"with published results" if own_split else "every question")
    else:
        why = (f"ragexp's seeded dev/test split (seed {seed}, test share {test_share}, "
               f"stratified by source and kind): choose on dev, confirm on test")
    return f"scoring {scored} of {counted(total, 'question')}: rule {how}, {why}"


def _digest(seed: int, kind: str, qid: str) -> str:
    return hashlib.sha256(f"{seed}:{kind}:{qid}".encode()).hexdigest()


def same_text_key(text: str) -> str:
    """What makes two questions the same question: their text, whitespace runs collapsed and
    case folded."""
    return " ".join(text.split()).casefold()


def assign(queries: Iterable[Query], seed: int, test_share: float = 0.5) -> dict[str, str]:
    """``{question id: "dev" | "test"}`` by the module's rule. Questions of one source and kind and
    the same text (``same_text_key``) go to one side as one question, the one of them whose id sorts
    first, so a copy never confirms on test what was chosen on its twin in dev; a set without
    such copies is split exactly as the rule says, and no set depends on its order. Raises
    ``ValueError`` for a share outside [0, 1]."""
    if not 0 <= test_share <= 1:
        raise InvalidValue(f"split_test_share must be in [0, 1], got {test_share}")
    copies: dict[tuple[str, str, str], list[str]] = {}  # (source, kind, text) -> question ids
    for q in queries:  # a question without text (none reaches a run) is a copy of none
        key = (q.source, q.kind, same_text_key(q.text) or f"\0{q.qid}")
        copies.setdefault(key, []).append(q.qid)
    strata: dict[tuple[str, str], list[list[str]]] = {}
    for (source, kind, _), qids in copies.items():
        strata.setdefault((source, kind), []).append(sorted(qids))
    out: dict[str, str] = {}
    for (_, kind), groups in strata.items():
        ranked = sorted(groups, key=lambda g: _digest(seed, kind, g[0]))
        n_test = math.floor(test_share * len(ranked) + 0.5)
        out.update({qid: "test" if i < n_test else "dev"
                    for i, group in enumerate(ranked) for qid in group})
    return out


class EmptySplit(DataError, InvalidValue):
    """A split that holds no question to score: the set is too small for ragexp's dev/test
    split. A data error: the run stops with its one line and exit status 2."""


def too_small(queries: list[Query], side: str, seed: int, test_share: float) -> str | None:
    """Why ``side`` (``dev`` or ``test``) of ragexp's split (``assign``) holds no answerable
    question of ``queries`` (so no run on it scores any measure), with the fix; None when it
    holds one. Used by ``ragexp questions check`` (a warning) and :class:`SplitDataset` (the
    error)."""
    assigned = assign(queries, seed, test_share)
    if any(q.answerable and assigned[q.qid] == side for q in queries):
        return None
    n = sum(assigned[q.qid] == side for q in queries)
    return (f"split {side!r} (seed {seed}, test share {test_share}) holds {n} of the "
            f"{counted(len(queries), 'question')} and no answerable one: each kind puts "
            f"floor({test_share} x its questions + 0.5) in test (a kind of one question: that "
            f"one), the rest in dev; score every question with split=all (nothing is then held "
            f"out for ragexp confirm), or add questions")


def kinds_without(queries: list[Query], side: str, seed: int, test_share: float
                  ) -> dict[str, int]:
    """``{kind: its questions}`` for each kind of ``queries`` that ragexp's split (``assign``)
    leaves without a question on ``side``: a kind of one question has it in test, so a run on
    dev logs no measure of that kind. Kinds in order of first appearance."""
    assigned = assign(queries, seed, test_share)
    counts: dict[str, int] = {}
    on_side: set[str] = set()
    for q in queries:
        counts[q.kind] = counts.get(q.kind, 0) + 1
        if assigned[q.qid] == side:
            on_side.add(q.kind)
    return {k: n for k, n in counts.items() if k not in on_side}


@dataclass
class SplitDataset:
    """A dataset seen through one split: the same documents, only that split's questions and
    their judgements. Every other attribute (``name``, ``unit``, ...) is the wrapped dataset's."""

    inner: object
    split: str
    seed: int
    test_share: float = 0.5

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise InvalidValue(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        queries = self.inner.queries()
        side = assign(queries, self.seed, self.test_share)
        self._queries = [q for q in queries if self.split == "all" or side[q.qid] == self.split]
        if not self._queries:
            raise EmptySplit(f"{self.inner.name!r}: scoring 0 of {counted(len(queries), 'question')}: "
                             + too_small(queries, self.split, self.seed, self.test_share))
        self._ids = {q.qid for q in self._queries}

    def __getattr__(self, attr: str):  # only called for attributes not found on the wrapper
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def documents(self) -> list[Document]:
        return self.inner.documents()

    def queries(self) -> list[Query]:
        return list(self._queries)

    def qrels(self, chunks: list[Chunk]) -> Qrels:
        return {q: rel for q, rel in self.inner.qrels(chunks).items() if q in self._ids}

    def fingerprint(self) -> dict[str, str]:
        return self.inner.fingerprint()


def select(dataset, split: str, seed: int, test_share: float = 0.5):
    """``dataset`` unchanged for ``split="all"``, else seen through ``split``."""
    if split == "all":
        return dataset
    return SplitDataset(dataset, split, seed, test_share)
