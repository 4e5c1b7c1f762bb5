"""Rerankers: reorder the best ``top_n`` of a ranking; items below ``top_n`` keep their order.

Reranking is a hypothesis to measure: the ablation set runs the default with and without it.

- ``NoReranker``: identity.
- ``LexicalReranker``: for query Q and chunk C, with idf from the run's BM25 index::

      coverage(C)  = sum_{t in Q, t in C} idf(t) / sum_{t in Q} idf(t)
      proximity(C) = |Q ∩ C| / (1 + w),  w = the shortest window of C's terms that holds every
                     matched query term (0 when fewer than two terms match)
      score(C)     = coverage(C) + lambda * proximity(C) + eps * first_stage_rrf(C)

  the last term (eps = 1e-3, RRF with k=60 on the first-stage rank) breaks ties in favour of the
  first-stage order.
- ``CrossEncoderReranker``: fastembed ``TextCrossEncoder`` from a local model folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.index.resources import Passages
from ragexp.records import Ranking, ordered
from ragexp.text.analysis import tokenize


class Reranker(Protocol):
    name: str
    top_n: int  # how many of the first stage's items it rescores (0: none); retrieval goes
    #             at least this deep


    def rerank(self, queries: dict[str, str], ranking: Ranking, passages: Passages) -> Ranking:
        """``ranking`` with each query's best ``top_n`` rescored from ``passages`` (what it
        reads of the chunks: text, terms, BM25), the rest in their order below them."""
        ...


def _apply(ranking: Ranking, top_n: int, rescore) -> Ranking:
    """Rescore the head of each query's ranking with the reranker's scores; the tail follows
    in its original order, with scores stepping down by 1 below the lowest head score."""
    if top_n < 0:
        raise InvalidValue(f"reranker.top_n must be >= 0, got {top_n}")
    out: Ranking = {}
    for qid, scores in ranking.items():
        items = ordered(scores)
        head, tail = items[:top_n], items[top_n:]
        new = {item: float(v) for item, v in rescore(qid, head).items()}
        floor = min(new.values(), default=0.0)
        new.update({item: floor - pos for pos, item in enumerate(tail, start=1)})
        out[qid] = new
    return out


@dataclass(eq=False)
class NoReranker:
    """Identity: rescores nothing (``top_n`` is 0 whatever the config says)."""

    name: str = "none"
    top_n: int = field(default=0, metadata={"ge": 0})

    def __post_init__(self) -> None:
        self.name, self.top_n = "none", 0  # as before settings were fields: fixed

    def rerank(self, queries: dict[str, str], ranking: Ranking, passages: Passages) -> Ranking:
        return ranking


def shortest_window(positions: dict[str, list[int]]) -> int:
    """Length (in terms) of the shortest span holding one position of every key, minus one."""
    events = sorted((p, t) for t, ps in positions.items() for p in ps)
    need, have, best, left = len(positions), {}, None, 0
    for right, (pos, term) in enumerate(events):
        have[term] = have.get(term, 0) + 1
        while len(have) == need:
            lpos, lterm = events[left]
            best = pos - lpos if best is None else min(best, pos - lpos)
            have[lterm] -= 1
            if not have[lterm]:
                del have[lterm]
            left += 1
    return best or 0


@dataclass(eq=False)
class LexicalReranker:
    """Coverage, proximity and the first stage's order (module docstring); ``proximity_weight``
    is lambda."""

    top_n: int = field(default=20, metadata={"ge": 1})
    proximity_weight: float = field(default=0.2, metadata={"ge": 0})
    name: str = "lexical"

    def __post_init__(self) -> None:
        settings.check(self, "reranker")
        self.name = "lexical"  # fixed, as before settings were fields

    def score(self, query: str, text: str, bm25) -> float:
        return self.score_terms(set(tokenize(query)), tokenize(text), bm25)

    def score_terms(self, q_terms: set[str], chunk_terms: list[str], bm25) -> float:
        """``score`` on analysed terms: the query's as a set, the chunk's in order."""
        if not q_terms:
            return 0.0
        positions: dict[str, list[int]] = {}
        for pos, term in enumerate(chunk_terms):
            if term in q_terms:
                positions.setdefault(term, []).append(pos)
        coverage = bm25.coverage(q_terms, positions)
        proximity = len(positions) / (1 + shortest_window(positions)) if len(positions) > 1 else 0
        return coverage + self.proximity_weight * proximity

    def rerank(self, queries: dict[str, str], ranking: Ranking, passages: Passages) -> Ranking:
        terms, bm25 = passages.terms, passages.bm25()

        def rescore(qid: str, head: list[str]) -> dict[str, float]:
            q_terms = set(tokenize(queries[qid]))
            return {cid: self.score_terms(q_terms, terms(cid), bm25)
                    + 1e-3 / (60 + rank) for rank, cid in enumerate(head, start=1)}

        return _apply(ranking, self.top_n, rescore)


def model_file(path: str) -> list[str]:
    """A cross-encoder's ``model_path`` folder holds ``model.onnx``."""
    if (Path(str(path)).expanduser() / "model.onnx").is_file():
        return []
    return [f"reranker.model_path={path} has no model.onnx"]


