"""The serving engine: a run's resolved configuration, rebuilt for answering questions.

The index is rebuilt at start-up from the run's config (``stages.build``, as the runner does),
reading the run's data and models from the absolute locations the run recorded, whatever the
current folder; the data's fingerprint must equal the run's (``corpus_hash``, ``golden_hash``
tags) or the engine refuses to start. Passage vectors come from the run's embedding cache, so a
run evaluated on this machine starts without embedding again; query vectors stay in a bounded
in-memory LRU (``QUERY_MEMORY`` questions) and never reach the disk, and a cache that cannot be
written is warned about once, never a failed request. The refusal threshold is the run's
measured operating point (``abstain.threshold``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ragexp.answer.base import Answer, AnswerInput
from ragexp.config import build as stages
from ragexp.config.schema import BM25Conf
from ragexp.decide import replay
from ragexp.index.resources import Resources
from ragexp.records import ordered
from ragexp.serving import tracing
from ragexp.serving.recorded import RecordedRun, ServingError, recorded_run
from ragexp.stages.parent_child import answer_context, read_through, rolled_up_units
from ragexp.stages.ranking import chunked, rerank_top, retrieve
from ragexp.stages.retrievers import why_none
from ragexp.tracking import failures
from ragexp.tracking import store as tracking
from ragexp.tracking.store import ALIAS, MODEL_NAME

log = logging.getLogger(__name__)
QUERY_MEMORY = 1024

@dataclass
class Hit:
    rank: int
    chunk_id: str
    doc_id: str
    heading: str
    score: float
    text: str


def check_fingerprint(run_id: str, expected: dict[str, str], actual: dict[str, str]) -> None:
    """Refuse to serve data other than what the run measured: every hash the run recorded
    (``corpus_hash``, ``golden_hash``) must equal the data's now. Raises ``ServingError``
    naming both hashes."""
    wrong = [f"{key} is {actual.get(key)} now, the run recorded {want}"
             for key, want in sorted(expected.items()) if actual.get(key) != want]
    if wrong:
        raise ServingError(f"the data of run {run_id} changed since it was measured ("
                           f"{'; '.join(wrong)}): its metrics and refusal threshold do not "
                           f"describe this data; rerun the experiment on it and promote that "
                           f"run, or restore the data")


def config_gaps(cfg: DictConfig) -> list[str]:
    """Dotted keys of the fixed config nodes serving reads (``bm25``) that ``cfg`` lacks: a run
    recorded before the key existed (``bm25.method``, ``bm25.delta``)."""
    held = cfg.get("bm25") or {}
    return [f"bm25.{f.name}" for f in fields(BM25Conf) if f.name not in held]


class Engine:
    tracer: tracing.Tracer = tracing.OFF  # ``ragexp serve`` sets an enabled one (tracing.py)

    def __init__(self, cfg: DictConfig, threshold: float, run_id: str = "local",
                 fingerprint: dict[str, str] | None = None):
        """Build the run's stages from ``cfg``; ``fingerprint``: the data hashes the run
        recorded, checked against the data found now (``check_fingerprint``)."""
        self.cfg, self.threshold, self.run_id = cfg, threshold, run_id
        gaps = config_gaps(cfg)
        if gaps:
            raise ServingError(f"the config.yaml of run {run_id} has no {', '.join(gaps)}: it "
                               f"was recorded by an older ragexp, and serving it would have to "
                               f"guess how it ranked; rerun the experiment with this version "
                               f"and promote that run")
        try:
            dataset = instantiate(cfg.dataset)
        except Exception as exc:  # moved or deleted data: say so, not a Hydra traceback
            raise ServingError(f"cannot load the data of run {run_id}: "
                               f"{failures.describe(exc)}") from exc
        if fingerprint:
            check_fingerprint(run_id, fingerprint, dataset.fingerprint())
        built = stages.build(cfg, serving=True)
        # The run stored its chunks, tokens, BM25 and vectors under cache_dir/stages: loading
        # them beats rebuilding (a minute and more at a million passages). Searches are never
        # shared between requests.
        store = stages.stage_store(cfg)
        chunks, chunks_key = chunked(dataset, built.chunker, store)
        self.parents = answer_context(built.chunker, dataset.documents(), chunks)
        self.resources = Resources(chunks, built.make_embedder, built.cache,
                                   bm25_params=built.bm25, progress=False,
                                   query_memory=QUERY_MEMORY, stages=store,
                                   chunks_key=chunks_key, share_searches=False,
                                   index_spec=built.index,
                                   # hybrid parts count their depth in the run's units
                                   unit_of=rolled_up_units(chunks, self.parents,
                                                           dataset.unit))
        self.retriever = built.make_retriever(self.resources)
        self.reranker, self.signal, self.answerer = built.reranker, built.signal, built.answerer
        self.resources.bm25  # fit now, not on the first request
        log.info("engine for run %s: %d chunks, cache hits %d misses %d, stages %s", run_id,
                 len(chunks), built.cache.hits, built.cache.misses, store.events)

    def has_chunk(self, chunk_id: str) -> bool:
        return chunk_id in self.resources.position

    def _rank(self, question: str, k: int, req: tracing.Request) -> dict[str, float]:
        """``ranking.rank`` for one question, its two halves recorded as stages of ``req``."""
        queries = {"q": question}
        with req.stage("retrieve") as attrs:
            found = retrieve(self.retriever, self.reranker, queries, k)
            attrs.update(tracing.ranking_attributes(found["q"], self.retriever))
        with req.stage("rerank") as attrs:
            top = rerank_top(self.reranker, self.resources, queries, found, k)["q"]
            attrs.update(tracing.ranking_attributes(top, self.reranker))
        return top

    def search(self, question: str, k: int = 5) -> list[Hit]:
        with self.tracer.request("search", question) as req:
            scores = self._rank(question, k, req)
            chunks, pos = self.resources.chunks, self.resources.position
            hits = [Hit(i, cid, chunks[pos[cid]].doc_id, chunks[pos[cid]].heading, scores[cid],
                        chunks[pos[cid]].text) for i, cid in enumerate(ordered(scores), start=1)]
            req.outputs = {"hits": [{"chunk_id": h.chunk_id, "score": h.score} for h in hits]}
        return hits

    def answer(self, question: str) -> Answer:
        with self.tracer.request("answer", question) as req:
            top = self._rank(question, self.cfg.k, req)
            with req.stage("abstain") as attrs:
                signal = self.signal.compute({"q": question}, {"q": top},
                                             self.resources.passages)["q"]
                attrs.update({"ragexp.confidence": float(signal),
                              "ragexp.threshold": float(self.threshold),
                              "ragexp.below_threshold": bool(signal < self.threshold)})
            chunks, pos = self.resources.chunks, self.resources.position
            inp = AnswerInput(question, read_through([chunks[pos[c]] for c in ordered(top)],
                                                     self.parents), signal, self.threshold)
            with req.stage("answer") as attrs:
                ans = self.answerer.answer([inp], self.resources.bm25.coverage)[0]
                if not top and ans.refused:  # "nothing retrieved", and why
                    ans.reason = f"nothing retrieved: {self.why_none(question)}"
                attrs.update(tracing.answer_attributes(ans))
            req.outputs = {"text": ans.text, "refused": ans.refused}
        return ans

    def why_none(self, question: str) -> str:
        """Why ``search`` and ``answer`` found no passage for ``question``, as a clause that
        holds for the run's retriever (``retrievers.why_none``): BM25 matches terms, dense
        retrieval does not. The reranker reorders, never drops, so the retriever's reason is
        the whole reason."""
        return why_none(self.retriever, question)

    def explain(self, question: str, chunk_id: str) -> dict:
        pos = self.resources.position.get(chunk_id)
        if pos is None:
            raise KeyError(chunk_id)
        terms = self.resources.bm25.explain(question, pos)
        return {"chunk_id": chunk_id, "score": sum(v for _, v in terms),
                "terms": [{"term": t, "contribution": v} for t, v in terms]}

    @classmethod
    def from_run(cls, run_id: str) -> "Engine":
        """The engine of a run (full id or unique prefix), from what the run recorded
        (``recorded_run``: its ``config.yaml``, data locations and fingerprint, abstain
        threshold). Raises ``tracking.SweepParentRun`` for a sweep's parent run,
        ``ServingError`` for an unknown id or a run that cannot be served."""
        return cls.from_record(recorded_run(run_id))

    @classmethod
    def from_record(cls, record: RecordedRun) -> "Engine":
        """The engine of a run's record (``recorded_run``), its data found where the run
        recorded it (``stages.with_locations``). Raises ``ServingError`` for a run that cannot
        rank a new question (``replay.replays``: a TREC run replayed, precomputed question
        vectors), before anything is built: served, it ranked nothing, and ``ragexp search``
        said no passage shared a term with a word the corpus holds."""
        recorded = OmegaConf.create(record.config)
        why = replay.of_config(OmegaConf.to_container(recorded))
        if why:
            raise ServingError(f"run {record.run_id} cannot answer a new question: {why}. It "
                               f"measures that ranking, but serving needs a retriever that "
                               f"ranks any question; {replay.INSTEAD}, and serve that")
        cfg = stages.with_locations(recorded, record.tags)
        threshold = record.threshold
        if threshold is None:
            log.warning("run %s has no abstain threshold: answers will never refuse on "
                        "confidence", record.run_id)
            threshold = float("-inf")
        return cls(cfg, threshold, record.run_id, record.fingerprint)


def champion_run_id(name: str = MODEL_NAME) -> str:
    """The run id of ``name``'s champion. Raises ``ServingError`` when there is none yet."""
    version = tracking.champion(name)
    if version is None:
        raise ServingError(f"no '{ALIAS}' yet for registered model {name!r}: promote a run "
                           f"first (`ragexp promote RUN_ID`) or pass --run RUN_ID")
    return version.run_id


def hit_dict(hit: Hit) -> dict:
    return asdict(hit)
