"""``retriever=hybrid`` with ``fusion=rrf`` ranks as the hybrid retriever ranked before fusion
became a config group, from today's config and from a recorded config of old.

``fixtures/hybrid_rrf_rankings.json.gz`` holds the rankings that code computed (commit 844f307,
``fixtures/make_hybrid_rrf_rankings.py``) on the handbook with the hash embedder, for three
settings of its old keys (``dense``, ``bm25``, ``rrf_k``, ``depth``). The recorded config is the
one in ``fixtures/premove-store.tar.gz`` (a run of the flat-module era), its retriever set to
the old hybrid form, as a recorded hybrid run has it."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragexp import legacy
from ragexp.config import build, schema
from ragexp.index.resources import Resources
from ragexp.run.app import CONF_DIR

FIXTURES = Path(__file__).parents[1] / "fixtures"
schema.register()

# the old keys of each recorded setting -> today's overrides
TODAY = {"k60_depth100": [],
         "k20_depth30_bm25only": ["fusion.k=20", "retriever.parts.dense=null",
                                  "retriever.parts.bm25.depth=30"],
         "k0_depth10": ["fusion.k=0", "retriever.parts.dense.depth=10",
                        "retriever.parts.bm25.depth=10"]}


@pytest.fixture(scope="module")
def recorded():
    with gzip.open(FIXTURES / "hybrid_rrf_rankings.json.gz", "rt") as f:
        return json.load(f)


@pytest.fixture(autouse=True)
def index_tie_cut(monkeypatch):
    """The parts cut ties at their depth as the index does (the lower position), as the code
    that recorded the rankings did: since then a part cuts them by id as trec_eval orders them
    (``index.cutoff``), which changes which tied chunks enter fusion, not how fusion ranks."""
    from ragexp.stages import retrievers

    def index_cut(search, n_rows, k, n_items, key):
        scores, ids = search(np.arange(n_rows), min(k, n_items))
        return list(zip(ids, scores))

    monkeypatch.setattr(retrievers, "top_k_by_id", index_cut)


def _search(cfg, chunks, golden, k, tmp_path):
    built = build.build(cfg)
    res = Resources(chunks, built.make_embedder, built.cache, bm25_params=built.bm25,
                    progress=False)
    res.cache.enabled = False
    ranking = built.make_retriever(res).search({q.qid: q.text for q in golden}, k)
    return {q: [[c, s] for c, s in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]
            for q, scores in ranking.items()}


def _same(ours, theirs):
    assert set(ours) == set(theirs)
    for q in ours:
        assert [c for c, _ in ours[q]] == [c for c, _ in theirs[q]], q
        assert [s for _, s in ours[q]] == pytest.approx([s for _, s in theirs[q]], abs=1e-12)


@pytest.mark.parametrize("setting", sorted(TODAY))
def test_fusion_rrf_ranks_as_before(setting, recorded, chunks, golden, tmp_path):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["retriever=hybrid", "embedder=hash",
                                           f"cache_dir={tmp_path}", *TODAY[setting]])
    old = recorded[setting]
    _same(_search(cfg, chunks, golden, old["k"], tmp_path), old["ranking"])


def _premove_config():
    with tarfile.open(FIXTURES / "premove-store.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/config.yaml"))
        return OmegaConf.create(tar.extractfile(member).read().decode())


@pytest.mark.parametrize("setting", sorted(TODAY))
def test_a_recorded_hybrid_config_loads_as_parts_and_ranks_the_same(setting, recorded, chunks,
                                                                    golden, tmp_path):
    old = recorded[setting]
    cfg = _premove_config()
    cfg.cache_dir = str(tmp_path)
    cfg.retriever = {"_target_": "ragexp.retrievers.HybridRetriever", "name": "hybrid",
                     "dense": True, "bm25": True, "rrf_k": 60.0, "depth": 100,
                     **old["kwargs"]}
    assert "fusion" not in cfg
    up = legacy.upgrade(cfg)
    assert set(up.retriever) == {"_target_", "name", "parts", "fusion"}
    assert up.retriever.fusion.k == old["kwargs"]["rrf_k"] == up.fusion.k
    assert (up.retriever.parts.dense is None) == (old["kwargs"].get("dense") is False)
    assert "rrf_k" in cfg.retriever  # the recorded config itself is left as it was
    _same(_search(up, chunks, golden, old["k"], tmp_path), old["ranking"])


def test_upgrade_leaves_todays_hybrid_config_alone():
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["retriever=hybrid", "fusion=convex"])
    plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    assert legacy.upgrade(plain) == plain


FUSIONS = [["fusion=rrf"], ["fusion=weighted_rrf", "fusion.weights.bm25=0.5"],
           ["fusion=combsum", "fusion.norm=zscore"], ["fusion=combmnz", "fusion.norm=sum"],
           ["fusion=convex", "fusion.alpha=0.7", "fusion.norm=dbsf"]]


@pytest.mark.slow
@pytest.mark.parametrize("fusion", FUSIONS, ids=[f[0] for f in FUSIONS])
def test_every_fusion_runs_on_a_beir_folder_with_attribution(fusion, tmp_path, mlflow_store):
    from workspaces import record_run

    from tools import synth

    folder = synth.generate(tmp_path / "beir", 300, 30, seed=5)
    out = record_run("dataset=beir", f"dataset.path={folder}", "chunking=none", "embedder=hash",
                     "embedder.dim=32", "retriever=hybrid", f"cache_dir={tmp_path / 'cache'}",
                     "progress=false", "k=100", *fusion)
    assert out["status"] == "FINISHED"
    assert 0 < out["ndcg_at_10"] <= 1
    assert out["rerank.ceiling.r_at_20"] >= out["r_at_10"] - 1e-12  # deeper, at least as much
    assert out["rerank.oracle.ndcg_at_10"] >= out["ndcg_at_10"] - 1e-12
    assert out["rerank.realised_share"] == pytest.approx(
        out["ndcg_at_10"] / out["rerank.oracle.ndcg_at_10"])


def test_a_third_part_fuses_without_editing_the_class(chunks, golden, tmp_path):
    """Another system's run as a third part, in an option file of the user's own config folder
    (``retriever=hybrid_run``, as docs/config.md shows): the hybrid's ranking is the RRF of the
    three parts' own rankings, each cut to its depth."""
    from hydra.utils import instantiate

    from ragexp.data.trec import write_run
    from ragexp.records import ordered
    from ragexp.stages.external import TrecRunRetriever
    from ragexp.stages.fusion.rank import rrf
    from ragexp.stages.retrievers import BM25Retriever, DenseRetriever

    queries = {q.qid: q.text for q in golden[:5]}
    # the run ranks the chunks backwards: a ranking neither dense nor BM25 would give
    run = {q: {c.chunk_id: float(i) for i, c in enumerate(chunks[:40])} for q in queries}
    path = write_run(run, tmp_path / "run.trec")
    own = tmp_path / "conf"
    (own / "retriever").mkdir(parents=True)
    (own / "retriever" / "hybrid_run.yaml").write_text(
        (Path(CONF_DIR) / "retriever" / "hybrid.yaml").read_text()
        + "  run:\n    retriever:\n      _target_: ragexp.stages.external.TrecRunRetriever\n"
        f"      _partial_: true\n      path: {path}\n      unit: chunk\n    depth: 30\n")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.searchpath=[file://{own}]",
                                           "retriever=hybrid_run", "embedder=hash",
                                           "retriever.parts.bm25.depth=50"])
    built = build.build(cfg)
    res = Resources(chunks, built.make_embedder, built.cache, bm25_params=built.bm25,
                    progress=False)
    res.cache.enabled = False
    hybrid = built.make_retriever(res)
    assert sorted(hybrid.parts) == ["bm25", "dense", "run"]
    got = hybrid.search(queries, 10)

    def cut(ranking, depth):
        return {q: {i: s[i] for i in ordered(s)[:depth]} for q, s in ranking.items()}

    parts = {"dense": cut(DenseRetriever(res).search(queries, 100), 100),
             "bm25": cut(BM25Retriever(res).search(queries, 50), 50),
             "run": cut(TrecRunRetriever(res, str(path)).search(queries, 30), 30)}
    expected = cut(rrf(parts, 60.0), 10)
    assert {q: ordered(s) for q, s in got.items()} == {q: ordered(s) for q, s in expected.items()}
    two = cut(rrf({p: parts[p] for p in ("dense", "bm25")}, 60.0), 10)
    assert any(ordered(got[q]) != ordered(two[q]) for q in queries)  # the third part counted
