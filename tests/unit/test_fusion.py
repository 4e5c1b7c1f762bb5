"""Fusion (``stages/fusion``): reciprocal rank fusion on hand cases, every method and
normalisation against ranx's ``fuse`` on the same runs (scores to 1e-9, same order), DBSF
against a stdlib reference, and the hybrid retriever's parts."""

from __future__ import annotations

import random
import statistics

import pytest

from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import Chunk, ordered
from ragexp.stages.fusion.norm import NORMS, normalised
from ragexp.stages.fusion.rank import RRF, WeightedRRF, rrf
from ragexp.stages.fusion.score import CombMNZ, CombSUM, Convex
from ragexp.stages.retrievers import HybridRetriever, Part

R1 = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}   # a, b, c
R2 = {"q": {"b": 5.0, "d": 4.0, "a": 0.5}}   # b, d, a


def test_rrf_at_k60_by_hand():
    fused = rrf({"x": R1, "y": R2}, k=60)["q"]
    assert fused == pytest.approx({"a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 61,
                                   "c": 1 / 63, "d": 1 / 62})
    assert ordered(fused) == ["b", "a", "d", "c"]


def test_rrf_at_k0_is_plain_reciprocal_rank():
    # x is first in one list only; y is second in both; z is third in both.
    r1 = {"q": {"x": 3.0, "y": 2.0, "z": 1.0}}
    r2 = {"q": {"w": 3.0, "y": 2.0, "z": 1.0}}
    fused = rrf({"1": r1, "2": r2}, k=0)["q"]
    assert fused == pytest.approx({"x": 1.0, "w": 1.0, "y": 0.5 + 0.5, "z": 1 / 3 + 1 / 3})
    assert fused["x"] == fused["y"]  # one first place ties two second places
    assert fused["z"] < fused["x"]


def test_weighted_rrf_by_hand():
    # bm25 weighs 0.5: b (2nd in x, 1st in bm25) = 1/62 + 0.5/61.
    fused = WeightedRRF(k=60, weights={"bm25": 0.5}).fuse({"x": R1, "bm25": R2})["q"]
    assert fused == pytest.approx({"a": 1 / 61 + 0.5 / 63, "b": 1 / 62 + 0.5 / 61,
                                   "c": 1 / 63, "d": 0.5 / 62})
    assert ordered(fused) == ["a", "b", "c", "d"]  # with equal weights b led


def test_input_ties_follow_the_shared_tie_rule():
    # Tied scores rank by id descending, so b is first and a second.
    fused = rrf({"x": {"q": {"a": 1.0, "b": 1.0}}}, k=60)["q"]
    assert fused == pytest.approx({"b": 1 / 61, "a": 1 / 62})


def test_queries_missing_from_one_ranking():
    fused = rrf({"x": {"q1": {"a": 1.0}}, "y": {"q2": {"b": 1.0}}}, k=10)
    assert set(fused) == {"q1", "q2"}
    assert fused["q1"] == pytest.approx({"a": 1 / 11})
    assert fused["q2"] == pytest.approx({"b": 1 / 11})


@pytest.mark.parametrize("make", [lambda: RRF(k=-1), lambda: WeightedRRF(weights={"a": -1}),
                                  lambda: CombSUM(norm="max"), lambda: Convex(alpha=1.5)])
def test_bad_parameters_raise(make):
    with pytest.raises(ValueError, match="fusion"):
        make()


def test_combmnz_and_minmax_by_hand():
    # minmax: x -> a 1, b .5, c 0; y -> b 1, d 3.5/4.5, a 0.
    fused = CombMNZ("minmax").fuse({"x": R1, "y": R2})["q"]
    assert fused == pytest.approx({"a": 2 * 1.0, "b": 2 * 1.5, "c": 0.0, "d": 3.5 / 4.5})


def test_convex_needs_its_part_and_one_other():
    with pytest.raises(ValueError, match="exactly two parts"):
        Convex(part="dense").fuse({"x": R1, "y": R2})
    fused = Convex(alpha=0.25, part="x").fuse({"x": R1, "y": R2})["q"]
    assert fused["a"] == pytest.approx(0.25 * 1.0 + 0.75 * 0.0)
    assert fused["d"] == pytest.approx(0.75 * 3.5 / 4.5)


# ------------------------------------------------------------- differential against ranx

def _runs(seed: int, parts: int = 3, queries: int = 6):
    """Random runs with distinct scores (ties would leave the order to each library's tie rule):
    each part ranks a random subset of 30 items, at its own score scale."""
    rng = random.Random(seed)
    items = [f"d{i:02d}" for i in range(30)]
    out = {}
    for p in range(parts):
        scale = rng.choice([1.0, 10.0, 0.01])
        out[f"p{p}"] = {f"q{q}": {d: scale * rng.random() for d in rng.sample(items, rng.randint(
            2, 20))} for q in range(queries)}
    return out


def _ranx(runs, norm, method, params=None):
    from ranx import Run, fuse

    fused = fuse([Run(r) for r in runs.values()], norm=norm, method=method, params=params or {})
    return {q: dict(scores) for q, scores in fused.to_dict().items()}


def _same(ours, theirs):
    assert set(ours) == set(theirs)
    for q in ours:
        assert set(ours[q]) == set(theirs[q]), q
        for item, s in ours[q].items():
            assert s == pytest.approx(theirs[q][item], abs=1e-9, rel=0), (q, item)
        ranked = sorted(theirs[q], key=lambda i: -theirs[q][i])
        assert ordered(ours[q]) == ranked or _tied_only(ours[q], ordered(ours[q]), ranked), q


