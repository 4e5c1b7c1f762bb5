"""Stages planted by tests through a config ``_target_`` (tests/ is on sys.path under pytest)."""

from __future__ import annotations

from ragexp.records import Ranking, ordered


class ReverseReranker:
    """Reverses the order of the head (``top_n``) of every ranking: a planted regression."""

    name = "reverse"

    def __init__(self, name: str = "reverse", top_n: int = 20):
        self.top_n = top_n

    def rerank(self, queries: dict[str, str], ranking: Ranking, resources) -> Ranking:
        out = {}
        for qid, scores in ranking.items():
            items = ordered(scores)
            head, tail = items[: self.top_n], items[self.top_n:]
            out[qid] = {item: float(len(items) - pos)
                        for pos, item in enumerate([*reversed(head), *tail])}
        return out
