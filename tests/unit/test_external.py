"""Another system's TREC run evaluated as a run of its own: same measures as ragexp computes on
its own ranking, per unit, and clear errors for ids of the wrong unit or unknown queries."""

from __future__ import annotations

import pytest
from conftest import jsonl, write_tree

from ragexp.config.build import Stages
from ragexp.data.datasets import MarkdownDataset
from ragexp.data.trec import write_run
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.external import TrecRunRetriever
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

DOCS = {"a.md": "# A\n\n## One\n\nApples grow on trees in orchards.\n\n## Two\n\nPears too.\n",
        "b.md": "# B\n\nBananas grow in bunches on large plants.\n",
        "c.md": "# C\n\nCherries are small and red.\n"}
QS = [{"id": "1", "kind": "fruit", "question": "where do apples grow", "answer": "trees",
       "evidence": [{"doc": "a.md", "section": "One"}]},
      {"id": "2", "kind": "fruit", "question": "bananas bunches", "answer": "plants",
       "evidence": [{"doc": "b.md"}]},
      {"id": "3", "kind": "unanswerable", "question": "durian smell"},
      {"id": "4", "kind": "unanswerable", "question": "kiwi origin"}]


def dataset(tmp_path, unit):
    q = tmp_path / "q.jsonl"
    q.write_text(jsonl(QS))
    return MarkdownDataset(str(write_tree(tmp_path / "docs", DOCS)), str(q), unit=unit)


def run(ds, tmp_path, make_retriever):
    return run_experiment(ds, Stages(MarkdownChunker(max_words=10, overlap_words=0),
                                     lambda: HashEmbedder(), make_retriever, NoReranker(),
                                     LexicalSignal(), cache=EmbeddingCache(str(tmp_path / "c"))),
                          progress=False)


@pytest.mark.parametrize("unit", ["chunk", "section", "document"])
def test_replaying_ragexp_own_run_file_gives_the_same_numbers(tmp_path, unit):
    """A run.trec that ragexp wrote, fed back as an external system's run, scores identically:
    the file carries everything the measures see."""
    ds = dataset(tmp_path, unit)
    own = run(ds, tmp_path, BM25Retriever)
    path = write_run(own.judged, tmp_path / "run.trec")
    replay = run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit=unit))
    for key in ("ndcg_at_10", "rr_at_10", "r_at_100", "success_at_1", "abstain.auc"):
        assert replay.metrics[key] == pytest.approx(own.metrics[key]), key
    assert replay.judged == own.judged


def test_a_document_run_scored_per_chunk_is_refused(tmp_path):
    ds = dataset(tmp_path, "chunk")
    path = write_run({"1": {"a.md": 2.0, "b.md": 1.0}}, tmp_path / "docs.trec")
    with pytest.raises(ValueError, match=r"docs.trec:1: 2 item id\(s\) are not chunk ids .*"
                                         r"\('a\.md', 'b\.md'; the first on this line: 'a\.md'\);"
                                         r" a run that ranks documents is scored with "
                                         r"dataset.unit=document"):
        run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit="chunk"))


def test_an_unknown_id_that_looks_like_a_known_one_is_told_apart_by_its_code_points(tmp_path):
    """``café.md`` on disk (NFC) and in the run file decomposed (NFD, as macOS file systems
    write names): printed alike, so the message names the line and the code points."""
    q = tmp_path / "q.jsonl"
    q.write_text(jsonl(QS))
    docs = write_tree(tmp_path / "docs", {**DOCS, "caf\u00e9.md": "# Cafe\n\nCoffee.\n"})
    ds = MarkdownDataset(str(docs), str(q), unit="document")
    path = tmp_path / "nfd.trec"
    path.write_text("1 Q0 a.md 1 2.0 x\n1 Q0 cafe\u0301.md 2 1.0 x\n")
    with pytest.raises(ValueError) as info:
        run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit="document"))
    message = str(info.value)
    assert message.startswith(f"{path}:2: 1 item id(s) are not document ids")
    assert ("'cafe\u0301.md' is not the known 'caf\u00e9.md': the same characters in other "
            "code points (U+0063 U+0061 U+0066 U+0065 U+0301 U+002E U+006D U+0064, NFD, "
            "against U+0063 U+0061 U+0066 U+00E9 U+002E U+006D U+0064, NFC: Unicode "
            "normalisation)") in message


def test_questions_the_file_does_not_rank_score_zero(tmp_path, caplog):
    ds = dataset(tmp_path, "document")
    path = write_run({"1": {"a.md": 2.0, "b.md": 1.0}}, tmp_path / "one.trec")
    result = run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit="document"))
    table = result.per_question.set_index("id")
    assert table.loc["1", "rr_at_10"] == 1.0 and table.loc["2", "rr_at_10"] == 0.0
    assert result.metrics["rr_at_10"] == 0.5
    # 3 of the 4: one answerable ("2") and two unanswerable, which the message said "score 0"
    assert "ranks no item for 3 question(s)" in caplog.text
    assert "an unanswerable one retrieves nothing and so abstains" in caplog.text


def test_query_ids_of_the_file_that_no_question_has_are_counted(tmp_path, caplog):
    # A run of another question set, or ids written otherwise ("Q1" for "1"), was dropped
    # without a word; only "ranks no item for N question(s)" hinted at it.
    ds = dataset(tmp_path, "document")
    path = write_run({"1": {"a.md": 2.0}, "Q2": {"b.md": 1.0}, "qZ": {"c.md": 1.0}},
                     tmp_path / "stray.trec")
    result = run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit="document"))
    assert result.metrics["rr_at_10"] == 0.5
    said = [r.getMessage() for r in caplog.records if "does not score" in r.getMessage()]
    assert len(said) == 1 and "ranks 2 query id(s) this run does not score" in said[0]
    assert "'Q2', 'qZ'" in said[0] and "'1'" in said[0]


def test_a_reranker_over_the_file_s_ranking_is_said(tmp_path, caplog):
    # retriever=trec_run with the default reranker=lexical scored RR@10 0.667 against the
    # file's own 0.440, without a word
    from ragexp.stages.rerankers import LexicalReranker

    ds = dataset(tmp_path, "document")
    path = write_run({"1": {"a.md": 2.0, "b.md": 1.0}, "2": {"b.md": 1.0}}, tmp_path / "r.trec")
    run(ds, tmp_path, lambda res: TrecRunRetriever(res, str(path), unit="document"))
    assert "reorders the top" not in caplog.text
    run_experiment(ds, Stages(MarkdownChunker(max_words=10, overlap_words=0),
                              lambda: HashEmbedder(),
                              lambda res: TrecRunRetriever(res, str(path), unit="document"),
                              LexicalReranker(top_n=20), LexicalSignal(),
                              cache=EmbeddingCache(str(tmp_path / "c"))), progress=False)
    assert f"reranker=lexical reorders the top 20 of {path}'s ranking before it is scored: " \
           f"reranker=none scores the file's own order" in caplog.text
