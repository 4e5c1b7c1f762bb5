"""Datasets: a BEIR folder written by the test (loading, errors, doc-level scoring through
run_experiment), and the handbook dataset's fingerprint and relevance guard."""

from __future__ import annotations

import logging
import math
import shutil

import pytest
from conftest import CORPUS, GOLDEN, jsonl, write_tree

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset, BeirFormatError, MarkdownDataset
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.records import Chunk
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

CORPUS_ROWS = [
    {"_id": "d1", "title": "Zebras", "text": "Zebra herds migrate across the Serengeti every "
     "year. The migration follows the rains. Predators follow the herds closely. Calves are "
     "born during the wet season."},
    {"_id": "d2", "title": "Penguins", "text": "Penguins live in the southern hemisphere. "
     "Emperor penguins breed in the Antarctic winter. They huddle together for warmth during "
     "storms."},
    {"_id": "d3", "title": "Volcanoes", "text": "A volcano erupts when magma reaches the "
     "surface. Lava flows can travel many kilometres. Ash clouds disrupt air travel."},
    {"_id": "d4", "title": "Tides", "text": "Tides are caused by the gravity of the moon. "
     "Spring tides occur at new and full moon."},
    {"_id": "d5", "title": "Deserts", "text": "Deserts receive little rain. Cacti store water "
     "in their stems."},
]
QUERY_ROWS = [
    {"_id": "q1", "text": "When are zebra calves born?"},
    {"_id": "q2", "text": "How do emperor penguins keep warm?", "metadata": {"kind": "bogus"}},
    {"_id": "q3", "text": "What causes tides?", "metadata": {"kind": "identifier"}},
    {"_id": "q4", "text": "A question nobody judged"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td2\t1\nq2\td4\t0\nq3\td4\t2\nq3\td5\t1\n"


def _beir(tmp_path, **override):
    files = {"corpus.jsonl": jsonl(CORPUS_ROWS), "queries.jsonl": jsonl(QUERY_ROWS),
             "qrels/test.tsv": QRELS, **override}
    return write_tree(tmp_path / "beir", files)


def test_beir_loads_doc_level_graded_qrels(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ragexp.data.datasets"):
        ds = BeirDataset(path=str(_beir(tmp_path)))
    assert ds.unit == "document"
    assert [(d.doc_id, d.title) for d in ds.documents()] == [
        ("d1", "Zebras"), ("d2", "Penguins"), ("d3", "Volcanoes"), ("d4", "Tides"),
        ("d5", "Deserts")]
    assert [(q.qid, q.kind) for q in ds.queries()] == [
        ("q1", "general"), ("q2", "bogus"), ("q3", "identifier")]  # kinds come from the data
    # Grades are kept, grade 0 too (judged, not relevant: it counts for trec_eval); chunks
    # play no part.
    assert ds.qrels([]) == {"q1": {"d1": 2}, "q2": {"d2": 1, "d4": 0},
                            "q3": {"d4": 2, "d5": 1}}
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "q4" in record.getMessage() and "left out" in record.getMessage()
    fp = ds.fingerprint()
    assert set(fp) == {"corpus_hash", "golden_hash"}


def test_beir_bad_json_names_file_and_line(tmp_path):
    rows = jsonl(CORPUS_ROWS[:2]) + '{"_id": "d3", "text": \n' + jsonl(CORPUS_ROWS[3:])
    root = _beir(tmp_path, **{"corpus.jsonl": rows})
    with pytest.raises(BeirFormatError, match=r"corpus\.jsonl:3: invalid JSON"):
        BeirDataset(path=str(root))


def test_beir_missing_field_names_file_and_line(tmp_path):
    root = _beir(tmp_path, **{"queries.jsonl": jsonl([QUERY_ROWS[0], {"_id": "q2"}])})
    with pytest.raises(BeirFormatError, match=r"queries\.jsonl:2: missing field\(s\) text"):
        BeirDataset(path=str(root))


def test_beir_unknown_corpus_id_names_file_and_line(tmp_path):
    root = _beir(tmp_path, **{"qrels/test.tsv": QRELS + "q3\td99\t1\n"})
    with pytest.raises(BeirFormatError) as err:
        BeirDataset(path=str(root))
    assert f"{root / 'qrels' / 'test.tsv'}:7:" in str(err.value)
    assert "'d99'" in str(err.value)


@pytest.mark.parametrize("line,fragment", [("q1\td1\n", "3 tab-separated columns"),
                                           ("q1\td1\thigh\n", "not an integer")])
def test_beir_malformed_qrels_line(tmp_path, line, fragment):
    root = _beir(tmp_path, **{"qrels/test.tsv": QRELS + line})
    with pytest.raises(BeirFormatError, match=rf"test\.tsv:7: .*{fragment}"):
        BeirDataset(path=str(root))


def test_beir_missing_folder_and_files(tmp_path):
    with pytest.raises(BeirFormatError, match="is not a folder"):
        BeirDataset(path=str(tmp_path / "nope"))
    with pytest.raises(BeirFormatError, match="is not a folder"):
        BeirDataset(path="")
    root = _beir(tmp_path)
    (root / "queries.jsonl").unlink()
    with pytest.raises(BeirFormatError, match=r"queries\.jsonl: no such file"):
        BeirDataset(path=str(root))
    (root / "queries.jsonl").mkdir()
    with pytest.raises(BeirFormatError, match=r"queries\.jsonl: a folder, not a file"):
        BeirDataset(path=str(root))
    (root / "queries.jsonl").rmdir()
    with pytest.raises(BeirFormatError, match="check dataset.split"):
        BeirDataset(path=str(root), split="dev")


def test_beir_with_no_judged_query_is_refused(tmp_path):
    root = _beir(tmp_path, **{"qrels/test.tsv": "query-id\tcorpus-id\tscore\nq9\td1\t1\n"})
    with pytest.raises(BeirFormatError, match="no query has judgements"):
        BeirDataset(path=str(root))


def test_run_experiment_on_beir_scores_documents(tmp_path, caplog):
    ds = BeirDataset(path=str(_beir(tmp_path)))
    with caplog.at_level(logging.WARNING):
        result = run_experiment(ds, Stages(MarkdownChunker(max_words=10, overlap_words=0),
                                           lambda: HashEmbedder(), BM25Retriever, NoReranker(),
                                           LexicalSignal(),
                                           cache=EmbeddingCache(str(tmp_path / "c"))),
                                progress=False)
    # Documents are split into several chunks, so chunk and document rankings differ.
    assert len(result.chunks) > len(ds.documents())
    assert all("#" in cid for ranked in result.ranking.values() for cid in ranked)
    table = result.per_question.set_index("id")
    # By hand: only d1 mentions zebras, calves and birth; only d2 emperor penguins; only d4
    # tides and causes. d5 (judged relevant for q3) shares no term with q3.
    assert table.loc["q1", "top_item"] == "d1"
    assert table.loc["q2", "top_item"] == "d2"
    assert table.loc["q3", "top_item"] == "d4"
    assert list(table["first_relevant_rank"]) == [1, 1, 1]
    m = result.metrics
    assert m["success_at_1"] == 1.0
    assert m["r_at_10"] == pytest.approx((1 + 1 + 0.5) / 3)
    ndcg_q3 = 2 / (2 + 1 / math.log2(3))
    assert m["ndcg_at_10"] == pytest.approx((1 + 1 + ndcg_q3) / 3)
    assert m["ndcg_at_10.identifier"] == pytest.approx(ndcg_q3)
    assert m["rr_at_10.general"] == 1.0
    # No unanswerable questions: no abstain curve, and a warning says why.
    assert result.abstain is None and not any(k.startswith("abstain.") for k in m)
    assert any("no abstain curve" in r.getMessage() for r in caplog.records)
    # BM25 only: the embedder was never built.
    assert result.identity is None and m["cache.misses"] == 0


# ---------------------------------------------------------------- handbook dataset

def _copy_handbook(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "corpus")
    shutil.copytree(GOLDEN, tmp_path / "golden")
    return MarkdownDataset(str(tmp_path / "corpus"), str(tmp_path / "golden"))


def test_handbook_fingerprint_follows_content(tmp_path):
    ds = _copy_handbook(tmp_path)
    before = ds.fingerprint()
    # Same content elsewhere: same fingerprint.
    assert before == MarkdownDataset(str(CORPUS), str(GOLDEN)).fingerprint()
    doc = tmp_path / "corpus" / "faq.md"
    doc.write_text(doc.read_text() + "\n")
    after = ds.fingerprint()
    assert after["corpus_hash"] != before["corpus_hash"]
    assert after["golden_hash"] == before["golden_hash"]
    # A renamed file changes it too, even with identical bytes.
    doc.rename(tmp_path / "corpus" / "faq2.md")
    assert ds.fingerprint()["corpus_hash"] != after["corpus_hash"]
    gold = sorted((tmp_path / "golden").glob("*.jsonl"))[0]
    gold.write_text(gold.read_text() + "\n")
    assert ds.fingerprint()["golden_hash"] != before["golden_hash"]


def test_handbook_qrels_refuse_a_chunking_without_offsets(golden):
    ds = MarkdownDataset(str(CORPUS), str(GOLDEN))
    assert len(ds.queries()) == len(golden)
    lost = [Chunk(f"{d.doc_id}#0", d.doc_id, d.text) for d in ds.documents()]  # no spans
    with pytest.raises(ValueError, match="no relevant chunk under this chunking"):
        ds.qrels(lost)


# ---------------------------------------------------------------- BEIR: kinds, unanswerable

UNA_QUERIES = QUERY_ROWS[:3] + [
    {"_id": "u1", "text": "Which airline flies to Antarctica?", "metadata": {"answerable": False}},
    {"_id": "u2", "text": "Do glaciers sing at night?", "metadata": {"kind": "unanswerable"}},
    {"_id": "u3", "text": "Who paints volcano ash?", "metadata": {"answerable": True}},
]


def test_beir_unanswerable_marker_keeps_unjudged_queries_for_the_abstain_curve(tmp_path):
    root = _beir(tmp_path, **{"queries.jsonl": jsonl(UNA_QUERIES)})
    ds = BeirDataset(path=str(root), unanswerable_field="metadata.answerable",
                     unanswerable_value=False)
    kinds = {q.qid: q.kind for q in ds.queries()}
    # u1 by the configured marker, u2 by its kind; u3 has neither judgements nor the marker.
    assert kinds == {"q1": "general", "q2": "bogus", "q3": "identifier",
                     "u1": "unanswerable", "u2": "unanswerable"}
    assert set(ds.qrels([])) == {"q1", "q2", "q3"}
    result = run_experiment(ds, Stages(MarkdownChunker(max_words=10, overlap_words=0),
                                       lambda: HashEmbedder(), BM25Retriever, NoReranker(),
                                       LexicalSignal(), cache=EmbeddingCache(str(tmp_path / "c"))),
                            progress=False)
    assert result.abstain is not None and "abstain.auc" in result.metrics
    table = result.per_question.set_index("id")
    assert table.loc[["u1", "u2"], "abstain_signal"].notna().all()
    # Unanswerable queries are not averaged into ranking measures.
    assert result.metrics["ndcg_at_10"] == pytest.approx(
        table.loc[["q1", "q2", "q3"], "ndcg_at_10"].astype(float).mean())


def test_beir_kind_from_a_configured_field_and_bad_kinds(tmp_path):
    rows = [{**r, "metadata": {**r.get("metadata", {}), "topic": f"t{i % 2}"}}
            for i, r in enumerate(QUERY_ROWS)]
    root = _beir(tmp_path, **{"queries.jsonl": jsonl(rows)})
    ds = BeirDataset(path=str(root), kind_field="metadata.topic")
    assert [q.kind for q in ds.queries()] == ["t0", "t1", "t0"]
    assert [q.kind for q in BeirDataset(path=str(root), kind_field=None).queries()] == \
        ["general"] * 3
    bad = [{**QUERY_ROWS[0], "metadata": {"kind": "two words"}}]
    root2 = _beir(tmp_path / "b", **{"queries.jsonl": jsonl(bad)})
    with pytest.raises(BeirFormatError, match="query 'q1': metadata.kind 'two words' is not a "
                                              "kind name"):
        BeirDataset(path=str(root2))
    overall = [{**QUERY_ROWS[0], "metadata": {"kind": "All"}}]  # the group of every question
    root3 = _beir(tmp_path / "c", **{"queries.jsonl": jsonl(overall)})
    with pytest.raises(BeirFormatError, match="query 'q1': metadata.kind 'All' is the name of "
                                              "the group of every question"):
        BeirDataset(path=str(root3))


def test_beir_query_marked_unanswerable_with_relevant_documents_is_refused(tmp_path):
    rows = [{**QUERY_ROWS[0], "metadata": {"kind": "unanswerable"}}] + QUERY_ROWS[1:]
    root = _beir(tmp_path, **{"queries.jsonl": jsonl(rows)})
    with pytest.raises(BeirFormatError, match=r"1 query\(ies\) marked unanswerable have relevant "
                                              r"documents .* \(q1\)"):
        BeirDataset(path=str(root))


def test_beir_is_scored_per_document_only(tmp_path):
    with pytest.raises(ValueError, match="dataset.unit='chunk': a BEIR dataset is judged per "
                                         "document"):
        BeirDataset(path=str(_beir(tmp_path)), unit="chunk")


def test_each_beir_folder_gets_its_own_experiment_name():
    import hashlib

    from hydra import compose, initialize_config_dir

    from ragexp.run import app

    def composed(path):
        with initialize_config_dir(config_dir=app.CONF_DIR, version_base="1.3"):
            return compose("config", overrides=["dataset=beir", f"dataset.path={path}"])

    cfg = composed("/data/beir/sci fact")
    tag = hashlib.sha1(b"/data/beir/sci fact").hexdigest()[:6]  # the resolved path's digest
    assert cfg.dataset.name == f"beir-sci_fact-{tag}"
    assert cfg.experiment == f"ragexp-beir-sci_fact-{tag}"
    # five folders called beir_format: five experiments, each still saying beir_format
    names = {composed(f"/data/{d}/beir_format").experiment for d in
             ("scifact", "nfcorpus", "fiqa", "arguana", "quora")}
    assert len(names) == 5 and all(n.startswith("ragexp-beir-beir_format-") for n in names)


def test_beir_qrels_with_nothing_relevant_are_refused(tmp_path):
    # every grade 0: the run finished with every measure 0.000 for every configuration, a
    # sweep then "chose" among ties; one query judged all-zero beside a relevant one still loads
    zeros = "query-id\tcorpus-id\tscore\nq1\td1\t0\nq2\td2\t0\nq3\td4\t-1\n"
    root = _beir(tmp_path, **{"qrels/test.tsv": zeros})
    with pytest.raises(BeirFormatError) as err:
        BeirDataset(path=str(root))
    assert str(err.value).startswith(f"{root / 'qrels' / 'test.tsv'}: no document is relevant")
    assert "3 judged query(ies)" in str(err.value)
    mixed = _beir(tmp_path / "mixed", **{"qrels/test.tsv": zeros + "q1\td3\t1\n"})
    assert [q.qid for q in BeirDataset(path=str(mixed)).queries()] == ["q1", "q2", "q3"]