def _tied_only(scores, a, b):
    """Orders that differ only among items whose scores tie (to 1e-12)."""
    return [round(scores[i], 12) for i in a] == [round(scores[i], 12) for i in b]


RANX_NORM = {"minmax": "min-max", "zscore": "zmuv", "sum": "sum"}


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [0.0, 60.0])
def test_rrf_equals_ranx(seed, k):
    runs = _runs(seed)
    _same(RRF(k).fuse(runs), _ranx(runs, None, "rrf", {"k": k}))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_weighted_rrf_equals_ranx_wsum_of_rrf(seed):
    """ranx has no weighted RRF: its ``wsum`` (no normalisation) of each part's ranx ``rrf``."""
    from ranx import Run
    from ranx.fusion import rrf as ranx_rrf
    from ranx.fusion import wsum

    runs, weights = _runs(seed), {"p0": 0.3, "p1": 1.7, "p2": 1.0}
    scored = [ranx_rrf([Run(r)], k=20) for r in runs.values()]
    theirs = wsum(scored, weights=[weights[p] for p in runs]).to_dict()
    _same(WeightedRRF(20, weights).fuse(runs), theirs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("norm", sorted(RANX_NORM))
@pytest.mark.parametrize(("ours", "method"), [(CombSUM, "sum"), (CombMNZ, "mnz")])
def test_score_fusion_equals_ranx(seed, norm, ours, method):
    runs = _runs(seed)
    _same(ours(norm).fuse(runs), _ranx(runs, RANX_NORM[norm], method))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("norm", sorted(RANX_NORM))
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_convex_equals_ranx_wsum(seed, norm, alpha):
    runs = _runs(seed, parts=2)
    theirs = _ranx(runs, RANX_NORM[norm], "wsum", {"weights": [alpha, 1 - alpha]})
    _same(Convex(alpha, part="p0", norm=norm).fuse(runs), theirs)


def _dbsf_reference(scores: dict[str, float]) -> dict[str, float]:
    """DBSF as Qdrant describes it: limits at mean -+ 3 standard deviations (population)."""
    mean, sd = statistics.fmean(scores.values()), statistics.pstdev(scores.values())
    lo, hi = mean - 3 * sd, mean + 3 * sd
    return {d: (s - lo) / max(hi - lo, 1e-9) for d, s in scores.items()}


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("ours", "method"), [(CombSUM, "sum"), (CombMNZ, "mnz")])
def test_dbsf_equals_a_stdlib_reference_fused_by_ranx(seed, ours, method):
    runs = _runs(seed)
    referenced = {p: {q: _dbsf_reference(s) for q, s in r.items()} for p, r in runs.items()}
    _same(ours("dbsf").fuse(runs), _ranx(referenced, None, method))


def test_one_score_normalises_without_dividing_by_zero():
    for norm in NORMS:
        (value,) = normalised({"q": {"a": 4.2}}, norm)["q"].values()
        assert value == 0.0


# ------------------------------------------------------------------------- hybrid parts

@pytest.fixture()
def resources(tmp_path):
    from ragexp.index.cache import EmbeddingCache

    chunks = [Chunk(f"c{i}", "d", text) for i, text in
              enumerate(["alpha beta", "beta gamma", "gamma delta", "delta alpha"])]
    return Resources(chunks, lambda: HashEmbedder(dim=64), EmbeddingCache(str(tmp_path)),
                     progress=False)


class _Fixed:
    """A retriever that returns a fixed ranking, as deep as asked."""

    name = "fixed"

    def __init__(self, ranking):
        self.ranking, self.asked = ranking, []

    def search(self, queries, k, cached=True):
        self.asked.append(k)
        return {q: {i: self.ranking[q][i] for i in ordered(self.ranking[q])[:k]}
                for q in queries}


def _part(ranking, depth):
    fixed = _Fixed(ranking)
    return Part(lambda resources: fixed, depth), fixed


def test_hybrid_with_every_part_off_raises(resources):
    with pytest.raises(ValueError, match="enable at least one"):
        HybridRetriever(resources, {"dense": None, "bm25": None}, RRF())
    assert not resources.embedder_used


def test_hybrid_part_depth_must_be_positive(resources):
    part, _ = _part(R1, 0)
    with pytest.raises(ValueError, match=r"retriever\.parts\.x\.depth"):
        HybridRetriever(resources, {"x": part}, RRF())


def test_hybrid_fuses_each_part_cut_to_its_own_depth(resources):
    (p1, f1), (p2, f2) = _part(R1, 1), _part(R2, 3)
    hybrid = HybridRetriever(resources, {"x": p1, "y": p2, "off": None}, RRF(60))
    out = hybrid.search({"q": "anything"}, k=2)["q"]
    # x gives a only; y gives b, d, a: a = 1/61 + 1/63, b = 1/61, d = 1/62.
    assert out == pytest.approx({"a": 1 / 61 + 1 / 63, "b": 1 / 61})
    assert f1.asked == [2] and f2.asked == [3]  # max(k, depth)


def test_hybrid_cut_follows_the_shared_tie_rule(resources):
    # a and z tie (first in one list each); the cut to k=1 must keep ordered()'s first: z.
    r1, r2 = {"q": {"a": 2.0, "b": 1.0}}, {"q": {"z": 2.0, "y": 1.0}}
    expected = ordered(rrf({"1": r1, "2": r2}, k=60)["q"])[:1]
    for first, second in ((r1, r2), (r2, r1)):
        parts = {"x": _part(first, 10)[0], "y": _part(second, 10)[0]}
        assert list(HybridRetriever(resources, parts, RRF()).search({"q": "x"}, 1)["q"]) \
            == expected
