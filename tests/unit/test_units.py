"""Scoring units: the same chunk ranking judged per chunk, per section and per document, each
checked against ir_measures on a unit ranking and unit qrels built here independently (MaxP over
every chunk's BM25 score; qrels written by hand from the labels)."""

from __future__ import annotations

import ir_measures
import pytest
from conftest import jsonl, write_tree
from ir_measures import RR, R, nDCG

from ragexp.config.build import Stages
from ragexp.data.datasets import MarkdownDataset
from ragexp.data.units import check_unit, section_id
from ragexp.index.bm25 import BM25Index
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.records import ordered
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

FILLER = " ".join(f"Sentence {i} talks about the weather and nothing else." for i in range(12))
DOCS = {
    "a.md": f"# Alpha\n\n## Install\n\nInstall alpha with the installer tool. {FILLER}\n\n"
            f"## Backup\n\nBackups of alpha run nightly. {FILLER}\n",
    "b.md": f"# Beta\n\n## Install\n\nBeta installs from a tarball, no installer. {FILLER}\n\n"
            f"## Restore\n\nRestore beta from the nightly backup archive. {FILLER}\n",
    "c.md": f"# Gamma\n\nGamma is a tool about the weather. {FILLER}\n",
}
QUESTIONS = [
    {"id": "s1", "kind": "howto", "question": "How do I install alpha with the installer?",
     "answer": "installer", "evidence": [{"doc": "a.md", "section": "Alpha > Install"}]},
    {"id": "s2", "kind": "howto", "question": "restore beta backup archive",
     "answer": "restore", "evidence": [{"doc": "b.md", "section": "Restore"}]},
    {"id": "d1", "kind": "topic", "question": "weather tool gamma",
     "answer": "gamma", "evidence": [{"doc": "c.md"}]},
    {"id": "q1", "kind": "topic", "question": "nightly backups of alpha",
     "answer": "nightly", "evidence": [{"doc": "a.md", "quote": "Backups of alpha run nightly."}]},
]
# Unit judgements written by hand from the labels above.
SECTION = {"Alpha > Install": "a.md#Alpha/Install", "Beta > Restore": "b.md#Beta/Restore",
           "Alpha > Backup": "a.md#Alpha/Backup"}
HAND_QRELS = {
    "section": {"s1": {SECTION["Alpha > Install"]: 1}, "s2": {SECTION["Beta > Restore"]: 1},
                "d1": {"c.md#Gamma": 1}, "q1": {SECTION["Alpha > Backup"]: 1}},
    "document": {"s1": {"a.md": 1}, "s2": {"b.md": 1}, "d1": {"c.md": 1}, "q1": {"a.md": 1}},
}


def _run(tmp_path, unit):
    corpus = write_tree(tmp_path / "docs", DOCS)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl(QUESTIONS))
    ds = MarkdownDataset(str(corpus), str(qfile), unit=unit)
    chunker = MarkdownChunker(max_words=25, overlap_words=0)
    result = run_experiment(ds, Stages(chunker, lambda: HashEmbedder(), BM25Retriever, NoReranker(),
                                       LexicalSignal(), cache=EmbeddingCache(str(tmp_path / "c"))),
                            k=10, measures=_measures(), progress=False)
    return ds, chunker.chunk(ds.documents()), result


def _measures():
    from ragexp.evaluation import measures
    return measures.resolve(["nDCG@10", "RR@10", "R@10"], 10)


def _maxp(chunks, unit_of, texts):
    """Every chunk's BM25 score, each unit scored by its best chunk, top 10 units."""
    bm = BM25Index().fit([c.text for c in chunks])
    scores = bm.score(list(texts.values()))
    run = {}
    for row, qid in enumerate(texts):
        best: dict[str, float] = {}
        for i, c in enumerate(chunks):
            if scores[row, i] > 0:
                u = unit_of(c)
                best[u] = max(best.get(u, 0.0), float(scores[row, i]))
        run[qid] = {u: best[u] for u in ordered(best)[:10]}
    return run


@pytest.mark.parametrize("unit", ["section", "document"])
def test_unit_metrics_match_ir_measures_on_an_independent_unit_ranking(tmp_path, unit):
    ds, chunks, result = _run(tmp_path, unit)
    assert len(chunks) > 6  # sections are cut into several chunks
    unit_of = section_id if unit == "section" else (lambda c: c.doc_id)
    texts = {q.qid: q.text for q in ds.queries()}
    expected = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10, R @ 10], HAND_QRELS[unit],
                                          _maxp(chunks, unit_of, texts))
    assert result.qrels == HAND_QRELS[unit]
    assert result.metrics["ndcg_at_10"] == pytest.approx(expected[nDCG @ 10])
    assert result.metrics["rr_at_10"] == pytest.approx(expected[RR @ 10])
    assert result.metrics["r_at_10"] == pytest.approx(expected[R @ 10])
    # Units in the judged ranking are distinct and never more than k.
    assert all(len(r) <= 10 for r in result.judged.values())


