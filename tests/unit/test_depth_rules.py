"""Every depth checked against the cutoffs it feeds, when the config is composed: a hybrid
part's depth against the deepest measure cutoff, ``reranker.top_n`` against the first stage's
depth, ``answer.n_chunks`` against ``k``; and the issue's example rebuilt, where depth 1 loses
a relevant item that an adequate depth keeps."""

from __future__ import annotations

import math

import pytest
from conftest import FixedRetriever
from workspaces import compose_config as cfg_with

from ragexp.config import schema, validation
from ragexp.evaluation import measures
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import Chunk, ordered
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.retrievers import HybridRetriever, Part

schema.register()
SMALL = "measures=[R@10,nDCG@10]"


def problems(*overrides: str) -> str:
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg_with(*overrides))
    return str(info.value)


def test_the_issue_example_is_refused_naming_both_keys():
    text = problems("retriever=hybrid", "retriever.parts.dense.depth=1", "k=10", SMALL)
    assert ("retriever.parts.dense.depth=1 is below the deepest measure cutoff 10 (R@10 in "
            "measures)") in text
    assert "bm25" not in text  # only the part that is too shallow
    validation.validate(cfg_with("retriever=hybrid", "retriever.parts.dense.depth=10", "k=10",
                                 SMALL))


def test_a_part_switched_off_has_no_depth_to_check():
    validation.validate(cfg_with("retriever=hybrid", "retriever.parts.bm25=null", "k=10", SMALL))


def test_rerank_deeper_than_the_first_stage_is_refused():
    text = problems("retriever=hybrid", "reranker.top_n=150")
    assert ("reranker.top_n=150 is above the first-stage depth retriever.parts.dense.depth=100"
            in text)
    validation.validate(cfg_with("retriever=hybrid", "reranker.top_n=100"))
    validation.validate(cfg_with("reranker.top_n=150"))  # dense alone retrieves top_n deep


def test_answer_reading_deeper_than_k_is_refused():
    text = problems("k=10", SMALL, "answer.n_chunks=12")
    assert "answer.n_chunks=12" in text and "k=10" in text


def test_convex_with_one_part_on_is_refused():
    text = problems("retriever=hybrid", "fusion=convex", "retriever.parts.bm25=null")
    assert "fusion=convex combines exactly two parts" in text
    validation.validate(cfg_with("retriever=hybrid", "fusion=convex"))


def test_the_issue_example_measures_right_at_an_adequate_depth(tmp_path):
    """One question, relevant items a and b. The dense part ranks a, b, c..h; BM25 ranks a, then
    c..h (not b). RRF (k=60) at depth 10 puts a first, c..h (in both parts) next and b eighth:
    R@10 = 1, nDCG@10 = (1 + 1/log2(9)) / (1 + 1/log2(3)) = 0.8066. At depth 1 each part gives a
    only: R@10 = 0.5, nDCG@10 = 1 / (1 + 1/log2(3)) = 0.6131, the wrong values the issue found."""
    rest = list("cdefgh")
    res = Resources([Chunk("x", "d", "x")], lambda: HashEmbedder(dim=8), progress=False)
    rel = {"a": 1, "b": 1}
    r10, ndcg10 = measures.parse("R@10"), measures.parse("nDCG@10")
    expected = {10: (1.0, (1 + 1 / math.log2(9)) / (1 + 1 / math.log2(3))),
                1: (0.5, 1 / (1 + 1 / math.log2(3)))}
    assert expected[10][1] == pytest.approx(0.8066, abs=5e-5)
    assert expected[1][1] == pytest.approx(0.6131, abs=5e-5)
    for depth, (recall, ndcg) in expected.items():
        parts = {"dense": Part(lambda r: FixedRetriever(["a", "b", *rest]), depth),
                 "bm25": Part(lambda r: FixedRetriever(["a", *rest]), depth)}
        ranked = ordered(HybridRetriever(res, parts, RRF(60)).search({"q": "?"}, 10)["q"])
        assert r10(ranked, rel) == pytest.approx(recall)
        assert ndcg10(ranked, rel) == pytest.approx(ndcg)
    assert ranked == ["a"]  # depth 1
