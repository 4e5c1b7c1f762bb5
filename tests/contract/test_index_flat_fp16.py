"""``index=flat_fp16`` meets the ``Index`` contract, holds half of ``flat``'s bytes, finds what
exact search finds on well-separated scores, and composes, builds and runs as an option."""

import numpy as np
from contract.contracts import QUERIES, IndexContract, RetrieverContract, resources
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from ragexp.index import ann
from ragexp.index.ann.flat_fp16 import FlatFP16Spec
from ragexp.index.flat import FlatIPIndex
from ragexp.index.resources import dense_facts
from ragexp.run.app import CONF_DIR  # registers the schemas
from ragexp.stages.retrievers import DenseRetriever


class TestFlatFP16(IndexContract):
    exact = False  # float16 rounding may swap passages scored within ~1e-5

    def get_index(self):
        return FlatFP16Spec()


class TestDenseFlatFP16(RetrieverContract):
    exact = False

    def get_retriever(self, resources):
        resources.index_spec = FlatFP16Spec()
        return DenseRetriever(resources)


def test_half_the_bytes_of_flat_and_the_same_neighbours_on_separated_scores():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    built = FlatFP16Spec().build(x)
    assert built.nbytes < 0.55 * x.nbytes
    scores, ids = FlatFP16Spec().searcher(built).search(x[:50], 10)
    exact_scores, exact = FlatIPIndex(x).search(x[:50], 10)
    assert np.abs(scores - exact_scores).max() < 1e-3
    assert ann.recall_vs_exact(ids, exact) >= 0.99


def test_a_run_logs_its_bytes_and_its_recall_against_exact_search(tmp_path):
    res = resources(tmp_path, index_spec=FlatFP16Spec())
    DenseRetriever(res).search(QUERIES, 3)
    facts = dense_facts(res, list(QUERIES.values()))
    assert facts["index.bytes"] > 0 and facts["index.recall_at_10_vs_exact"] == 1.0
    assert facts["index.search_p95_ms"] >= facts["index.search_p50_ms"] > 0


def test_the_option_composes_and_instantiates():
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["index=flat_fp16"])
    assert cfg.index._target_ == "ragexp.index.ann.FlatFP16Spec"
    assert instantiate(cfg.index) == FlatFP16Spec()