@settings.cross_field_rule
def cross_encoder_folder(cfg) -> list[str]:
    """``model_file`` of ``reranker=cross_encoder``'s folder (a path that is no folder is the
    field's ``path`` check's; a missing one, ``validate``'s)."""
    reranker = cfg.get("reranker")
    if not hasattr(reranker, "keys") or reranker.get("name") != "cross_encoder":
        return []
    path = reranker.get("model_path")
    return model_file(path) if path and Path(str(path)).expanduser().is_dir() else []


@dataclass(eq=False)
class CrossEncoderReranker:
    """A cross-encoder run by fastembed from ``model_path`` (model.onnx, tokenizer files).
    Raises ``InvalidValue`` for ``top_n < 1``, no ``model_path``, no ``model.onnx`` there, or a
    model that does not load."""

    model_path: str | None = field(default=None, metadata={
        "path": "dir", "hint": "a local folder with a cross-encoder's model.onnx, tokenizer.json "
                               "and tokenizer_config.json (none can be downloaded here); or use "
                               "reranker=lexical / reranker=none"})
    top_n: int = field(default=20, metadata={"ge": 1})
    name: str = "cross_encoder"

    def __post_init__(self) -> None:
        settings.check(self, "reranker")
        self.name, model_path = "cross_encoder", self.model_path
        if not model_path:
            raise InvalidValue("reranker=cross_encoder needs reranker.model_path=DIR: a local folder "
                               "with a cross-encoder's model.onnx, tokenizer.json and "
                               "tokenizer_config.json (none can be downloaded here); or use "
                               "reranker=lexical / reranker=none")
        settings.refuse(model_file(model_path))
        folder = Path(model_path).expanduser()
        # defer heavy import
        from fastembed.common.model_description import ModelSource
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        name_ = f"ragexp/cross-encoder-{folder.name}"
        if name_ not in {m["model"] for m in TextCrossEncoder.list_supported_models()}:
            TextCrossEncoder.add_custom_model(model=name_, sources=ModelSource(hf=name_),
                                              model_file="model.onnx")
        try:
            self.model = TextCrossEncoder(name_, specific_model_path=str(folder))
        except Exception as exc:  # onnxruntime and fastembed raise their own types
            raise InvalidValue(f"reranker.model_path={folder}: its cross-encoder does not load "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
                               ) from exc

    def rerank(self, queries: dict[str, str], ranking: Ranking, passages: Passages) -> Ranking:
        by_id = passages.by_id

        def rescore(qid: str, head: list[str]) -> dict[str, float]:
            scores = self.model.rerank(queries[qid], [by_id[c].text for c in head])
            return dict(zip(head, map(float, scores)))

        return _apply(ranking, self.top_n, rescore)
