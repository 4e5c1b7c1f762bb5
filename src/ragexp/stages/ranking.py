"""A batch of questions ranked through a run's stages: the one path the runner (``run.pipeline``:
evaluation, latency measurement) and serving (``serving.Engine``) share.

``chunked``: the dataset chunked as its chunker reads it, or the chunks a stage store holds;
``rank``: retrieve deep enough for the reranker's head, rerank, cut to ``k``, in two halves
(``retrieve``, ``rerank_top``) that serving times as stages of its own."""

from __future__ import annotations

from dataclasses import replace

from ragexp.data.datasets import Dataset
from ragexp.errors import InvalidValue
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore, stage_key
from ragexp.records import Chunk, Ranking, ordered
from ragexp.stages.chunking import Chunker
from ragexp.stages.rerankers import Reranker
from ragexp.stages.retrievers import Retriever


def reading(chunker: Chunker, dataset: Dataset) -> Chunker:
    """``chunker`` as it reads ``dataset``'s documents: a whole-document chunker
    (``chunking=none``) told the documents are markdown unless the dataset is plain text
    (BEIR), so a markdown document's front matter is no chunk's text, as under the other
    chunkers (a trial: its YAML keys and values were indexed as words and outranked the
    relevant document). Every caller that chunks a dataset goes through it."""
    if getattr(chunker, "markdown", None) is False and not getattr(dataset, "plain_text", False):
        return replace(chunker, markdown=True)
    return chunker


def chunked(dataset: Dataset, chunker: Chunker, stages: StageStore,
            docs: list | None = None) -> tuple[list[Chunk], str]:
    """``(chunks, their stage key)``: the dataset's documents (``docs`` if already read)
    chunked, or the chunks an earlier job or run stored under the same key (data fingerprint +
    dataset type + chunker + ragexp code; see ``stagestore.py``)."""
    chunker = reading(chunker, dataset)
    key = stage_key("chunks", dataset.fingerprint() if stages.enabled else "",
                    type(dataset).__qualname__, getattr(dataset, "level", ""),
                    f"{type(chunker).__module__}.{chunker!r}")
    return stages.get("chunks", key, lambda: chunker.chunk(
        dataset.documents() if docs is None else docs)), key


def rank(retriever: Retriever, reranker: Reranker, resources: Resources,
         queries: dict[str, str], k: int, cached: bool = True) -> Ranking:
    """Retrieve deep enough for the reranker's head, rerank, keep the best ``k`` per query.
    The one ranking path shared by evaluation, latency measurement and serving. Raises
    ``ValueError`` for ``k < 1`` (``[:k]`` would silently drop items or keep none)."""
    found = retrieve(retriever, reranker, queries, k, cached)
    return rerank_top(reranker, resources, queries, found, k)


def retrieve(retriever: Retriever, reranker: Reranker, queries: dict[str, str], k: int,
             cached: bool = True) -> Ranking:
    """The first half of :func:`rank`: retrieve ``max(k, reranker.top_n)`` items per query (the
    reranker's whole head). Raises ``ValueError`` for ``k < 1``."""
    if k < 1:
        raise InvalidValue(f"k must be >= 1, got {k}")
    return retriever.search(queries, max(k, reranker.top_n), cached)


def rerank_top(reranker: Reranker, resources: Resources, queries: dict[str, str],
               found: Ranking, k: int) -> Ranking:
    """The second half of :func:`rank`: rerank ``found`` and keep the best ``k`` per query."""
    ranking = reranker.rerank(queries, found, resources.passages)
    return {q: {c: scores[c] for c in ordered(scores)[:k]} for q, scores in ranking.items()}