def test_chunk_unit_judges_chunks_inside_the_labelled_section(tmp_path):
    _, chunks, result = _run(tmp_path, "chunk")
    inside = {c.chunk_id for c in chunks if c.heading == "Alpha > Install"}
    assert len(inside) >= 2 and set(result.qrels["s1"]) == inside
    assert set(result.qrels["d1"]) == {c.chunk_id for c in chunks if c.doc_id == "c.md"}


def test_text_before_the_first_heading_is_a_section_of_its_own(tmp_path):
    """A preamble is under no heading: at the section unit it was filed under the document's
    title (its first heading), so a question on that section scored Success@1 1.0 on the
    preamble chunk, which does not answer it (0.0 at the chunk unit); now both units say 0."""
    docs = write_tree(tmp_path / "docs", {
        "m.md": "Different preamble about the hiking trail closing in winter.\n\n# Trails\n\n"
                "Trail maps are available at the visitor centre.\n"})
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl([{"id": "g2", "kind": "k", "question": "Is the hiking trail closed "
                             "in winter?", "answer": "yes", "evidence": [
                                 {"doc": "m.md", "quote": "Trail maps are available at the "
                                                         "visitor centre."}]}]))
    chunker = MarkdownChunker(max_words=25, overlap_words=0)
    chunks = chunker.chunk(MarkdownDataset(str(docs), str(qfile)).documents())
    assert [(c.heading, c.text.splitlines()[0]) for c in chunks] == [
        ("", "Different preamble about the hiking trail closing in winter."),
        ("Trails", "Trails")]
    for unit in ("chunk", "section"):
        ds = MarkdownDataset(str(docs), str(qfile), unit=unit)
        result = run_experiment(ds, Stages(chunker, lambda: HashEmbedder(), BM25Retriever,
                                           NoReranker(), LexicalSignal(),
                                           cache=EmbeddingCache(str(tmp_path / "c"))),
                                k=10, measures=_measures(), progress=False)
        top = next(iter(result.judged["g2"]))
        assert top == ("m.md#0" if unit == "chunk" else "m.md#"), (unit, result.judged)
        assert result.metrics["rr_at_10"] == 0.5, unit


def test_whole_markdown_documents_hold_no_front_matter(tmp_path):
    """chunking=none on a markdown corpus: the front matter is metadata, as under the markdown
    chunkers. Indexed, its words made a.md outrank the relevant b.md (RR@10 0.5, not 1)."""
    from ragexp.stages.chunking import WholeDocumentChunker

    docs = write_tree(tmp_path / "docs", {
        "a.md": "---\ntitle: Release notes\ndescription: Which release first documented how to "
                "store mangoes\n---\n# Release notes\n\nVersion 2 adds dark mode and faster "
                "startup.\n",
        "b.md": "# Storage\n\nKeep mangoes at room temperature until they ripen, then "
                "refrigerate.\n"})
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl([{"id": "e1", "kind": "k", "question": "How should I store mangoes?",
                             "answer": "room temperature", "evidence": [
                                 {"doc": "b.md", "quote": "Keep mangoes at room temperature"}]}]))
    ds = MarkdownDataset(str(docs), str(qfile), unit="document")
    result = run_experiment(ds, Stages(WholeDocumentChunker(), lambda: HashEmbedder(),
                                       BM25Retriever, NoReranker(), LexicalSignal(),
                                       cache=EmbeddingCache(str(tmp_path / "c"))),
                            k=10, measures=_measures(), progress=False)
    assert result.metrics["rr_at_10"] == 1.0
    assert [c.text for c in result.chunks] == [
        "Release notes\n# Release notes\n\nVersion 2 adds dark mode and faster startup.\n",
        "Storage\n# Storage\n\nKeep mangoes at room temperature until they ripen, then "
        "refrigerate.\n"]
    plain = WholeDocumentChunker().chunk(ds.documents())  # as for BEIR passages: text as is
    assert plain[0].text.startswith("Release notes\n---\ntitle:")


