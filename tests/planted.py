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


class ReversedRetriever:
    """Wraps a retriever and reverses the order of what it returns: a planted regression."""

    def __init__(self, inner):
        self.inner = inner

    def search(self, queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
        out = {}
        for qid, scores in self.inner.search(queries, k, cached).items():
            items = ordered(scores)
            out[qid] = {item: float(pos + 1) for pos, item in enumerate(items)}
        return out


class StrippedCitations:
    """Wraps an answerer and strips the ``[n]`` citations from the sentences it writes, before
    the citation checker sees them: a planted serving fault."""

    name = "stripped"

    def __init__(self, inner):
        self.inner = inner

    def answer(self, inputs, coverage, progress: bool = False):
        from ragexp.answer.base import claim_of, finish, sources_for

        out = []
        for inp, ans in zip(inputs, self.inner.answer(inputs, coverage)):
            if ans.refused:
                out.append(ans)
                continue
            sources = sources_for(inp, len(ans.sources))
            out.append(finish(inp, [claim_of(s) for s in ans.sentences], sources, coverage,
                              0.6, "every sentence lost its citation"))
        return out


class AlwaysRefuses:
    """An answerer that refuses every question, whatever its confidence: a planted fault."""

    name = "always_refuses"

    def answer(self, inputs, coverage, progress: bool = False):
        from ragexp.answer.base import REFUSAL, Answer, sources_for

        return [Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold,
                       sources=sources_for(inp, 3), reason="planted: always refuses")
                for inp in inputs]
