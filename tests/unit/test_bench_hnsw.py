"""``tools.bench_hnsw``: the ``--embedder`` option, MiniLM vectors of a synth folder embedded
through the repo's ``minilm`` embedder and kept in ``minilm384.npz``, and the relative contrast
and score gap it prints, checked on a hand-worked case and against scipy's distances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from ragexp.data.datasets import BeirDataset
from ragexp.errors import InvalidValue
from ragexp.index.embedders import FastEmbedEmbedder, HashEmbedder
from tools import bench_hnsw


@pytest.fixture
def measured(monkeypatch):
    """The embedder each ``measure`` call of ``bench_hnsw.main`` was given."""
    seen = []
    monkeypatch.setattr(bench_hnsw, "measure",
                        lambda n, graphs, efs, queries, dim, work, embedder, topics, folder:
                        seen.append((embedder, topics, folder) if topics or folder else embedder)
                        or [])
    return seen


def test_embedder_option_defaults_to_hash_and_takes_minilm(measured, tmp_path):
    work = ["--work", str(tmp_path), "--sizes", "10,20"]
    assert bench_hnsw.main(work) == 0
    assert bench_hnsw.main([*work, "--embedder", "minilm"]) == 0
    assert measured == ["hash", "hash", "minilm", "minilm"]
    with pytest.raises(SystemExit) as exc:
        bench_hnsw.main([*work, "--embedder", "bge"])
    assert exc.value.code == 2
    assert bench_hnsw.main([*work[:2], "--sizes", "10", "--topics", "7"]) == 0
    assert bench_hnsw.main([*work[:2], "--sizes", "10", "--folder", str(tmp_path)]) == 0
    assert measured[-2:] == [("hash", 7, None), ("hash", 0, tmp_path)]
    with pytest.raises(SystemExit) as exc:
        bench_hnsw.main([*work, "--topics", "7", "--folder", str(tmp_path)])
    assert exc.value.code == 2


def test_topics_and_folders_give_their_own_texts_vectors(tmp_path):
    from tools import synth

    topical, _ = bench_hnsw.vectors_of(12, 4, 32, tmp_path, topics=3)
    folder = synth.folder(tmp_path, 12, 4, {**synth.TOPICS, "topics": 3})
    assert (folder / "hash32.npz").is_file()
    docs = [d.text for d in BeirDataset(str(folder)).documents()]
    np.testing.assert_array_equal(topical, HashEmbedder(dim=32).embed(docs))
    # a BEIR folder's first n passages and first queries, kept under a name for those sizes
    first, asked = bench_hnsw.vectors_of(5, 2, 32, tmp_path, folder=folder)
    assert (folder / "hash32-5-2.npz").is_file()
    np.testing.assert_array_equal(first, topical[:5])
    qs = [q.text for q in BeirDataset(str(folder)).queries()][:2]
    np.testing.assert_array_equal(asked, HashEmbedder(dim=32).embed(qs, "query"))
    with pytest.raises(InvalidValue,
                       match="asked for 13 passages and 4 queries, it holds 12 and 4"):
        bench_hnsw.vectors_of(13, 4, 32, tmp_path, folder=folder)
    # the command says so in one line, exit 2, as it does for a folder that is not BEIR
    assert bench_hnsw.main(["--work", str(tmp_path), "--sizes", "13", "--folder", str(folder)]) == 2
    assert bench_hnsw.main(["--work", str(tmp_path), "--sizes", "5",
                            "--folder", str(tmp_path / "nowhere")]) == 2


def test_own_contrast_is_the_contrast_of_passages_past_themselves():
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(60, 5))
    got = bench_hnsw.own_contrast(vectors, sample=8, k=3, seed=2)
    rows = np.random.default_rng(2).choice(60, 8, replace=False)
    dist = cdist(vectors[rows], vectors)
    # each sampled passage is its own nearest (distance 0): its 3rd neighbour besides
    # itself is the 4th nearest
    assert got["relative_contrast"] == pytest.approx(
        dist.mean() / np.sort(dist, axis=1)[:, 3].mean())


def test_unknown_embedder_is_refused(tmp_path):
    with pytest.raises(InvalidValue, match="hash, minilm"):
        bench_hnsw.vectors_of(12, 4, 384, tmp_path, "bge")


def _texts(work, n, queries):
    ds = BeirDataset(str(work / f"synth-{n}-{queries}"))
    return [d.text for d in ds.documents()], [q.text for q in ds.queries()]


@pytest.mark.slow
def test_minilm_vectors_come_from_the_repo_embedder_and_are_kept(tmp_path, monkeypatch,
                                                                  minilm):
    calls = []
    embed = FastEmbedEmbedder.embed
    monkeypatch.setattr(FastEmbedEmbedder, "embed",
                        lambda self, texts, mode="passage": calls.append(
                            (self.model, len(texts), mode)) or embed(self, texts, mode))
    passages, queries = bench_hnsw.vectors_of(12, 4, 16, tmp_path, "minilm")
    assert passages.shape == (12, 384) and queries.shape == (4, 384)
    assert (tmp_path / "synth-12-4" / "minilm384.npz").is_file()
    assert {(m, mode) for m, _, mode in calls} == {("minilm-int8", "passage"),
                                                    ("minilm-int8", "query")}
    assert sum(n for _, n, _ in calls) == 16
    # The same vectors as the MiniLM embedder alone gives the texts, without the tool.
    docs, qs = _texts(tmp_path, 12, 4)
    np.testing.assert_allclose(passages, embed(minilm, docs, "passage"), atol=1e-5)
    np.testing.assert_allclose(queries, embed(minilm, qs, "query"), atol=1e-5)

    calls.clear()
    again = bench_hnsw.vectors_of(12, 4, 16, tmp_path, "minilm")
    assert calls == []
    np.testing.assert_array_equal(again[0], passages)
    np.testing.assert_array_equal(again[1], queries)


def test_hash_vectors_are_the_hash_embedders(tmp_path):
    passages, queries = bench_hnsw.vectors_of(12, 4, 64, tmp_path)
    assert (tmp_path / "synth-12-4" / "hash64.npz").is_file()
    docs, qs = _texts(tmp_path, 12, 4)
    np.testing.assert_array_equal(passages, HashEmbedder(dim=64).embed(docs))
    np.testing.assert_array_equal(queries, HashEmbedder(dim=64).embed(qs, "query"))


def _unit(deg):
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


def test_contrast_on_a_worked_case():
    # Passages at 0, 60, 90 and 180 degrees on the unit circle; queries at 0 and 90 degrees.
    # A unit query and passage at angle a lie 2 sin(a / 2) apart.
    # Query 0: angles 0, 60, 90, 180 -> distances 0, 1, sqrt 2, 2 (2nd nearest: 1); cosines
    # 1, 0.5, 0, -1 (2nd minus 3rd: 0.5). Query 90: angles 90, 30, 0, 90 -> distances sqrt 2,
    # 2 sin 15, 0, sqrt 2 (2nd nearest: 2 sin 15); cosines 0, cos 30, 1, 0 (gap cos 30).
    passages = np.array([_unit(0), _unit(60), _unit(90), _unit(180)])
    queries = np.array([_unit(0), _unit(90)])
    s15 = 2 * math.sin(math.radians(15))
    mean_distance = ((1 + math.sqrt(2) + 2) / 4 + (2 * math.sqrt(2) + s15) / 4) / 2
    got = bench_hnsw.contrast(passages, queries, k=2)
    assert got["relative_contrast"] == pytest.approx(mean_distance / ((1 + s15) / 2))
    assert got["gap_median"] == pytest.approx((0.5 + math.cos(math.radians(30))) / 2)


def test_contrast_matches_scipy_distances():
    rng = np.random.default_rng(3)
    passages, queries = rng.normal(size=(300, 8)), rng.normal(size=(7, 8))
    dist = cdist(queries, passages)
    scores = np.sort(queries @ passages.T, axis=1)[:, ::-1]
    got = bench_hnsw.contrast(passages, queries, k=10)
    assert got["relative_contrast"] == pytest.approx(
        dist.mean() / np.sort(dist, axis=1)[:, 9].mean())
    assert got["gap_median"] == pytest.approx(np.median(scores[:, 9] - scores[:, 10]))


@pytest.mark.parametrize("k", [0, 4])
def test_contrast_needs_a_neighbour_after_the_kth(k):
    with pytest.raises(InvalidValue, match="1 <= k < passages"):
        bench_hnsw.contrast(np.eye(4), np.eye(4)[:1], k=k)
