"""The ``index`` group: blocked exact search (bit-identical whatever the block), FAISS's
approximate indexes against exact search, their stage reuse, and the checks on their keys."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import CORPUS, GOLDEN
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf

from ragexp.config import validation
from ragexp.config.build import Stages, build
from ragexp.data.datasets import MarkdownDataset
from ragexp.errors import InvalidValue
from ragexp.evaluation.measures import parse_all
from ragexp.index import ann
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.flat import PASSAGE_TILE, FlatIPIndex, top_k_ties_by_id
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore
from ragexp.records import Chunk
from ragexp.run.app import CONF_DIR
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import DenseRetriever


def _unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def tied():
    """2,600 passages of which 400 are copies of others (every copy ties with its original for
    every query), and 90 queries of which 30 are passages and 20 repeat other queries."""
    rng = np.random.default_rng(7)
    base = _unit(rng, 2600, 24)
    base[1000:1300] = base[:300]
    base[2500:2600] = base[:100]
    queries = _unit(rng, 90, 24)
    queries[40:70] = base[:30]
    queries[70:90] = queries[:20]
    return base, queries


def _reference(base, queries, k):
    """Independent top k: float64 numpy scores, ties by the lower id (np.lexsort)."""
    full = queries.astype(np.float64) @ base.astype(np.float64).T
    ids = np.array([np.lexsort((np.arange(len(base)), -row))[:k] for row in full])
    return np.take_along_axis(full, ids, axis=1), ids


# ---------------------------------------------------------------- blocked exact search

@pytest.mark.parametrize("k", [10, 150])
def test_blocked_search_is_bit_identical_whatever_the_block(tied, k):
    base, queries = tied
    one_s, one_i = FlatIPIndex(base, block_size=len(base)).search(queries, k)
    assert one_s.dtype == np.float32 and one_i.dtype == np.int64 and one_i.shape == (90, k)
    for block in (1, 700, PASSAGE_TILE, 2 * PASSAGE_TILE + 1, 10_000):
        s, i = FlatIPIndex(base, block_size=block).search(queries, k)
        assert np.array_equal(s, one_s) and np.array_equal(i, one_i), block
    # each query alone (serving) gets the bits it gets in the batch
    for row in (0, 45, 89):
        s, i = FlatIPIndex(base, block_size=700).search(queries[row:row + 1], k)
        assert np.array_equal(s[0], one_s[row]) and np.array_equal(i[0], one_i[row])


@pytest.mark.parametrize("k", [10, 150])
def test_blocked_search_is_exact_with_ties_by_the_lower_id(tied, k):
    base, queries = tied
    scores, ids = FlatIPIndex(base, block_size=1000).search(queries, k)
    ref_s, ref_i = _reference(base, queries, k)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    # a query that is passage 5 ranks it first, its copy at 1005 second, never the other way
    assert list(ids[45, :2]) == [5, 1005]
    # the default FAISS call finds the same neighbours (its tie order at the k-th place is
    # its own, and its scores may differ in the last bit)
    _, faiss_ids = FlatIPIndex(base).search(queries, k)
    same = np.mean([len(set(a) & set(b)) / k for a, b in zip(faiss_ids, ids)])
    assert same > 0.95  # copies tied at the k-th place


def test_top_k_ties_by_id_cuts_a_tie_at_the_k_th_place_by_id():
    scores = np.array([[0.5, 0.9, 0.5, 0.5, 0.1]], dtype=np.float32)
    ids = np.array([[7, 3, 2, 9, 1]])
    s, i = top_k_ties_by_id(scores, ids, 3)
    assert i.tolist() == [[3, 2, 7]] and s.tolist() == [[pytest.approx(0.9), 0.5, 0.5]]
    s, i = top_k_ties_by_id(scores, ids, 9)  # fewer items than k: all, ordered
    assert i.tolist() == [[3, 2, 7, 9, 1]]


def test_block_size_below_one_is_refused(tied):
    with pytest.raises(InvalidValue, match="index.block_size"):
        FlatIPIndex(tied[0], block_size=0)


# ---------------------------------------------------------------- approximate indexes

@pytest.fixture(scope="module")
def clustered():
    """3,000 passages around 60 centres (so lists and graphs have structure), 50 queries."""
    rng = np.random.default_rng(3)
    centres = _unit(rng, 60, 32)
    x = centres[rng.integers(0, 60, 3000)] + 0.25 * rng.normal(size=(3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = centres[rng.integers(0, 60, 50)] + 0.25 * rng.normal(size=(50, 32)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x.astype(np.float32), q.astype(np.float32)


def _recall(spec, x, q, k=10):
    _, exact = FlatIPIndex(x).search(q, k)
    _, found = spec.searcher(spec.build(x)).search(q, k)
    return ann.recall_vs_exact(found, exact)


def test_ivf_probing_every_list_is_exact_search(clustered):
    x, q = clustered
    spec = ann.IVFSpec(nlist=16, nprobe=16)
    scores, ids = spec.searcher(spec.build(x)).search(q, 10)
    ref_s, ref_i = _reference(x, q, 10)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)


@pytest.mark.slow
def test_approximate_recall_grows_with_the_query_time_setting(clustered):
    x, q = clustered
    assert _recall(ann.HNSWSpec(M=16, ef_search=128), x, q) >= 0.95
    low, high = (_recall(ann.IVFSpec(nlist=64, nprobe=p), x, q) for p in (1, 32))
    assert low < high and high >= 0.95
    assert _recall(ann.IVFPQSpec(nlist=16, nprobe=16, m=16, nbits=8), x, q) >= 0.5


def test_recall_vs_exact_counts_shared_ids_and_skips_padding():
    approx = np.array([[1, 2, 3], [4, -1, -1]])
    exact = np.array([[3, 2, 9], [4, 5, -1]])
    assert ann.recall_vs_exact(approx, exact) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_an_approximate_index_pickles_as_its_faiss_bytes(clustered):
    x, q = clustered
    spec = ann.HNSWSpec(M=8, ef_construction=40, ef_search=32)
    built = spec.build(x)
    again = pickle.loads(pickle.dumps(built))
    assert again.nbytes == built.nbytes > x.nbytes and again.build_s == built.build_s
    a, b = (spec.searcher(v).search(q, 10) for v in (built, again))
    np.testing.assert_array_equal(a[1], b[1])


def test_settings_the_corpus_cannot_hold_fail_at_build_naming_the_key(clustered):
    x, _ = clustered
    with pytest.raises(InvalidValue, match=r"^index.nlist=5000 is larger than the corpus "
                                           r"\(3000 passages\)"):
        ann.IVFSpec(nlist=5000).build(x)
    with pytest.raises(InvalidValue, match=r"index.m=7 does not divide"):
        ann.IVFPQSpec(nlist=8, m=7).build(x)
    with pytest.raises(InvalidValue, match=r"index.nbits=12 needs at least 4096"):
        ann.IVFPQSpec(nlist=8, m=8, nbits=12).build(x)


def _chunks(n):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rng = np.random.default_rng(0)
    return [Chunk(f"c{i}", f"d{i}", " ".join(rng.choice(words, 6)), "", ((0, 1),))
            for i in range(n)]


def test_a_sweep_over_ef_search_builds_the_graph_once(tmp_path):
    chunks, store = _chunks(300), StageStore(root=str(tmp_path / "stages"))
    events, rankings = [], []
    for ef in (16, 64, 16):
        res = Resources(chunks, lambda: HashEmbedder(dim=32), EmbeddingCache(str(tmp_path / "e")),
                        progress=False, stages=store, index_spec=ann.HNSWSpec(ef_search=ef))
        rankings.append(DenseRetriever(res).search({"q": "alpha beta"}, 10))
        events.append(store.events["hnsw_index"])
    assert events == ["built", "memory", "memory"]
    assert rankings[0] == rankings[2]
    store = StageStore(root=store.root, memory={})  # a new process: the graph comes from disk
    res = Resources(chunks, lambda: HashEmbedder(dim=32), EmbeddingCache(str(tmp_path / "e")),
                    progress=False, stages=store, index_spec=ann.HNSWSpec(ef_search=16))
    assert DenseRetriever(res).search({"q": "alpha beta"}, 10) == rankings[0]
    assert store.events["hnsw_index"] == "disk"


# ---------------------------------------------------------------- config and runs

def _cfg(*overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_every_index_option_composes_and_instantiates():
    kinds = {}
    for name in ann.options():  # every module of index/ann/ that declares an option
        cfg = _cfg(f"index={name}", "k=100")
        validation.validate(cfg)
        kinds[name] = type(build(cfg).index)
    assert kinds == ann.options()
    assert {"flat": ann.FlatSpec, "hnsw": ann.HNSWSpec, "ivf": ann.IVFSpec,
            "ivfpq": ann.IVFPQSpec}.items() <= kinds.items()
    assert _cfg().index.name == "flat" and _cfg().index.block_size is None


@pytest.mark.parametrize("overrides,message", [
    (["index=hnsw", "index.ef_search=64"], "index.ef_search=64 is out of range: must be >= the "
                                           "depth retrieved, max(k, reranker.top_n) = 100"),
    (["index=hnsw", "index.ef_search=64", "k=10", "reranker.top_n=80"], "= 80"),
    (["index=ivf", "index.nlist=8", "index.nprobe=9"], "index.nprobe=9 is out of range: must be "
                                                       "<= index.nlist (8)"),
    (["index=flat", "index.block_size=0"], "index.block_size=0 is out of range"),
])
def test_bad_index_keys_are_refused_at_composition(overrides, message):
    with pytest.raises(validation.ConfigRangeError) as err:
        validation.validate(_cfg(*overrides))
    assert message in str(err.value)


def test_an_unknown_index_is_refused_at_composition():
    with pytest.raises(HydraException, match="index"):
        _cfg("index=annoy")


def test_a_config_without_the_group_searches_exactly():
    cfg = OmegaConf.create(OmegaConf.to_container(_cfg()))  # as serving reads a run's config
    cfg.pop("index")
    assert build(cfg).index == ann.FlatSpec()


def test_a_run_on_hnsw_logs_its_recall_against_exact_search(tmp_path):
    dataset = MarkdownDataset(str(CORPUS), str(GOLDEN))

    def stages(spec):
        return Stages(MarkdownChunker(), lambda: HashEmbedder(), DenseRetriever, NoReranker(),
                      LexicalSignal(), cache=EmbeddingCache(str(tmp_path)), index=spec)
    measures = parse_all(["nDCG@10", "RR@10"])
    exact = run_experiment(dataset, stages(ann.FlatSpec()), k=10, measures=measures,
                           progress=False)
    approx = run_experiment(dataset, stages(ann.HNSWSpec(M=4, ef_construction=8, ef_search=10)),
                            k=10, measures=measures, progress=False)
    assert "index.recall_at_10_vs_exact" not in exact.metrics
    assert exact.metrics["index.bytes"] == exact.metrics["index.chunks"] * 512 * 4
    m = approx.metrics
    assert 0 < m["index.recall_at_10_vs_exact"] <= 1
    assert m["index.bytes"] > exact.metrics["index.bytes"] and m["index.build_s"] > 0
    assert 0 < m["index.search_p50_ms"] <= m["index.search_p95_ms"]
    # independent recall: the two runs' own top 10s, query by query
    shares = [len(set(approx.ranking[q]) & set(exact.ranking[q])) / len(exact.ranking[q])
              for q in exact.ranking if exact.ranking[q]]
    assert m["index.recall_at_10_vs_exact"] == pytest.approx(np.mean(shares), abs=0.05)


def test_recall_counts_a_tie_at_the_kth_place_as_a_hit_as_ann_benchmarks_does():
    # passages 2 and 7 tie at the 2nd place: exact search returns 2, the index returns 7
    exact = np.array([[5, 2]])
    exact_scores = np.array([[0.9, 0.5]], dtype=np.float32)
    approx = np.array([[5, 7]])
    true = np.array([[0.9, 0.5]], dtype=np.float32)
    assert ann.recall_vs_exact(approx, exact) == pytest.approx(0.5)  # ids only: a miss
    assert ann.recall_vs_exact(approx, exact, true, exact_scores) == pytest.approx(1.0)
    # a returned item below the k-th exact score is a miss either way
    lower = np.array([[0.9, 0.4]], dtype=np.float32)
    assert ann.recall_vs_exact(approx, exact, lower, exact_scores) == pytest.approx(0.5)


def test_a_small_hnsw_over_tied_vectors_reaches_recall_one():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(4, 16)).astype(np.float32)
    x = np.repeat(base, 3, axis=0)  # 12 passages, each tied with two copies
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[::3] + 0.01
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    spec = ann.HNSWSpec(M=8, ef_construction=40, ef_search=40)
    searcher = spec.searcher(spec.build(x))
    exact_scores, exact = FlatIPIndex(x).search(q, 10)
    _, found = searcher.search(q, 10)
    true = np.einsum("qkd,qd->qk", x[np.maximum(found, 0)], q)
    assert ann.recall_vs_exact(found, exact, true, exact_scores) == pytest.approx(1.0)


def test_every_option_is_named_in_configs_by_the_path_runs_have_always_recorded():
    """A config names an option ``ragexp.index.ann.<Spec>`` (part of every run's identity,
    ``tracking.config_hash``), wherever its module lives: the schema writes that path, and it
    resolves to the option's class, for configs recorded before ``index/ann/`` had a module per
    option too."""
    from hydra.utils import get_class

    for name, spec in ann.options().items():
        path = f"ragexp.index.ann.{spec.__name__}"
        assert _cfg(f"index={name}", "k=100").index._target_ == path
        assert get_class(path) is spec and spec.__module__ == f"ragexp.index.ann.{name}"
    with pytest.raises(AttributeError, match="no index option"):
        ann.AnnoySpec
