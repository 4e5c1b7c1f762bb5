"""The serving engine: a run's resolved configuration, rebuilt for answering questions.

The index is rebuilt at start-up from the run's config; passage vectors come from the shared
embedding cache, so a run that was evaluated on this machine starts without embedding again.
The refusal threshold is the run's measured operating point (``abstain.threshold``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ragexp import tracking
from ragexp.answer import Answer
from ragexp.cache import EmbeddingCache
from ragexp.records import ordered
from ragexp.pipeline import rank
from ragexp.resources import Resources

log = logging.getLogger(__name__)
MODEL_NAME = "ragexp-serving"
ALIAS = "champion"
MAX_QUESTION = 2000
MAX_K = 50


class ServingError(RuntimeError):
    pass


class BadQuestion(ValueError):
    """A question or parameter the engine will not take; ``status`` is the HTTP code for it."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def check_question(text: str, field: str = "question") -> str:
    if not text or not text.strip():
        raise BadQuestion(f"{field} must not be empty")
    if len(text) > MAX_QUESTION:
        raise BadQuestion(f"{field} is {len(text)} characters; the limit is {MAX_QUESTION}", 413)
    return text.strip()


def check_k(k: int) -> int:
    if not 1 <= k <= MAX_K:
        raise BadQuestion(f"k must be between 1 and {MAX_K}, got {k}")
    return k


@dataclass
class Hit:
    rank: int
    chunk_id: str
    doc_id: str
    heading: str
    score: float
    text: str


class Engine:
    def __init__(self, cfg: DictConfig, threshold: float, run_id: str = "local"):
        self.cfg, self.threshold, self.run_id = cfg, threshold, run_id
        docs = instantiate(cfg.dataset).documents()
        chunks = instantiate(cfg.chunking).chunk(docs)
        cache = EmbeddingCache(root=str(Path(cfg.cache_dir) / "embeddings"))
        self.resources = Resources(chunks, lambda: instantiate(cfg.embedder), cache,
                                   cfg.bm25.k1, cfg.bm25.b, progress=False,
                                   bm25_method=cfg.bm25.method, bm25_delta=cfg.bm25.delta)
        self.retriever = instantiate(cfg.retriever, _partial_=True)(resources=self.resources)
        self.reranker = instantiate(cfg.reranker)
        self.signal = instantiate(cfg.abstain.signal)
        self.answerer = instantiate(cfg.answer)
        self.resources.bm25  # fit now, not on the first request
        log.info("engine for run %s: %d chunks, cache hits %d misses %d", run_id, len(chunks),
                 cache.hits, cache.misses)

    def has_chunk(self, chunk_id: str) -> bool:
        return chunk_id in self.resources.position

    def _rank(self, question: str, k: int) -> dict[str, float]:
        return rank(self.retriever, self.reranker, self.resources, {"q": question}, k)["q"]

    def search(self, question: str, k: int = 5) -> list[Hit]:
        scores = self._rank(question, k)
        chunks, pos = self.resources.chunks, self.resources.position
        return [Hit(i, cid, chunks[pos[cid]].doc_id, chunks[pos[cid]].heading, scores[cid],
                    chunks[pos[cid]].text) for i, cid in enumerate(ordered(scores), start=1)]

    def answer(self, question: str) -> Answer:
        top = self._rank(question, self.cfg.k)
        signal = self.signal.compute({"q": question}, {"q": top}, self.resources)["q"]
        chunks, pos = self.resources.chunks, self.resources.position
        return self.answerer(question, [chunks[pos[c]] for c in ordered(top)], signal,
                             self.threshold, self.resources.bm25)

    def explain(self, question: str, chunk_id: str) -> dict:
        pos = self.resources.position.get(chunk_id)
        if pos is None:
            raise KeyError(chunk_id)
        terms = self.resources.bm25.explain(question, pos)
        return {"chunk_id": chunk_id, "score": sum(v for _, v in terms),
                "terms": [{"term": t, "contribution": v} for t, v in terms]}

    @classmethod
    def from_run(cls, run_id: str) -> "Engine":
        c = tracking.client()
        try:
            run = c.get_run(run_id)
        except Exception as exc:
            raise ServingError(f"no run {run_id!r} in {tracking.tracking_uri()}") from exc
        path = c.download_artifacts(run_id, "config.yaml")
        cfg = OmegaConf.load(path)
        threshold = run.data.metrics.get("abstain.threshold")
        if threshold is None:
            log.warning("run %s has no abstain threshold: answers will never refuse on "
                        "confidence", run_id)
            threshold = float("-inf")
        return cls(cfg, threshold, run_id)


def champion_run_id(name: str = MODEL_NAME) -> str:
    c = tracking.client()
    try:
        return c.get_model_version_by_alias(name, ALIAS).run_id
    except Exception as exc:
        raise ServingError(f"no '{ALIAS}' yet for registered model {name!r}: promote a run "
                           f"first (`ragexp promote RUN_ID`) or pass --run RUN_ID") from exc


def hit_dict(hit: Hit) -> dict:
    return asdict(hit)
