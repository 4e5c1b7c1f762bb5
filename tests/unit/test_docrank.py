"""Document rankings after chunking (MaxP, as deep as k documents need) and the ranking depth
against the measures' cutoffs: the issue's two examples end to end on BEIR folders, with the
right values from ir_measures on the true ranking, plus the growth rule on its own."""

from __future__ import annotations

import ir_measures
import pytest
from conftest import jsonl, write_tree
from ir_measures import Qrel, R, ScoredDoc, nDCG

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset
from ragexp.data.docrank import collapse_to_documents, rank_documents
from ragexp.evaluation.measures import parse_all
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import ordered
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

AT_10 = parse_all(["R@10", "nDCG@10"])


def _ir_measures(doc_scores: dict[str, float], qrels: dict[str, int]) -> dict[str, float]:
    """R@10 and nDCG@10 of one query by trec_eval (through ir_measures)."""
    run = [ScoredDoc("q", d, s) for d, s in doc_scores.items()]
    rows = [Qrel("q", d, g) for d, g in qrels.items()]
    got = ir_measures.calc_aggregate([R @ 10, nDCG @ 10], rows, run)
    return {"r_at_10": got[R @ 10], "ndcg_at_10": got[nDCG @ 10]}


def _run(root, chunker, make_retriever, k, tmp_path):
    stages = Stages(chunker, lambda: HashEmbedder(), make_retriever, NoReranker(),
                    LexicalSignal(), cache=EmbeddingCache(str(tmp_path / "cache")))
    return run_experiment(BeirDataset(path=str(root)), stages, k=k, measures=AT_10,
                          progress=False)


# -- the growth rule ------------------------------------------------------------------------

def _chunk_ranker(order: list[str], calls: list[int]):
    """A retriever over a fixed chunk order that records the depths it was asked for."""
    def rank_chunks(queries, depth):
        calls.append(depth)
        return {q: {c: float(len(order) - i) for i, c in enumerate(order[:depth])}
                for q in queries}
    return rank_chunks


def test_depth_grows_until_k_distinct_documents():
    order = [f"a#{i}" for i in range(12)] + ["b#0", "a#12", "c#0", "d#0", "e#0"]
    doc_of = {c: c.split("#")[0] for c in order}
    calls: list[int] = []
    docs, chunks = rank_documents(_chunk_ranker(order, calls), {"q": "x"}, 3, doc_of)
    assert ordered(docs["q"]) == ["a", "b", "c"]
    assert calls == [3, 6, 12, 17]  # doubling, capped at the number of chunks
    assert len(chunks["q"]) == 17


def test_depth_stops_when_the_retriever_has_nothing_more():
    order = ["a#0", "a#1", "b#0"]  # the retriever scores 3 of 10 chunks
    doc_of = {**{c: c.split("#")[0] for c in order}, **{f"z#{i}": "z" for i in range(7)}}
    calls: list[int] = []
    docs, _ = rank_documents(_chunk_ranker(order, calls), {"q": "x"}, 5, doc_of)
    assert ordered(docs["q"]) == ["a", "b"] and calls == [5]


def test_document_ranking_is_cut_to_k_and_k_must_be_positive():
    order = [f"d{i}#0" for i in range(8)]
    doc_of = {c: c.split("#")[0] for c in order}
    docs, _ = rank_documents(_chunk_ranker(order, []), {"q": "x"}, 5, doc_of)
    assert ordered(docs["q"]) == ["d0", "d1", "d2", "d3", "d4"]
    for k in (0, -1):
        with pytest.raises(ValueError, match=f"k must be >= 1, got {k}"):
            rank_documents(_chunk_ranker(order, []), {"q": "x"}, k, doc_of)


def test_collapse_to_documents_keeps_rank_order():
    ranking = {"q": {"d1#0": 0.9, "d2#0": 0.8, "d1#1": 0.95, "d3#0": 0.8, "d2#1": 0.1},
               "empty": {}}
    doc_of = {c: c.split("#")[0] for c in ranking["q"]}
    out = collapse_to_documents(ranking, doc_of)
    # d1 (0.95), then the 0.8 tie broken by id descending: d3#0 before d2#0.
    assert ordered(out["q"]) == ["d1", "d3", "d2"]
    assert out["q"] == {"d1": 3.0, "d3": 2.0, "d2": 1.0}
    assert out["empty"] == {}


def test_collapse_scores_cannot_reorder_documents():
    # Chunk scores tie across documents: the collapsed ranking must still keep rank order,
    # whatever the document ids are.
    ranking = {"q": {"z#0": 1.0, "a#0": 1.0, "m#0": 0.5}}
    doc_of = {"z#0": "a", "a#0": "z", "m#0": "b"}
    out = collapse_to_documents(ranking, doc_of)
    assert ordered(out["q"]) == ["a", "z", "b"]  # z#0 ranks first, and it is document "a"


# -- example: one long relevant document fills the chunk top 10 -------------------------------