def test_whole_markdown_documents_without_text_get_no_chunk(tmp_path):
    """chunking=none gave an empty markdown file a chunk of its title, which is its file name:
    "empty.md" ranked first for "empty queue" (RR@10 0.5, not 1), where no markdown chunker
    gives it a chunk. A BEIR passage (plain text) keeps its chunk of title alone."""
    from ragexp.records import Document
    from ragexp.stages.chunking import WholeDocumentChunker

    docs = write_tree(tmp_path / "docs", {
        "empty.md": "", "meta.md": "---\ntitle: Empty queue\n---\n\n",
        "real.md": "# Draining\n\nThe worker pool drains the empty queue first.\n"})
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl([{"id": "e1", "kind": "k", "question": "empty queue", "answer": "x",
                             "evidence": [{"doc": "real.md"}]}]))
    ds = MarkdownDataset(str(docs), str(qfile), unit="document")
    result = run_experiment(ds, Stages(WholeDocumentChunker(), lambda: HashEmbedder(),
                                       BM25Retriever, NoReranker(), LexicalSignal(),
                                       cache=EmbeddingCache(str(tmp_path / "c"))),
                            k=10, measures=_measures(), progress=False)
    assert [c.chunk_id for c in result.chunks] == ["real.md"]
    assert result.metrics["rr_at_10"] == 1.0
    passage = Document("p1", "Empty queue", "", {})
    assert [c.text for c in WholeDocumentChunker().chunk([passage])] == ["Empty queue\n"]


QUEUE = ("# Queue Basics\n\nA queue holds jobs until a worker takes them. Each job has a priority "
         "between one and nine. Workers poll the queue every two seconds and take the job with "
         "the highest priority first.\n\n## Retries\n\nA failed job is retried up to five times "
         "with exponential backoff starting at ten seconds. After the fifth failure the job moves "
         "to the dead letter queue where it stays for seven days.\n\n## Dead Letters\n\nThe dead "
         "letter queue can be inspected with the command brindle dlq list. Jobs there can be "
         "replayed with brindle dlq replay.\n")
STRADDLING = ("After the fifth failure the job moves to the dead letter queue where it stays for "
              "seven days. ## Dead Letters The dead letter queue can be inspected")


@pytest.mark.parametrize("unit", ["section", "document"])
def test_unit_judgements_do_not_move_with_the_chunk_size(tmp_path, unit):
    """A unit is judged on its chunks' source text merged: lifted from chunk judgements, the
    quote crossing into "Dead Letters" made that section relevant at 15-word chunks (a chunk
    holding half of itself from the quote) and not at 120 (the section one chunk): R@1 of one
    ranking read 0.75 and 0.8125 in a new user's sweep."""
    from ragexp.data.units import unit_chunks
    from ragexp.stages.parent_child import ParentChildChunker
    from ragexp.stages.sentence_chunking import SentenceChunker

    docs = write_tree(tmp_path / "docs", {"a.md": QUEUE, "b.md": "# Other\n\nUnrelated text.\n"})
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl([{"id": "r7", "kind": "k", "question": "where do failed jobs go",
                             "answer": "dlq", "evidence": [{"doc": "a.md", "quote": STRADDLING}]}]))
    ds = MarkdownDataset(str(docs), str(qfile), unit=unit)
    chunkers = [MarkdownChunker(max_words=15, overlap_words=5), MarkdownChunker(max_words=120),
                MarkdownChunker(max_words=40, overlap_words=0, include_headings=False),
                SentenceChunker(sentences=1, overlap_sentences=0), ParentChildChunker()]
    judged = [ds.qrels(c.chunk(ds.documents())) for c in chunkers]
    want = {"r7": {"a.md#Queue-Basics/Retries" if unit == "section" else "a.md": 1}}
    assert judged == [want] * len(chunkers)
    small = MarkdownChunker(max_words=15, overlap_words=5).chunk(ds.documents())
    # the chunk that made Dead Letters relevant: still relevant at unit=chunk
    assert any(c.heading.endswith("Dead Letters") for c in small
               if c.chunk_id in MarkdownDataset(str(docs), str(qfile)).qrels(small)["r7"])
    assert sum(len(u.spans) for u in unit_chunks(small, unit)) < len(small)  # merged


def test_unknown_unit_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match="dataset.unit='page' is not a scoring unit; choose one "
                                         "of chunk, section, document"):
        check_unit("page")


