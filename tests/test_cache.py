"""The on-disk embedding cache: hits and misses, keys, concurrent writers, corrupt files."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ragexp.cache import EmbeddingCache, cache_key
from ragexp.embedders import EmbedderIdentity, HashEmbedder

TEXTS = [f"text number {i} about leases and brokers" for i in range(40)]


@dataclass
class Counting:
    """Wraps an embedder and records every text it is asked to embed."""

    inner: HashEmbedder = field(default_factory=lambda: HashEmbedder(dim=32))
    seen: list = field(default_factory=list)

    @property
    def identity(self):
        return self.inner.identity

    def embed(self, texts, mode="passage"):
        self.seen.extend(texts)
        return self.inner.embed(texts, mode)


@dataclass
class Renamed(Counting):
    """Same vectors, another identity (as if the model file changed)."""

    @property
    def identity(self):
        i = self.inner.identity
        return EmbedderIdentity(i.backend, i.model, i.model_file, "other-sha", i.dim)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_second_embed_hits_and_returns_identical_vectors(tmp_path):
    emb, cache = Counting(), EmbeddingCache(str(tmp_path))
    first = cache.embed(emb, TEXTS, "passage", batch_size=7, progress=False)
    assert (cache.hits, cache.misses) == (0, len(TEXTS))
    assert sorted(emb.seen) == sorted(TEXTS)
    np.testing.assert_array_equal(first, emb.inner.embed(TEXTS))
    emb.seen.clear()
    again = EmbeddingCache(str(tmp_path))
    second = again.embed(emb, TEXTS, "passage", progress=False)
    assert (again.hits, again.misses) == (len(TEXTS), 0)
    assert emb.seen == []
    np.testing.assert_array_equal(first, second)
    assert len(_files(tmp_path)) == len(TEXTS)


def test_duplicates_and_partial_hits(tmp_path):
    emb, cache = Counting(), EmbeddingCache(str(tmp_path))
    cache.embed(emb, TEXTS[:10], "passage", progress=False)
    emb.seen.clear()
    texts = TEXTS[5:15] + TEXTS[12:15]  # 5 cached, 5 new, 3 repeats of new ones
    out = cache.embed(emb, texts, "passage", progress=False)
    assert sorted(emb.seen) == sorted(TEXTS[10:15])  # each new text embedded once
    assert (cache.hits, cache.misses) == (0 + 5, 10 + 8)  # running totals over both calls
    np.testing.assert_array_equal(out, emb.inner.embed(texts))


def test_mode_and_identity_are_part_of_the_key(tmp_path):
    emb = Counting()
    EmbeddingCache(str(tmp_path)).embed(emb, TEXTS, "passage", progress=False)
    as_query = EmbeddingCache(str(tmp_path))
    as_query.embed(emb, TEXTS, "query", progress=False)
    assert as_query.misses == len(TEXTS)
    other_model = EmbeddingCache(str(tmp_path))
    other_model.embed(Renamed(), TEXTS, "passage", progress=False)
    assert other_model.misses == len(TEXTS)
    other_dim = EmbeddingCache(str(tmp_path))
    other_dim.embed(Counting(HashEmbedder(dim=48)), TEXTS, "passage", progress=False)
    assert other_dim.misses == len(TEXTS)
    ident = emb.identity
    keys = {cache_key(ident, "passage", "x"), cache_key(ident, "query", "x"),
            cache_key(ident, "passage", "x", normalized=False), cache_key(ident, "passage", "y"),
            cache_key(Renamed().identity, "passage", "x")}
    assert len(keys) == 5


def test_disabled_cache_writes_nothing(tmp_path):
    emb, cache = Counting(), EmbeddingCache(str(tmp_path), enabled=False)
    out = cache.embed(emb, TEXTS, "passage", progress=False)
    np.testing.assert_array_equal(out, emb.inner.embed(TEXTS))
    assert (cache.hits, cache.misses) == (0, len(TEXTS))
    assert _files(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncate", "extend", "empty"])
def test_corrupt_file_is_a_miss_and_is_rewritten(tmp_path, damage):
    emb = Counting()
    EmbeddingCache(str(tmp_path)).embed(emb, TEXTS[:5], "passage", progress=False)
    victim = _files(tmp_path)[0]
    data = victim.read_bytes()
    assert len(data) == 32 * 4
    victim.write_bytes({"truncate": data[:50], "extend": data + b"\0" * 4, "empty": b""}[damage])
    emb.seen.clear()
    cache = EmbeddingCache(str(tmp_path))
    out = cache.embed(emb, TEXTS[:5], "passage", progress=False)
    assert (cache.hits, cache.misses) == (4, 1)
    assert len(emb.seen) == 1
    assert victim.read_bytes() == data
    np.testing.assert_array_equal(out, emb.inner.embed(TEXTS[:5]))


def _writer(root: str, barrier, rounds: int) -> None:
    emb = HashEmbedder(dim=32)
    vecs = emb.embed(TEXTS)
    barrier.wait()
    for _ in range(rounds):
        # The public path on a cold cache: every process misses and writes every entry ...
        EmbeddingCache(root).embed(emb, TEXTS, "passage", progress=False)
        # ... and the raw writer, hammering the same files.
        cache = EmbeddingCache(root)
        for text, vec in zip(TEXTS, vecs):
            cache._write(cache._path(emb.identity, cache_key(emb.identity, "passage", text)), vec)


def test_concurrent_writers_leave_whole_files(tmp_path):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), barrier, 5)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    files = _files(tmp_path)
    assert not [f for f in files if f.suffix == ".tmp"]
    assert len(files) == len(TEXTS)
    assert all(f.stat().st_size == 32 * 4 for f in files)
    emb, cache = Counting(), EmbeddingCache(str(tmp_path))
    out = cache.embed(emb, TEXTS, "passage", progress=False)
    assert cache.misses == 0 and emb.seen == []
    np.testing.assert_array_equal(out, HashEmbedder(dim=32).embed(TEXTS))