def _long_document_folder(tmp_path):
    sentence = "The zebra migration crosses the river in great herds every single year."
    long_text = "\n\n".join(f"Part {i}. {sentence} {sentence}" for i in range(12))
    corpus = [{"_id": "long", "title": "", "text": long_text},
              {"_id": "n1", "title": "", "text": "A zebra migration note. Rivers rise in spring "
               "and the plains turn green again after rain."},
              {"_id": "n2", "title": "", "text": "Zebra herds and their migration are studied "
               "by rangers who count animals from light aircraft over wide plains at dawn."},
              {"_id": "other", "title": "", "text": "Field notes on grazing animals of the "
               "savanna, their water needs, predators, calving seasons and the long routes of "
               "the zebra across dry country, written over many seasons by observers."},
              *({"_id": f"f{i}", "title": "", "text": f"Filler text {i} about volcanoes, "
                 f"tides and penguins, nothing else."} for i in range(40))]
    queries = [{"_id": "q", "text": "zebra migration"}]
    qrels = "query-id\tcorpus-id\tscore\nq\tlong\t1\nq\tother\t1\n"
    return write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(corpus),
                                          "queries.jsonl": jsonl(queries),
                                          "qrels/test.tsv": qrels})


def test_long_document_cut_into_12_chunks_scores_by_its_best_chunk(tmp_path):
    root = _long_document_folder(tmp_path)
    chunker = MarkdownChunker(max_words=30, overlap_words=0, include_headings=False)
    ds = BeirDataset(path=str(root))
    chunks = chunker.chunk(ds.documents())
    assert sum(c.doc_id == "long" for c in chunks) == 12
    # The true ranking: every chunk scored, each document by its best chunk (MaxP).
    res = Resources(chunks, lambda: HashEmbedder(), EmbeddingCache(str(tmp_path / "c")),
                    progress=False)
    every = BM25Retriever(res).search({"q": "zebra migration"}, len(chunks))["q"]
    doc_of = {c.chunk_id: c.doc_id for c in chunks}
    assert {doc_of[c] for c in ordered(every)[:10]} == {"long"}  # the chunk top 10 is one doc
    maxp: dict[str, float] = {}
    for cid, s in every.items():
        maxp[doc_of[cid]] = max(maxp.get(doc_of[cid], float("-inf")), s)
    assert len(set(maxp.values())) == len(maxp)  # no ties: the order is unambiguous
    right = _ir_measures(maxp, {"long": 1, "other": 1})
    # The case is the issue's: the other relevant document is fourth (nDCG@10 0.8772).
    assert right == pytest.approx({"r_at_10": 1.0, "ndcg_at_10": 0.8772}, abs=5e-5)

    result = _run(root, chunker, BM25Retriever, 10, tmp_path)
    assert result.metrics["r_at_10"] == pytest.approx(right["r_at_10"])
    assert result.metrics["ndcg_at_10"] == pytest.approx(right["ndcg_at_10"])
    row = result.per_question.set_index("id").loc["q"]
    assert row["r_at_10"] == pytest.approx(right["r_at_10"])
    assert row["first_relevant_rank"] == 1


# -- example: a cutoff deeper than the ranking ------------------------------------------------

class ScriptedRetriever:
    """Scores chunks by a fixed table (the test needs a known 15-deep order, not a model)."""

    name = "scripted"

    def __init__(self, resources: Resources, scores: dict[str, float]):
        self.chunks, self.scores = resources.chunks, scores

    def search(self, queries, k, cached=True):
        table = {c.chunk_id: self.scores[c.doc_id] for c in self.chunks}
        return {q: {c: table[c] for c in ordered(table)[:k]} for q in queries}


def test_k_below_the_deepest_cutoff_is_refused_and_k_at_it_gives_the_right_values(tmp_path):
    ids = [f"d{i:02d}" for i in range(15)]
    corpus = [{"_id": d, "title": "", "text": f"document {d}"} for d in ids]
    qrels = "query-id\tcorpus-id\tscore\nq\td00\t1\nq\td07\t1\n"  # relevant at ranks 1 and 8
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(corpus),
                                          "queries.jsonl": jsonl([{"_id": "q", "text": "x"}]),
                                          "qrels/test.tsv": qrels})
    scores = {d: float(15 - i) for i, d in enumerate(ids)}
    right = _ir_measures(scores, {"d00": 1, "d07": 1})
    truncated = _ir_measures({d: scores[d] for d in ids[:5]}, {"d00": 1, "d07": 1})
    # What a 5-deep list gave under these names, and the right values (the numbers).
    assert truncated == pytest.approx({"r_at_10": 0.5, "ndcg_at_10": 0.6131}, abs=5e-5)
    assert right == pytest.approx({"r_at_10": 1.0, "ndcg_at_10": 0.8066}, abs=5e-5)

    make = lambda res: ScriptedRetriever(res, scores)  # noqa: E731
    for k in (5, 0, -1):
        with pytest.raises(ValueError, match=f"k={k}"):
            _run(root, WholeDocumentChunker(), make, k, tmp_path)
    for k in (10, 15, 100):
        m = _run(root, WholeDocumentChunker(), make, k, tmp_path).metrics
        assert (m["r_at_10"], m["ndcg_at_10"]) == pytest.approx(
            (right["r_at_10"], right["ndcg_at_10"]))
