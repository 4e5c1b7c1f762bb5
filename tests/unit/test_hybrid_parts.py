"""Hybrid parts with settings of their own: a BM25 part fitted with other parameters than the
run's ``bm25`` group, fused beside the run's BM25 and dense, each BM25 part checked against
bm25s (fed ragexp's tokens) and neither served from the other's index or cached rankings."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from ragexp.config import build, schema
from ragexp.errors import InvalidValue
from ragexp.index.bm25 import BM25Params
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore
from ragexp.records import ordered
from ragexp.run.app import CONF_DIR
from ragexp.session import Session
from ragexp.stages.fusion.rank import rrf
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever
from ragexp.text.analysis import tokenize

schema.register()

BM25L_PART = ("  bm25_l:\n    retriever:\n      _target_: ragexp.stages.retrievers.BM25Retriever\n"
              "      _partial_: true\n      method: bm25l\n      k1: 1.2\n    depth: 50\n")


def _resources(chunks, built=None, store=None):
    res = Resources(chunks, built.make_embedder if built else (lambda: None),
                    built.cache if built else None, progress=False,
                    bm25_params=built.bm25 if built else BM25Params(),
                    stages=store or StageStore(root=None, enabled=True))
    if built:
        res.cache.enabled = False
    return res


def _bm25s_ranking(chunks, queries, depth, **params):
    """Each query's best ``depth`` chunks among those holding a query term, scored by bm25s."""
    docs = [tokenize(c.text) for c in chunks]
    ref = bm25s.BM25(dtype="float64", **params)
    ref.index(docs, show_progress=False)
    out = {}
    for q, text in queries.items():
        terms = tokenize(text)
        known = [t for t in terms if t in ref.vocab_dict]
        scores = ref.get_scores(known) if known else np.zeros(len(chunks))
        held = {chunks[i].chunk_id: float(scores[i]) for i, d in enumerate(docs)
                if set(terms) & set(d)}
        out[q] = {i: held[i] for i in ordered(held)[:depth]}
    return out


# BM25 weights are float32 (summed in float64): a score is within 2^-24 of bm25s's float64
# one, relatively; checked with a factor 2 margin.
F32 = 2.0 ** -23


def _same(ours, theirs):
    """Per query, the same scores best first (to float32 precision) on the same chunks, but for
    chunks tied (to that precision) at the depth cut: float sums in another order, or float32
    weights, may break a tie either way."""
    assert set(ours) == set(theirs)
    for q in ours:
        a, b = ordered(ours[q]), ordered(theirs[q])
        assert [ours[q][i] for i in a] == pytest.approx([theirs[q][i] for i in b], rel=F32,
                                                        abs=1e-9), q
        last = theirs[q][b[-1]] if b else 0.0
        cut = last + 2 * F32 * abs(last) + 1e-9
        assert {i for i in a if ours[q][i] > cut} == {i for i in b if theirs[q][i] > cut}, q


@pytest.fixture
def queries(golden):
    return {q.qid: q.text for q in golden[:8]}


def test_a_bm25_part_with_its_own_parameters_fuses_as_its_parts_computed_apart(
        chunks, queries, tmp_path):
    """``retriever=hybrid_bm25l`` (an option file of the user's: dense + bm25 + bm25_l with
    ``method: bm25l, k1: 1.2``): its ranking is RRF of the three parts, the BM25 ones computed
    by bm25s with each part's parameters, the dense one by a retriever of its own."""
    own = tmp_path / "conf"
    (own / "retriever").mkdir(parents=True)
    (own / "retriever" / "hybrid_bm25l.yaml").write_text(
        (Path(CONF_DIR) / "retriever" / "hybrid.yaml").read_text() + BM25L_PART)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.searchpath=[file://{own}]",
                                           "retriever=hybrid_bm25l", "embedder=hash",
                                           f"cache_dir={tmp_path}", "bm25.k1=0.9"])
    built = build.build(cfg)
    res = _resources(chunks, built)
    hybrid = built.make_retriever(res)
    assert sorted(hybrid.parts) == ["bm25", "bm25_l", "dense"]
    assert hybrid.parts["bm25"].params == BM25Params(k1=0.9)
    assert hybrid.parts["bm25_l"].params == BM25Params(k1=1.2, method="bm25l")
    got = hybrid.search(queries, 10)

    parts = {"dense": DenseRetriever(_resources(chunks, built)).search(queries, 100),
             "bm25": _bm25s_ranking(chunks, queries, 100, method="lucene", k1=0.9, b=0.75),
             "bm25_l": _bm25s_ranking(chunks, queries, 50, method="bm25l", k1=1.2, b=0.75,
                                      delta=0.5)}
    for name in ("bm25", "bm25_l"):
        _same(hybrid.parts[name].search(queries, hybrid.depths[name]), parts[name])
    expected = rrf(parts, 60.0)
    assert {q: ordered(s) for q, s in got.items()} == {q: ordered(s)[:10]
                                                       for q, s in expected.items()}
    two = rrf({p: parts[p] for p in ("dense", "bm25")}, 60.0)
    assert any(ordered(got[q]) != ordered(two[q])[:10] for q in queries)  # bm25_l counted


def test_two_bm25_parts_never_share_an_index_or_a_cached_ranking(chunks, queries):
    res = _resources(chunks)
    run, own = BM25Retriever(res), BM25Retriever(res, method="bm25l", k1=1.2)
    assert run.index is res.bm25 and own.index is not res.bm25
    assert BM25Retriever(res, k1=1.5).index is res.bm25  # the run's parameters: the run's index
    first = run.search(queries, 20)
    second = own.search(queries, 20)  # same queries and depth: a shared cache would serve first
    _same(first, _bm25s_ranking(chunks, queries, 20, method="lucene", k1=1.5, b=0.75))
    _same(second, _bm25s_ranking(chunks, queries, 20, method="bm25l", k1=1.2, b=0.75,
                                 delta=0.5))
    assert any(ordered(first[q]) != ordered(second[q]) for q in queries)
    assert run.search(queries, 20) == first  # the run's cached ranking, not the part's
    assert res.stages.events["bm25_search"] == "memory"
    assert res.stages.events[own.stage] == "built"
    assert own.stage.startswith("bm25_") and own.stage != "bm25_search"
    Session.start()
    alone = _resources(chunks)  # a fresh run (no cached stage): the same rankings
    assert BM25Retriever(alone, method="bm25l", k1=1.2).search(queries, 20) == second
    assert BM25Retriever(alone).search(queries, 20) == first


@pytest.mark.parametrize("bad", [{"b": 1.5}, {"k1": -1.0}, {"delta": -0.1}, {"method": "bm26"}])
def test_a_bm25_part_out_of_range_is_refused(chunks, bad):
    with pytest.raises(InvalidValue):
        BM25Retriever(_resources(chunks), **bad)
