"""Reciprocal rank fusion on hand cases, and the hybrid retriever's guards."""

from __future__ import annotations

import pytest

from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import Chunk, ordered
from ragexp.stages.fusion import rrf
from ragexp.stages.retrievers import HybridRetriever

R1 = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}   # a, b, c
R2 = {"q": {"b": 5.0, "d": 4.0, "a": 0.5}}   # b, d, a


def test_rrf_at_k60_by_hand():
    fused = rrf([R1, R2], k=60)["q"]
    assert fused == pytest.approx({"a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 61,
                                   "c": 1 / 63, "d": 1 / 62})
    assert ordered(fused) == ["b", "a", "d", "c"]


def test_rrf_at_k0_is_plain_reciprocal_rank():
    # x is first in one list only; y is second in both; z is third in both.
    r1 = {"q": {"x": 3.0, "y": 2.0, "z": 1.0}}
    r2 = {"q": {"w": 3.0, "y": 2.0, "z": 1.0}}
    fused = rrf([r1, r2], k=0)["q"]
    assert fused == pytest.approx({"x": 1.0, "w": 1.0, "y": 0.5 + 0.5, "z": 1 / 3 + 1 / 3})
    assert fused["x"] == fused["y"]  # one first place ties two second places
    assert fused["z"] < fused["x"]


def test_depth_cuts_each_input_first():
    fused = rrf([R1, R2], k=60, depth=1)["q"]
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 61})
    fused = rrf([R1, R2], k=60, depth=2)["q"]
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "d": 1 / 62})


def test_input_ties_follow_the_shared_tie_rule():
    # Tied scores rank by id descending, so b is first and a second.
    fused = rrf([{"q": {"a": 1.0, "b": 1.0}}], k=60)["q"]
    assert fused == pytest.approx({"b": 1 / 61, "a": 1 / 62})


def test_queries_missing_from_one_ranking():
    fused = rrf([{"q1": {"a": 1.0}}, {"q2": {"b": 1.0}}], k=10)
    assert set(fused) == {"q1", "q2"}
    assert fused["q1"] == pytest.approx({"a": 1 / 11})
    assert fused["q2"] == pytest.approx({"b": 1 / 11})


def test_negative_k_raises():
    with pytest.raises(ValueError, match="k must be >= 0"):
        rrf([R1], k=-1)


@pytest.fixture()
def resources(tmp_path):
    from ragexp.index.cache import EmbeddingCache

    chunks = [Chunk(f"c{i}", "d", text) for i, text in
              enumerate(["alpha beta", "beta gamma", "gamma delta", "delta alpha"])]
    return Resources(chunks, lambda: HashEmbedder(dim=64), EmbeddingCache(str(tmp_path)),
                     progress=False)


def test_hybrid_with_every_signal_off_raises(resources):
    with pytest.raises(ValueError, match="enable at least one"):
        HybridRetriever(resources, dense=False, bm25=False)
    assert not resources.embedder_used


def test_hybrid_depth_must_be_positive(resources):
    with pytest.raises(ValueError, match="depth"):
        HybridRetriever(resources, dense=False, depth=0)


class _Fixed:
    """A retriever that returns a fixed ranking."""

    def __init__(self, ranking):
        self.ranking = ranking

    def search(self, queries, k, cached=True):
        return {q: dict(self.ranking[q]) for q in queries}


def test_hybrid_equals_rrf_of_its_parts(resources):
    hybrid = HybridRetriever(resources, dense=False, bm25=True, rrf_k=60, depth=3)
    hybrid.parts = [_Fixed(R1), _Fixed(R2)]
    out = hybrid.search({"q": "anything"}, k=4)["q"]
    assert out == pytest.approx(rrf([R1, R2], k=60, depth=3)["q"])


def test_hybrid_cut_follows_the_shared_tie_rule(resources):
    # a and z tie (first in one list each); the cut to k=1 must keep ordered()'s first: z.
    r1, r2 = {"q": {"a": 2.0, "b": 1.0}}, {"q": {"z": 2.0, "y": 1.0}}
    hybrid = HybridRetriever(resources, dense=False, bm25=True, depth=10)
    expected = ordered(rrf([r1, r2], k=60, depth=10)["q"])[:1]
    for parts in ([r1, r2], [r2, r1]):
        hybrid.parts = [_Fixed(p) for p in parts]
        assert list(hybrid.search({"q": "x"}, k=1)["q"]) == expected