def test_a_document_without_headings_or_title_gets_no_file_name_line():
    """Its chunks started with its file name ("b.md"), whose words (b, md) it does not hold; so
    BM25 credited every such document for "md", and a stopwords-only one had terms. A given
    title (front matter, a BEIR passage's) still heads its chunks."""
    from ragexp.data.golden import document_title
    from ragexp.records import Document
    from ragexp.stages.chunking import WholeDocumentChunker
    from ragexp.stages.sentence_chunking import SentenceChunker

    plain = Document("b.md", document_title("b.md", "To be or not to be.\n", {}),
                     "To be or not to be.\n", {})
    titled = Document("c.md", "Hamlet", "---\ntitle: Hamlet\n---\nTo be or not to be.\n",
                      {"title": "Hamlet"})
    passage = Document("p1", "Hamlet", "To be or not to be.", {})
    for chunker in (MarkdownChunker(), SentenceChunker(), WholeDocumentChunker(markdown=True)):
        texts = {c.doc_id: c.text for c in chunker.chunk([plain, titled])}
        assert texts["b.md"].strip() == "To be or not to be.", chunker
        assert texts["c.md"].startswith("Hamlet\n"), chunker
    assert WholeDocumentChunker().chunk([passage])[0].text == "Hamlet\nTo be or not to be."


DUPLICATE = ("# Setup\n\nFirst setup section: install the flux capacitor.\n\n# Setup\n\nSecond "
             "setup section: calibrate the flux capacitor.\n\n## Notes\n\nNote one.\n\n# Other\n\n"
             "## Notes\n\nNote two about the turbo encabulator.\n")


def _duplicate_dataset(tmp_path, unit):
    docs = write_tree(tmp_path / "docs", {"dup.md": DUPLICATE})
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(jsonl([{"id": "s1", "kind": "k", "question": "install the flux capacitor",
                             "answer": "calibrate", "evidence": [
                                 {"doc": "dup.md", "quote": "Second setup section: calibrate "
                                                            "the flux capacitor."}]}]))
    return MarkdownDataset(str(docs), str(qfile), unit=unit)


def test_two_sections_of_one_heading_path_are_two_units_under_every_chunking(tmp_path):
    """Two ``# Setup`` sections of one document were one unit (``dup.md#Setup``), so a question
    quoting the second was credited for retrieving the first. The second is ``Setup@2``, an id
    read from the document's headings, so every chunking gives the same units and judgements."""
    from ragexp.data.units import unit_chunks
    from ragexp.stages.parent_child import ParentChildChunker
    from ragexp.stages.semantic_chunking import SemanticChunker
    from ragexp.stages.sentence_chunking import SentenceChunker

    ds = _duplicate_dataset(tmp_path, "section")
    hashed = {"_target_": "ragexp.index.embedders.HashEmbedder", "dim": 64}
    chunkers = [MarkdownChunker(), MarkdownChunker(max_words=10, overlap_words=3),
                MarkdownChunker(max_words=40, overlap_words=0, include_headings=False),
                SentenceChunker(sentences=1, overlap_sentences=0), ParentChildChunker(),
                SemanticChunker(hashed, min_words=0, cache_dir=str(tmp_path / "c"))]
    units = ["dup.md#Setup", "dup.md#Setup@2", "dup.md#Setup/Notes", "dup.md#Other/Notes"]
    for chunker in chunkers:
        chunks = chunker.chunk(ds.documents())
        assert [u.chunk_id for u in unit_chunks(chunks, "section")] == units, chunker
        assert ds.qrels(chunks) == {"s1": {"dup.md#Setup@2": 1}}, chunker
    parents = ParentChildChunker().parents(ds.documents(), ParentChildChunker().chunk(
        ds.documents()))
    assert sorted({p.chunk_id for p in parents.values()}) == sorted(units)


def test_a_question_on_the_second_of_two_sections_is_not_credited_for_the_first(tmp_path):
    # BM25 ranks the first Setup (install + flux + capacitor) above the second (flux +
    # capacitor), which the question quotes: the relevant section is second, RR 0.5 (was 1.0)
    ds = _duplicate_dataset(tmp_path, "section")
    result = run_experiment(ds, Stages(MarkdownChunker(), lambda: HashEmbedder(), BM25Retriever,
                                       NoReranker(), LexicalSignal(),
                                       cache=EmbeddingCache(str(tmp_path / "c"))),
                            k=10, measures=_measures(), progress=False)
    assert list(result.judged["s1"])[:2] == ["dup.md#Setup", "dup.md#Setup@2"]
    assert result.metrics["rr_at_10"] == 0.5


def test_a_heading_that_reads_as_a_repeat_keeps_its_id_and_the_repeat_takes_a_digest():
    from ragexp.data.units import section_ids
    from ragexp.records import Document

    doc = Document("d.md", "D", "# Setup@2\n\nLiteral.\n\n# Setup\n\nOne.\n\n# Setup\n\nTwo.\n")
    ids = section_ids(MarkdownChunker().chunk([doc]))
    assert ids["d.md#0"] == "d.md#Setup@2" and ids["d.md#1"] == "d.md#Setup"
    assert ids["d.md#2"].startswith("d.md#Setup@2~") and len(set(ids.values())) == 3
