"""Texts with no terms (empty, stopwords only) through every stage: the issue's 4-document case
run dense and hybrid on the hash embedder, a question with no terms, and the index's check."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest
from conftest import jsonl, write_tree

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.flat import FlatIPIndex
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import DenseSignal, LexicalSignal
from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.rerankers import LexicalReranker, NoReranker
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part

CORPUS = [
    {"_id": "empty", "title": "", "text": ""},
    {"_id": "stopwords", "title": "", "text": "To be or not to be, that is it."},
    {"_id": "zebra", "title": "", "text": "Zebra herds migrate across the Serengeti plains."},
    {"_id": "penguin", "title": "", "text": "Emperor penguins huddle together in Antarctic "
     "storms."},
]
QUERIES = [{"_id": "q1", "text": "Where do zebra herds migrate?"},
           {"_id": "q2", "text": "Why do emperor penguins huddle?"}]
QRELS = [("q1", "zebra"), ("q2", "penguin")]
RETRIEVERS = {"dense": DenseRetriever, "bm25": BM25Retriever,
              "hybrid": lambda res: HybridRetriever(res, {"dense": Part(DenseRetriever),
                                                          "bm25": Part(BM25Retriever)}, RRF())}


def _beir(tmp_path, queries=QUERIES, qrels=QRELS):
    return BeirDataset(str(write_tree(tmp_path / "beir", {
        "corpus.jsonl": jsonl(CORPUS), "queries.jsonl": jsonl(queries),
        "qrels/test.tsv": "".join(f"{q}\t{d}\t1\n" for q, d in qrels)})))


def _run(tmp_path, dataset, retriever, chunker=WholeDocumentChunker(), signal=DenseSignal(),
         reranker=NoReranker()):
    return run_experiment(dataset, Stages(chunker, lambda: HashEmbedder(), RETRIEVERS[retriever],
                                          reranker, signal,
                                          cache=EmbeddingCache(str(tmp_path / "emb"))),
                          progress=False)


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
@pytest.mark.parametrize("chunker", [WholeDocumentChunker(), MarkdownChunker()],
                         ids=["whole", "markdown"])
def test_empty_and_stopword_documents_do_not_fail_a_hash_run(tmp_path, retriever, chunker):
    result = _run(tmp_path, _beir(tmp_path), retriever, chunker)
    assert result.metrics["rr_at_10"] == 1.0 and result.metrics["ndcg_at_10"] == 1.0
    # The right values, from ir_measures on the run's own ranking.
    qrels = [ir_measures.Qrel(q, d, 1) for q, d in QRELS]
    run = [ir_measures.ScoredDoc(q, c.split("#")[0], s)
           for q, items in result.ranking.items() for c, s in items.items()]
    ref = ir_measures.calc_aggregate([ir_measures.RR @ 10, ir_measures.nDCG @ 10], qrels, run)
    assert ref[ir_measures.RR @ 10] == 1.0 and ref[ir_measures.nDCG @ 10] == 1.0
    assert result.metrics["data.docs_without_terms"] == 2
    assert result.metrics["data.queries_without_terms"] == 0
    if retriever == "dense" and isinstance(chunker, WholeDocumentChunker):
        # An empty vector scores cosine 0 against any question.
        assert result.ranking["q1"]["empty"] == 0.0 and result.ranking["q1"]["stopwords"] == 0.0
        assert result.metrics["data.chunks_without_terms"] == 2
    if isinstance(chunker, MarkdownChunker):  # the empty document yields no chunk at all
        assert result.metrics["data.chunks_without_terms"] == 1


@pytest.mark.parametrize("retriever", ["dense", "hybrid", "bm25"])
def test_a_question_without_terms_retrieves_nothing_and_is_counted(tmp_path, retriever, caplog):
    queries = QUERIES + [{"_id": "q3", "text": "What is it, and how?"}]
    result = _run(tmp_path, _beir(tmp_path, queries, QRELS + [("q3", "zebra")]), retriever,
                  signal=LexicalSignal(), reranker=LexicalReranker(top_n=3))
    assert result.ranking["q3"] == {}
    assert result.metrics["data.queries_without_terms"] == 1
    assert result.metrics["rr_at_10"] == pytest.approx(2 / 3)
    table = result.per_question.set_index("id")
    assert not table.loc["q3", "answered"]
    assert "1 question has no terms" in caplog.text and "q3" in caplog.text


def test_index_accepts_zero_rows_and_names_a_row_that_is_not_normalised():
    vectors = np.eye(4, dtype=np.float32)
    vectors[2] = 0
    scores, ids = FlatIPIndex(vectors).search(np.eye(4, dtype=np.float32)[[2]], 4)
    assert scores[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    vectors[3] *= 2
    with pytest.raises(ValueError, match="1 of 4 rows are not, first row 3 with norm 2"):
        FlatIPIndex(vectors)


def test_hash_embedder_gives_zero_vectors_for_texts_without_terms():
    out = HashEmbedder(dim=64).embed(["", "the of and", "zebra"])
    assert not out[:2].any()
    assert np.linalg.norm(out[2]) == pytest.approx(1.0)


def test_a_document_of_front_matter_only_is_named_as_such(caplog):
    """Trial item 5: front matter is metadata, no chunk holds it; the warning names front matter
    for such a document, not "empty, or stopwords only" (kept for the truly empty one)."""
    import logging

    from ragexp.index.resources import Resources
    from ragexp.records import Document
    from ragexp.run.pipeline import without_terms

    docs = [Document("meta.md", "Only meta", "---\ntitle: Only meta\n---\n"),
            Document("lead.md", "Lead", "---\ntitle: Lead\n---\n\n   \n"),
            Document("empty.md", "empty.md", ""),
            Document("zebra.md", "Zebra", "# Zebra\n\nZebra herds migrate.\n")]
    res = Resources(MarkdownChunker().chunk(docs), lambda: HashEmbedder())
    with caplog.at_level(logging.WARNING, logger="ragexp.run.pipeline"):
        counts = without_terms(docs, res, [])
    assert counts["data.docs_without_terms"] == 3
    said = [r.getMessage() for r in caplog.records]
    assert "2 documents hold only front matter (metadata, not text: no chunk holds it) and can "\
           "only score 0: lead.md, meta.md" in said
    # "and can only score 0" was false under a dense model, which found such a document first
    assert "1 document has no terms (empty, or stopwords only), so BM25 and the hash embedder " \
           "can only score it 0 (a dense model still reads it): empty.md" in said


def test_a_markdown_chunker_that_drops_words_of_beir_passages_says_which(tmp_path, caplog):
    # A BEIR passage is text: under chunking=markdown a leading --- block became front matter
    # ('zebra' lost) and a title with no text got no chunk, told as "have no terms (empty, or
    # stopwords only)" although its title has one; chunking=none keeps both.
    corpus = [{"_id": "m1", "title": "T", "text": "---\nzebra: striped\n---\nhorse"},
              {"_id": "t1", "title": "Bananas", "text": ""},
              {"_id": "z", "title": "", "text": "plain giraffe text"}]
    queries = [{"_id": "q1", "text": "zebra"}, {"_id": "q2", "text": "bananas"}]
    folder = write_tree(tmp_path / "b", {
        "corpus.jsonl": jsonl(corpus), "queries.jsonl": jsonl(queries),
        "qrels/test.tsv": "q1\tm1\t1\nq2\tt1\t1\n"})
    whole = _run(tmp_path, BeirDataset(str(folder)), "bm25")
    assert whole.metrics["rr_at_10"] == 1.0
    assert "lose text" not in caplog.text
    marked = _run(tmp_path, BeirDataset(str(folder)), "bm25", MarkdownChunker())
    assert marked.metrics["rr_at_10"] == 0.0
    said = [r.getMessage() for r in caplog.records if "lose text" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("2 of 3 documents lose text under "
                                                 "chunking=markdown")
    assert "m1 (its opening --- block is read as front matter, not text)" in said[0]
    assert "t1 (no chunk, though its title or text has words)" in said[0]
    assert "chunking=none indexes every passage whole" in said[0]
    assert "1 document has words but no chunk holding any (the chunking left it out)" \
        in caplog.text
    assert "no terms (empty, or stopwords only)" not in caplog.text
