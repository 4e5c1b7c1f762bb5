"""One experiment, from Python, in named steps (``run_experiment``), each its own function:

    read_corpus -> index_corpus -> retrieve_all -> metrics -> abstain_curve -> answer_questions
                -> judge -> run_facts -> per-question table

No side effects beyond the embedding cache and the stage store: tracking (MLflow) lives in
``ragexp.tracking`` and the Hydra entry point in ``run.app``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ragexp.answer.base import Answer, Answerer, AnswerInput, answer_columns, answer_metrics
from ragexp.answer.judge import Judge, JudgeResult, NoJudge
from ragexp.config.build import Stages
from ragexp.data import units
from ragexp.data.datasets import Dataset
from ragexp.data.docrank import collapse_to_documents, rank_documents
from ragexp.errors import InvalidValue, counted, listed
from ragexp.evaluation import measures as measures_mod
from ragexp.evaluation import metrics
from ragexp.evaluation.attribution import rerank_attribution
from ragexp.index import truncation
from ragexp.index.embedders import EmbedderIdentity
from ragexp.index.resources import Passages, Resources, dense_facts
from ragexp.index.stagestore import StageStore
from ragexp.records import Chunk, Document, Qrels, Query, Ranking, ordered
from ragexp.stages.abstain import AbstainResult, AbstainSignal, evaluate_abstain
from ragexp.stages.chunking import Chunker
from ragexp.stages.external import TrecRunRetriever
from ragexp.stages.parent_child import (
    answer_context,
    judged_chunks,
    lift_ids,
    read_through,
    unit_through,
)
from ragexp.stages.ranking import chunked, rank
from ragexp.stages.rerankers import Reranker
from ragexp.stages.retrievers import HybridRetriever, Retriever
from ragexp.text import markdown
from ragexp.text.analysis import tokenize

log = logging.getLogger(__name__)
# the tag on a run whose rankings all hold every unit of the corpus (``complete_rankings``)
COMPLETE_TAG = "ragexp.warning.complete_rankings"
# Questions timed one by one for time.query_p50_ms/p95_ms (``latency_sample``): at 100 the p95
# lies between the 95th and 96th fastest of them, five slower ones above it.
LATENCY_SAMPLE = 100


@dataclass
class RunResult:
    """What one run measured: ``metrics`` (the logged numbers), the per-question table, the
    abstain curve (None without one), the chunk ranking and the ranking at the scoring unit
    (``judged``), the chunks, the embedder that ran (None when no stage used one), the run's
    ``resources``, the qrels at the scoring unit, and the tags of the judge, of the
    embedder's window (``truncation.facts``) and of rankings that hold every unit
    (``complete_rankings``)."""

    metrics: dict[str, float]
    per_question: pd.DataFrame
    abstain: AbstainResult | None
    ranking: Ranking
    chunks: list[Chunk]
    identity: EmbedderIdentity | None
    resources: Resources = field(repr=False)
    judged: Ranking = field(default_factory=dict, repr=False)  # at the scoring unit
    qrels: Qrels = field(default_factory=dict, repr=False)  # at the scoring unit
    tags: dict[str, str] = field(default_factory=dict)


def run_experiment(dataset: Dataset, stages: Stages, *, judge: Judge | None = None,
                   k: int = 100,
                   measures: tuple[measures_mod.Measure, ...] = measures_mod.DEFAULT,
                   budget: float = 0.125, folds: int = 5, progress: bool = True,
                   store: StageStore | None = None, objective: str = "nDCG@10",
                   latency_sample: int = LATENCY_SAMPLE) -> RunResult:
    """One run of ``stages`` (``build.Stages``: chunker, embedder and retriever factories,
    reranker, abstain signal, answerer, embedding cache, BM25 settings) on ``dataset``, scored
    with ``measures`` on rankings ``k`` deep; ``budget`` and ``folds`` place and cross-validate
    the abstain operating point; ``judge`` grades the answers (default: none). ``store`` reuses
    chunks, tokens, BM25 and vectors built by earlier jobs (see ``stagestore.py``); None builds
    everything. ``latency_sample`` questions (the first ones) are also timed alone
    (``_latency``; 0: none, and no ``time.query_*`` metrics). Passages and questions over the embedder's token window are counted
    (``truncation.*`` metrics, ``index.truncation``); a dense index logs its size and build
    time, an approximate one its recall@10 against exact search and its search latency
    (``index.resources.dense_facts``: ``index.*``). A run with a reranker also logs its attribution
    (``attribute_reranker``: the first stage's ceiling at ``reranker.top_n`` and the share of
    ``objective`` it realises, from the ranking the reranker was given). Raises
    ``InvalidValue`` for a ``k`` below the deepest cutoff of ``measures``, a corpus that yields
    no chunks or questions none of which is judged (nothing to score), and whatever the
    dataset raises on bad data."""
    measures_mod.check_depth(k, measures)
    store = store or StageStore(enabled=False)
    corpus = read_corpus(dataset, stages.chunker, store)
    if not corpus.qrels:
        raise InvalidValue(f"none of the {len(corpus.queries)} question(s) scored is answerable "
                           f"(judged), so no measure can score this run: add answerable "
                           f"questions, or choose a split that holds some (split=all)")
    res, retriever = index_corpus(corpus, stages, store, progress)
    if isinstance(retriever, TrecRunRetriever) and stages.reranker.top_n > 0:
        log.warning("reranker=%s reorders the top %d of %s's ranking before it is scored: "
                    "reranker=none scores the file's own order", stages.reranker.name,
                    stages.reranker.top_n, retriever.path)
    judged, ranking, first_stage = retrieve_all(corpus, retriever, stages.reranker, res, k,
                                               latency_sample)
    scores = metrics.per_query(judged, corpus.qrels, measures)
    complete = complete_rankings(corpus, judged, measures)
    results = metrics.aggregate(scores, corpus.queries)
    results.update(attribute_reranker(corpus, first_stage, judged, k, stages.reranker.top_n,
                                      measures_mod.parse(objective)))
    confidence, abstain = abstain_curve(stages.signal, corpus, ranking, res, budget, folds)
    if abstain is not None:
        results.update(abstain.metrics())
    answers = answer_questions(stages.answerer, corpus, ranking, confidence, abstain, res,
                               progress)
    relevant = {q: lift_ids(ids, corpus.parents) for q, ids in
                relevant_chunks(corpus.qrels, corpus.chunks, corpus.unit_of).items()}
    results.update(answer_metrics(answers, {q.qid: q.answerable for q in corpus.queries},
                                  relevant))
    read = ChainMap({p.chunk_id: p for p in corpus.parents.values()}, res.by_id)
    graded = (judge or NoJudge()).assess(corpus.queries, list(answers.values()), read, progress)
    results.update(graded.metrics)
    results.update(run_facts(corpus, res, store))
    results.update(dense_facts(res, list(corpus.texts.values())))  # after the cache counts
    window, window_tags = truncation.facts(res, corpus.texts)
    results.update(window)
    table = _per_question(corpus.queries, judged, corpus.qrels, scores, confidence, abstain,
                          measures)
    for column, values in answer_table(corpus.queries, answers, graded, relevant).items():
        table[column] = values
    return RunResult(results, table, abstain, ranking, corpus.chunks,
                     res.embedder.identity if res.embedder_used else None, res, judged,
                     corpus.qrels, {**graded.tags, **window_tags, **part_tags(retriever),
                                    **complete})


def complete_rankings(corpus: Corpus, judged: Ranking,
                      measures: tuple[measures_mod.Measure, ...]) -> dict[str, str]:
    """``{COMPLETE_TAG: why}``, logged as a warning, when every question's ranking (``judged``,
    at the scoring unit) holds every unit of the corpus and so some measures cannot tell
    configurations apart: those that score the same on every order of the units
    (``metrics.order_free``): all of them (one unit, or every unit relevant), any with a cutoff
    below the deepest measure's (``R@10`` of a 2-document corpus), or any when the units are no
    more than the smallest cutoff. A fixed measure at the deepest cutoff alone (``R@100`` of
    the handbook's 22 documents) says nothing of the corpus being small: not warned of. A
    one-document corpus scored 1.000 on every measure, and a two-document one 1.000 on 7 of 11,
    with only an INFO line; else ``{}``. It holds for this chunking and ``dataset.unit`` only:
    another chunking may cut more units."""
    shortest = min((len(judged.get(q, ())) for q in corpus.qrels), default=0)
    held: set[str] = set()
    for unit in corpus.unit_of.values():  # stops early on a corpus larger than a ranking
        held.add(unit)
        if len(held) > shortest:
            return {}
    if any(not held <= set(judged.get(q, ())) for q in corpus.qrels):
        return {}
    fixed = metrics.order_free(measures, corpus.qrels, sorted(held))
    deepest, smallest = max(m.cutoff for m in measures), min(m.cutoff for m in measures)
    if not fixed or (len(fixed) < len(measures) and len(held) > smallest
                     and all(m.cutoff >= deepest for m in fixed)):
        return {}
    what = "parent" if corpus.unit == "chunk" and corpus.parents else corpus.unit
    where = f"chunking and dataset.unit={corpus.unit}"
    if len(held) == 1:
        cause = (f"the corpus has one {what} under this {where} ({next(iter(held))}), and "
                 f"every question's ranking holds it")
    else:
        cause = (f"every question's ranking holds all {len(held)} {what}s of the corpus under "
                 f"this {where}")
    if len(fixed) == len(measures):
        effect = ("every ranking measure scores the same whatever the retriever or reranker, "
                  "so this run cannot tell them apart")
    else:
        varying = [m.name for m in measures if m not in fixed]
        effect = (f"{listed((m.name for m in fixed), 12)} cannot differ between retrievers or "
                  f"rerankers; only {listed(varying, 12)} can tell them apart")
    why = (f"{cause}: {effect}; add documents that do not answer the questions, so retrieval "
           f"has something to rank past")
    log.warning("%s", why)
    return {COMPLETE_TAG: why}


def part_tags(retriever: Retriever) -> dict[str, str]:
    """``{retriever.parts.<name>.embedder.identity: identity key}`` for each hybrid part with an
    embedder of its own (``EmbedderIdentity.key``: backend, model, model-file sha256, dim),
    beside the run's own ``embedder.*`` tags; empty for any other retriever."""
    if not isinstance(retriever, HybridRetriever):
        return {}
    return {f"retriever.parts.{part}.embedder.identity": ident.key
            for part, ident in retriever.part_embedders().items()}


@dataclass(frozen=True)
class Corpus:
    """One run's data, read and chunked: the dataset's ``docs`` and ``queries``, ``texts``
    (``{qid: question text}``), the ``chunks`` and their stage key, the ``qrels`` and
    ``unit_of`` (``{chunk_id: unit id}``) at the scoring ``unit`` (chunk, section or document),
    ``chunk_s``, the seconds chunking (or loading stored chunks) took, and ``parents``
    (``{chunk_id: the chunk the answerer reads for it}``, ``parent_child.answer_context``:
    empty unless the chunker has parents; with parents, the qrels judge the parents and
    ``unit_of`` maps each chunk to its parent's unit)."""

    docs: list
    queries: list[Query]
    texts: dict[str, str]
    chunks: list[Chunk]
    chunks_key: str
    qrels: Qrels
    unit: str
    unit_of: dict[str, str]
    chunk_s: float
    parents: dict[str, Chunk] = field(default_factory=dict)
    plain_text: bool = False  # passages, not markdown (BEIR): a title is the passage's words

    @property
    def rolls_up(self) -> bool:
        """Whether chunk scores roll up to units (MaxP): at the section or document unit, or
        when the answerer reads parents (the parents are then what is judged)."""
        return self.unit != "chunk" or bool(self.parents)


def read_corpus(dataset: Dataset, chunker: Chunker, store: StageStore) -> Corpus:
    """Read the dataset's documents and questions, chunk the documents (or reuse the chunks
    ``store`` holds under the same key: ``chunked``) and judge the chunks, or their parents
    when the chunker has them (qrels at the scoring unit). Raises what the dataset raises on
    bad data (``DataError`` naming file and line)."""
    queries, docs = dataset.queries(), dataset.documents()
    plain_text = bool(getattr(dataset, "plain_text", False))
    start = time.perf_counter()
    chunks, chunks_key = chunked(dataset, chunker, store, docs)
    chunk_s = time.perf_counter() - start
    parents = answer_context(chunker, docs, chunks)
    judged = judged_chunks(chunks, parents)
    qrels = dataset.qrels(judged)
    log.info("%s -> %s; %s", counted(len(docs), "document"), counted(len(chunks), "chunk"),
             counted(len(queries), "question"))
    if plain_text:
        lost = markup_losses(docs, chunks)
        if lost:
            log.warning("%d of %d documents lose text under chunking=%s, which reads each "
                        "passage as CommonMark: %s; chunking=none indexes every passage whole, "
                        "title first, as BEIR does", len(lost), len(docs),
                        getattr(chunker, "name", type(chunker).__name__),
                        "; ".join(f"{d} ({why})" for d, why in lost[:5]))
    return Corpus(docs, queries, {q.qid: q.text for q in queries}, chunks, chunks_key, qrels,
                  dataset.unit, unit_through(chunks, parents, units.unit_of(judged, dataset.unit)),
                  chunk_s, parents, plain_text)


def markup_losses(docs: list[Document], chunks: list[Chunk]) -> list[tuple[str, str]]:
    """``(doc id, why)`` for each plain-text passage (a BEIR document) whose words a markdown
    chunker left out: its text opens with a ``---`` block (front matter, metadata to
    CommonMark), or it got no chunk although its title or text has words. A passage is text,
    not markup; this says so rather than measuring the documents as if they were whole."""
    texts: dict[str, list[str]] = {}
    for c in chunks:
        texts.setdefault(c.doc_id, []).append(c.text)
    out = []
    for d in docs:
        if d.doc_id not in texts and tokenize(f"{d.title} {d.text}"):
            out.append((d.doc_id, "no chunk, though its title or text has words"))
            continue
        start = markdown.text_start(d.text)
        if start and set(tokenize(d.text[:start])) - set(tokenize(" ".join(texts[d.doc_id]))):
            out.append((d.doc_id, "its opening --- block is read as front matter, not text"))
    return out


def index_corpus(corpus: Corpus, stages: Stages, store: StageStore,
                 progress: bool) -> tuple[Resources, Retriever]:
    """``(resources, retriever)``: the run's shared, lazily built resources over the corpus's
    chunks (embedder, embedding cache, one BM25 index with ``stages.bm25``, each reused from
    ``store`` when an earlier job built it), and the first-stage retriever built on them, which
    fits or embeds what it reads now (``time.index_s``, ``time.embed_s`` in
    ``resources.timings``, after ``time.chunk_s``); dense search goes through the run's
    ``index`` group (``stages.index``). Raises ``InvalidValue`` when the corpus yielded no
    chunks or the index settings do not fit it (``index.nlist`` above the passage count)."""
    res = Resources(corpus.chunks, stages.make_embedder, stages.cache,
                    bm25_params=stages.bm25, progress=progress, stages=store,
                    chunks_key=corpus.chunks_key, index_spec=stages.index,
                    questions=corpus.texts,
                    unit_of=corpus.unit_of if corpus.rolls_up else None)
    res.timings["time.chunk_s"] = corpus.chunk_s
    return res, stages.make_retriever(res)


def rank_units(retriever: Retriever, reranker: Reranker, resources: Resources,
               queries: dict[str, str], k: int, unit_of: dict[str, str] | None = None,
               cached: bool = True) -> tuple[Ranking, Ranking]:
    """``(ranking at the scoring unit, chunk ranking)`` of ``queries`` (``{qid: text}``).
    With ``unit_of`` (``{chunk_id: section or document id}``), each unit scores as its best
    chunk (MaxP) and every query gets ``k`` distinct units (``docrank.rank_documents``);
    without it the chunk is the unit and both are the ``k``-deep chunk ranking (``rank``).
    Raises ``InvalidValue`` for ``k < 1``."""
    if unit_of is not None:
        return rank_documents(lambda qs, depth: rank(retriever, reranker, resources, qs, depth,
                                                     cached), queries, k, unit_of)
    ranked = rank(retriever, reranker, resources, queries, k, cached)
    return ranked, ranked


def retrieve_all(corpus: Corpus, retriever: Retriever, reranker: Reranker,
                 resources: Resources, k: int,
                 latency_sample: int = LATENCY_SAMPLE) -> tuple[Ranking, Ranking, Ranking]:
    """``rank_units`` for every question in one batch, timed (``time.search_all_s``, seconds),
    then the per-query serving latency on its first ``latency_sample`` questions (``_latency``:
    ``time.query_p50_ms``,
    ``time.query_p95_ms``, ``time.query_replayed``), all recorded in ``resources.timings``.
    Returns ``(ranking at the scoring unit, chunk ranking, first-stage chunk ranking)``, the
    last as the reranker was given it (``FirstStageKept``). Queries whose ranking holds fewer
    than ``k`` units are counted in one log line."""
    unit_of = corpus.unit_of if corpus.rolls_up else None
    rank_judged = functools.partial(rank_units, retriever, reranker, resources, k=k,
                                    unit_of=unit_of)
    kept = FirstStageKept(reranker)
    start = time.perf_counter()
    judged, ranking = rank_units(retriever, kept, resources, corpus.texts, k, unit_of)
    resources.timings["time.search_all_s"] = time.perf_counter() - start
    short = [q for q, items in judged.items() if len(items) < k]
    if short:  # said once for the batch, not again for each query the latency sample replays
        log.info("%d of %d queries rank fewer than k=%d %ss: the retriever returned every "
                 "chunk it scores (e.g. %s)", len(short), len(judged), k, corpus.unit, short[0])
    resources.timings.update(_latency(rank_judged, corpus.texts, resources, latency_sample))
    return judged, ranking, kept.kept


class FirstStageKept:
    """A reranker that keeps the first-stage ranking it is given (``{qid: {chunk: score}}``,
    deepest call last) before passing it on: what ``attribute_reranker`` measures, without
    searching again."""

    def __init__(self, reranker: Reranker):
        self.reranker, self.name, self.top_n = reranker, reranker.name, reranker.top_n
        self.kept: Ranking = {}

    def rerank(self, queries: dict[str, str], ranking: Ranking, passages: Passages) -> Ranking:
        self.kept.update({q: dict(scores) for q, scores in ranking.items()})
        return self.reranker.rerank(queries, ranking, passages)


def attribute_reranker(corpus: Corpus, first_stage: Ranking, judged: Ranking, k: int,
                       top_n: int, objective: measures_mod.Measure) -> dict[str, float]:
    """The ``rerank.*`` metrics of ``evaluation.attribution`` for a run with a reranker
    (``top_n >= 1``; none without one): ``first_stage`` (the chunk ranking the reranker was
    given) at the scoring unit (MaxP when chunks roll up to units, ``Corpus.rolls_up``; cut to
    ``k``), against ``judged``, the reranked ranking. Rolled up, ``top_n`` counts units of that
    ranking, where the reranker counted chunks."""
    if top_n < 1:
        return {}
    if corpus.rolls_up:
        first_stage = {q: {d: s[d] for d in ordered(s)[:max(k, top_n)]} for q, s in
                       collapse_to_documents(first_stage, corpus.unit_of).items()}
    return rerank_attribution(first_stage, judged, corpus.qrels, top_n, objective)


def abstain_curve(signal: AbstainSignal, corpus: Corpus, ranking: Ranking,
                  resources: Resources, budget: float,
                  folds: int) -> tuple[dict[str, float], AbstainResult | None]:
    """``(confidence, curve)``: each question's confidence that it is answerable
    (``signal.compute`` over its chunk ranking, ``{qid: score}``, higher = answer) and the
    refusal curve (``evaluate_abstain``: AUC, the operating point refusing at most ``budget``
    of the answerable questions, its rates cross-validated over ``folds``, or over as many
    folds as there are unanswerable questions when fewer, with a warning). The curve is None,
    with a warning, unless the scored questions hold at least 2 answerable and 2 unanswerable
    ones (the least its cross-validation can split)."""
    confidence = signal.compute(corpus.texts, ranking, resources.passages)
    queries = corpus.queries
    answerable = sum(q.answerable for q in queries)
    if min(answerable, len(queries) - answerable) >= 2:
        result = evaluate_abstain(confidence, queries, signal.name, budget, folds)
        if result.cv_folds < folds:
            log.warning("abstain.folds=%d, but the %d scored questions hold %d unanswerable "
                        "ones, and each fold needs one: the threshold is cross-validated over "
                        "%d folds (metric abstain.cv.folds); add unanswerable questions or "
                        "lower abstain.folds", folds, len(queries), len(queries) - answerable,
                        result.cv_folds)
        return confidence, result
    log.warning("no abstain curve: it needs at least 2 answerable and 2 unanswerable questions, "
                "the scored questions hold %d and %d", answerable, len(queries) - answerable)
    return confidence, None


def answer_questions(answerer: Answerer, corpus: Corpus, ranking: Ranking,
                     confidence: dict[str, float], abstain: AbstainResult | None,
                     resources: Resources, progress: bool) -> dict[str, Answer]:
    """``{qid: Answer}``: each question answered from its ranked chunks, best first (read
    through their parents when the corpus has them: ``parent_child.read_through``), with its
    confidence and the curve's refusal threshold (``-inf`` without a curve: no refusal on
    confidence); citations are checked against BM25 (``resources.bm25``)."""
    threshold = abstain.threshold if abstain is not None else float("-inf")
    chunks, position = resources.chunks, resources.position
    inputs = [AnswerInput(q.text, read_through([chunks[position[c]] for c in
                                                ordered(ranking[q.qid])], corpus.parents),
                          confidence[q.qid], threshold) for q in corpus.queries]
    return dict(zip([q.qid for q in corpus.queries],
                    answerer.answer(inputs, resources.bm25.coverage, progress)))


def relevant_chunks(qrels: Qrels, chunks: list[Chunk],
                    unit_of: dict[str, str]) -> dict[str, set[str]]:
    """``{qid: chunk ids}``: the chunks inside each question's relevant units (grade > 0), what
    a citation must point at to hold evidence. Only judged units' chunks are gathered: a corpus
    has far more units than judgements."""
    judged_units = {item for rel in qrels.values() for item in rel}
    chunks_of: dict[str, list[str]] = {}
    for c in chunks:
        unit = unit_of[c.chunk_id]
        if unit in judged_units:
            chunks_of.setdefault(unit, []).append(c.chunk_id)
    return {q: {c for item, grade in rel.items() if grade > 0 for c in chunks_of.get(item, [])}
            for q, rel in qrels.items()}


def run_facts(corpus: Corpus, resources: Resources, store: StageStore) -> dict[str, float]:
    """What a run measured about itself rather than about retrieval: texts without terms
    (``without_terms``), seconds and milliseconds per stage (``time.*``), embedding-cache hits
    and misses, the chunk count (and the parent count, with parents), and where each stage
    came from (``stages.*``, with reuse off too: everything built, and said so)."""
    out = without_terms(corpus.docs, resources, corpus.queries, titled=corpus.plain_text)
    out.update({key: float(v) for key, v in resources.timings.items()})
    out.update({"cache.hits": float(resources.cache.hits),
                "cache.misses": float(resources.cache.misses),
                "index.chunks": float(len(corpus.chunks))})
    if corpus.parents:
        out["index.parents"] = float(len({p.chunk_id for p in corpus.parents.values()}))
    out.update(store.counts())
    log.info("stages: %s", ", ".join(f"{k} {v}" for k, v in store.events.items()))
    return out


def answer_table(queries: list[Query], answers: dict[str, Answer], graded: JudgeResult,
                 relevant: dict[str, set[str]]) -> dict[str, list]:
    """The per-question table's answer columns, one value per question in ``queries`` order:
    the answer's own (``answer_columns``), the judge's, and ``cited_relevant``, how many cited
    chunks hold evidence (report.html's failures)."""
    return {**answer_columns(list(answers.values())), **graded.columns,
            "cited_relevant": [sum(c in relevant.get(q.qid, set())
                                   for c in answers[q.qid].cited_chunks) for q in queries]}


def without_terms(docs, res: Resources, queries, titled: bool = False) -> dict[str, float]:
    """Counts of documents, chunks and questions that yield no terms (``text.tokenize``: empty,
    punctuation or stopwords only). They can only score 0 (BM25) or cosine 0 (hash embedder; a
    dense model reads them, "what is it" found its document at rank 1), so a run reports them,
    with a warning naming the first few, rather than measuring them silently.
    A document whose text (and title, when ``titled``: a passage's title is its words, a
    markdown file's is its name) has terms that no chunk holds is named as the chunking's loss."""
    lengths = res.terms.lengths()
    chunks = res.chunks
    with_terms = {chunks[i].doc_id for i in np.flatnonzero(lengths)}
    empty = {"document": [d.doc_id for d in docs if d.doc_id not in with_terms],
             "question": [q.qid for q in queries if not tokenize(q.text)]}

    def only_front_matter(text: str) -> bool:
        start = markdown.text_start(text)
        return start > 0 and not text[start:].strip()

    meta_only = sorted(d.doc_id for d in docs
                       if d.doc_id not in with_terms and only_front_matter(d.text))
    if meta_only:
        one = len(meta_only) == 1
        log.warning("%s %s only front matter (metadata, not text: no chunk holds it) and can "
                    "only score 0: %s", counted(len(meta_only), "document"),
                    "holds" if one else "hold", listed(meta_only, 5))
    worded = {d.doc_id for d in docs if d.doc_id not in with_terms and d.doc_id not in meta_only
              and tokenize(f"{d.title} {d.text}" if titled else d.text)}
    if worded:  # the chunking left their words out (a title with no text, markup only)
        one = len(worded) == 1
        log.warning("%s %s words but no chunk holding any (the chunking left %s out) and "
                    "can only score 0: %s", counted(len(worded), "document"),
                    "has" if one else "have", "it" if one else "them", listed(sorted(worded), 5))
    for what, ids in empty.items():
        ids = [i for i in ids if i not in meta_only and i not in worded]
        if ids:
            has, them = ("has", "it") if len(ids) == 1 else ("have", "them")
            log.warning("%s %s no terms (empty, or stopwords only), so BM25 and the hash "
                        "embedder can only score %s 0 (a dense model still reads %s): %s",
                        counted(len(ids), what), has, them, them, listed(ids, 5))
    return {"data.docs_without_terms": float(len(empty["document"])),
            "data.chunks_without_terms": float((lengths == 0).sum()),
            "data.queries_without_terms": float(len(empty["question"]))}


def _latency(rank_judged: Callable, texts: dict[str, str], res: Resources,
             sample: int) -> dict:
    """Per-query serving latency (ms): each query alone, query embedding not cached, after one
    untimed query (the first, in ``SearchReplay.warm_up``) that loads what a server has loaded
    before it answers: an embedder whose vectors all came from the cache loads its model at its
    first query (0.6-0.8 s for MiniLM), and timed, that load was the p95 of a sample of up to
    20 questions. A first stage that an earlier job of this sweep already searched for the
    query on the same index is replayed with its measured time (``SearchReplay.searched_alone``),
    and so is a query embedding an earlier job made with the same embedder, on any index
    (``Resources.query_vectors``); ``time.query_replayed`` counts the queries whose first stage
    was replayed, whole or in part."""
    qids = list(texts)[:sample]
    times, replayed, replay = [], 0, res.replay
    if qids:
        with replay.warm_up():
            rank_judged({qids[0]: texts[qids[0]]}, cached=False)
    for qid in qids:
        replay.replayed_s, before = 0.0, replay.replayed
        start = time.perf_counter()
        rank_judged({qid: texts[qid]}, cached=False)
        times.append((time.perf_counter() - start + replay.replayed_s) * 1000)
        replayed += replay.replayed > before
    if not times:
        return {}
    return {"time.query_p50_ms": float(np.percentile(times, 50)),
            "time.query_p95_ms": float(np.percentile(times, 95)),
            "time.query_replayed": float(replayed)}


def _per_question(queries, ranking, qrels, scores, confidence, abstain,
                  measures) -> pd.DataFrame:
    """One row per question; one column per measure, keyed like the metric (empty when the
    question was not scored)."""
    rows = []
    for q in queries:
        ranked = ordered(ranking.get(q.qid, {}))
        rel = qrels.get(q.qid, {})
        s = confidence.get(q.qid)
        rows.append({
            "id": q.qid, "kind": q.kind, "source": q.source, "question": q.text,
            "first_relevant_rank": metrics.first_relevant_rank(ranked, rel) if rel else None,
            **{m.key: scores[q.qid][m.key] if q.qid in scores else None for m in measures},
            "abstain_signal": s,
            "refused": (s < abstain.threshold) if abstain is not None and s is not None else None,
            "top_item": ranked[0] if ranked else None,
        })
    return pd.DataFrame(rows)
