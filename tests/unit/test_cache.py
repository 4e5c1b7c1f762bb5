"""The packed embedding cache: hits and misses, keys, torn shards, concurrent workers that never
embed the same text twice, claims of dead workers, the old per-file layout, unwritable roots."""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ragexp.index.cache import EmbeddingCache, _digests, cache_key, model_folder
from ragexp.index.embedders import EmbedderIdentity, HashEmbedder
from ragexp.index.packstore import PackedStore

TEXTS = [f"text number {i} about leases and brokers" for i in range(40)]


@dataclass
class Counting:
    """Wraps an embedder and records every text it is asked to embed."""

    inner: HashEmbedder = field(default_factory=lambda: HashEmbedder(dim=32))
    seen: list = field(default_factory=list)
    delay: float = 0.0

    @property
    def identity(self):
        return self.inner.identity

    def embed(self, texts, mode="passage"):
        self.seen.extend(texts)
        time.sleep(self.delay)
        return self.inner.embed(texts, mode)


@dataclass
class Renamed(Counting):
    """Same vectors, another identity (as if the model file changed)."""

    @property
    def identity(self):
        i = self.inner.identity
        return EmbedderIdentity(i.backend, i.model, i.model_file, "other-sha", i.dim)


def _shards(root: Path) -> list[Path]:
    return sorted(root.rglob("packed/*.f32"))


def test_second_embed_hits_and_returns_identical_vectors(tmp_path):
    emb, cache = Counting(), EmbeddingCache(str(tmp_path))
    first = cache.embed(emb, TEXTS, "passage", batch_size=7, progress=False)
    assert (cache.hits, cache.misses) == (0, len(TEXTS))
    assert sorted(emb.seen) == sorted(TEXTS)
    np.testing.assert_array_equal(first, emb.inner.embed(TEXTS))
    emb.seen.clear()
    again = EmbeddingCache(str(tmp_path))
    second = again.embed(emb, TEXTS[::-1], "passage", progress=False)
    assert (again.hits, again.misses) == (len(TEXTS), 0)
    assert emb.seen == []
    np.testing.assert_array_equal(first[::-1], second)
    # Packed: one shard (vectors + keys) per writing cache, raw bytes plus 32 bytes a key.
    (shard,) = _shards(tmp_path)
    assert shard.stat().st_size == len(TEXTS) * 32 * 4
    assert shard.with_suffix(".keys").stat().st_size == len(TEXTS) * 32


def test_duplicates_and_partial_hits(tmp_path):
    emb, cache = Counting(), EmbeddingCache(str(tmp_path))
    cache.embed(emb, TEXTS[:10], "passage", progress=False)
    emb.seen.clear()
    texts = TEXTS[5:15] + TEXTS[12:15]  # 5 cached, 5 new, 3 repeats of new ones
    out = cache.embed(emb, texts, "passage", progress=False)
    assert sorted(emb.seen) == sorted(TEXTS[10:15])  # each new text embedded once
    assert (cache.hits, cache.misses) == (0 + 5, 10 + 8)  # running totals over both calls
    np.testing.assert_array_equal(out, emb.inner.embed(texts))


def test_key_is_sha256_of_identity_mode_and_text():
    ident = HashEmbedder(dim=32).identity
    import hashlib
    expected = hashlib.sha256(f"{ident.key}\0norm=True\0mode=query\0héllo\0".encode()).hexdigest()
    assert cache_key(ident, "query", "héllo") == expected
    assert [d.hex() for d in _digests(ident, "query", ["héllo", "x"])] == [
        expected, cache_key(ident, "query", "x")]


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
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("damage", ["f32_half_row", "keys_partial", "f32_short_rows"])
def test_torn_shard_tail_is_a_miss_and_is_recomputed(tmp_path, damage):
    emb = Counting()
    EmbeddingCache(str(tmp_path)).embed(emb, TEXTS[:5], "passage", progress=False)
    (f32,) = _shards(tmp_path)
    keys = f32.with_suffix(".keys")
    if damage == "f32_half_row":  # the last vector half written: its key is not trusted
        f32.write_bytes(f32.read_bytes()[: 4 * 128 + 64])
    elif damage == "keys_partial":  # the last key half written
        keys.write_bytes(keys.read_bytes()[: 4 * 32 + 20])
    else:  # vectors of two keys lost
        f32.write_bytes(f32.read_bytes()[: 3 * 128])
    lost = 2 if damage == "f32_short_rows" else 1
    emb.seen.clear()
    cache = EmbeddingCache(str(tmp_path))
    out = cache.embed(emb, TEXTS[:5], "passage", progress=False)
    assert (cache.hits, cache.misses) == (5 - lost, lost)
    assert len(emb.seen) == lost
    np.testing.assert_array_equal(out, emb.inner.embed(TEXTS[:5]))
    third = EmbeddingCache(str(tmp_path))
    third.embed(emb, TEXTS[:5], "passage", progress=False)
    assert third.misses == 0  # the recomputed vectors went to a new shard


def test_first_word_collisions_resolve_to_the_right_row(tmp_path):
    store = PackedStore(tmp_path, dim=4)
    keys = np.array([[7, 1, 1, 1], [7, 2, 2, 2], [7, 3, 3, 3], [5, 0, 0, 0]], dtype="<u8")
    vecs = np.arange(16, dtype=np.float32).reshape(4, 4)
    store.append(keys, vecs)
    store.refresh()
    probe = np.array([[7, 3, 3, 3], [7, 9, 9, 9], [5, 0, 0, 0], [7, 1, 1, 1], [8, 0, 0, 0]],
                     dtype="<u8")
    shard, row = store.find(probe)
    assert row.tolist() == [2, -1, 3, 0, -1]
    out = np.full((5, 4), -1, dtype=np.float32)
    store.gather(shard, row, out)
    np.testing.assert_array_equal(out[[0, 2, 3]], vecs[[2, 3, 0]])
    assert (out[[1, 4]] == -1).all()


def _worker(root: str, texts: list[str], barrier, log_path: str) -> None:
    emb = Counting(delay=0.05)
    barrier.wait()
    out = EmbeddingCache(root).embed(emb, texts, "passage", batch_size=8, progress=False)
    ok = bool(np.array_equal(out, HashEmbedder(dim=32).embed(texts)))
    Path(log_path).write_text(json.dumps({"seen": emb.seen, "ok": ok}))


@pytest.mark.slow
def test_parallel_workers_never_embed_the_same_text_twice(tmp_path):
    texts = [f"passage {i} on queues" for i in range(200)]
    overlapping = [texts, texts, texts[50:] + texts[:50], texts[::-1]]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    logs = [tmp_path / f"log{i}.json" for i in range(4)]
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "c"), t, barrier, str(lg)))
             for t, lg in zip(overlapping, logs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    results = [json.loads(lg.read_text()) for lg in logs]
    assert all(r["ok"] for r in results)
    seen = [t for r in results for t in r["seen"]]
    assert sorted(seen) == sorted(texts)  # every text embedded exactly once over all workers
    assert sum(bool(r["seen"]) for r in results) >= 2  # and the work was shared
    assert not list((tmp_path / "c").rglob("*.claim"))


def _hold_claim(cache_root: Path, digests: list[bytes]):
    folder = model_folder(cache_root, HashEmbedder(dim=32).identity) / "claims"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "999-foreign.claim"
    fh = path.open("wb")
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.write(b"".join(digests))
    fh.flush()
    return path, fh


@pytest.mark.parametrize("owner_writes", [True, False])
def test_a_claimed_text_is_waited_for_then_read_or_taken_over(tmp_path, owner_writes):
    emb = Counting()
    ident = emb.identity
    digests = _digests(ident, "passage", TEXTS[:4])
    path, fh = _hold_claim(tmp_path, digests)

    def owner():
        time.sleep(0.5)
        if owner_writes:  # finishes its batch: vectors in the store, then the claim dropped
            EmbeddingCache(str(tmp_path)).store(ident).append(
                np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4),
                emb.inner.embed(TEXTS[:4]))
        path.unlink()
        fh.close()  # (a dying owner just closes: its lock goes with it)

    thread = threading.Thread(target=owner)
    thread.start()
    cache = EmbeddingCache(str(tmp_path))
    out = cache.embed(emb, TEXTS[:10], "passage", progress=False)
    thread.join()
    np.testing.assert_array_equal(out, emb.inner.embed(TEXTS[:10]))
    if owner_writes:
        assert sorted(emb.seen) == sorted(TEXTS[4:10])
        assert (cache.hits, cache.misses) == (4, 6)
    else:
        assert sorted(emb.seen) == sorted(TEXTS[:10])


def test_stale_claim_of_a_dead_worker_is_removed(tmp_path):
    emb = Counting()
    digests = _digests(emb.identity, "passage", TEXTS[:3])
    path, fh = _hold_claim(tmp_path, digests)
    fcntl.flock(fh, fcntl.LOCK_UN)  # nobody holds it any more: its owner is gone
    cache = EmbeddingCache(str(tmp_path))
    cache.embed(emb, TEXTS[:3], "passage", progress=False)
    fh.close()
    assert sorted(emb.seen) == sorted(TEXTS[:3]) and not path.exists()


def test_old_per_file_cache_is_migrated_on_read(tmp_path, caplog):
    emb = Counting()
    ident = emb.identity
    old = model_folder(tmp_path, ident)
    marked = emb.inner.embed(TEXTS[:6]) * -1  # distinguishable from a fresh computation
    for i, text in enumerate(TEXTS[:6]):
        key = cache_key(ident, "passage", text)
        (old / key[:2]).mkdir(parents=True, exist_ok=True)
        (old / key[:2] / f"{key}.f32").write_bytes(marked[i].tobytes() if i else b"torn")
    cache = EmbeddingCache(str(tmp_path))
    out = cache.embed(emb, TEXTS[:8], "passage", progress=False)
    np.testing.assert_array_equal(out[1:6], marked[1:6])
    np.testing.assert_array_equal(out[[0, 6, 7]], emb.inner.embed([TEXTS[i] for i in (0, 6, 7)]))
    assert (cache.migrated, cache.hits, cache.misses) == (5, 5, 3)
    assert "migrated 5 vectors" in caplog.text
    for f in old.glob("??/*.f32"):
        f.unlink()
    again = EmbeddingCache(str(tmp_path))
    np.testing.assert_array_equal(again.embed(emb, TEXTS[:8], "passage", progress=False), out)
    assert again.misses == 0


def test_unwritable_cache_stops_a_run_naming_the_folder(tmp_path):
    from ragexp.index.cache import CacheWriteError

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CacheWriteError, match=r"cannot write the embedding cache at .*file/cache"):
        EmbeddingCache(str(blocker / "cache")).embed(Counting(), TEXTS, "passage",
                                                     progress=False)


def test_unwritable_cache_computes_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    emb, cache = Counting(), EmbeddingCache(str(blocker / "cache"), on_write_error="warn")
    with pytest.warns(RuntimeWarning, match=r"cannot be written") as record:
        out = cache.embed(emb, TEXTS, "passage", batch_size=8, progress=False)
        cache.embed(emb, TEXTS, "passage", batch_size=8, progress=False)
    assert len([w for w in record if "cannot be written" in str(w.message)]) == 1
    assert str(blocker / "cache") in str(record[0].message)
    np.testing.assert_array_equal(out, emb.inner.embed(TEXTS))
    assert cache.misses == 2 * len(TEXTS)


def _three_shards(tmp_path, dim=8, sizes=(300, 50, 120)):
    """Three shards (three writers) of random vectors; returns (store, keys, vectors)."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**63, size=(sum(sizes), 4), dtype=np.int64).astype("<u8")
    vecs = rng.standard_normal((sum(sizes), dim)).astype(np.float32)
    start = 0
    for size in sizes:
        writer = PackedStore(tmp_path, dim)
        writer.append(keys[start:start + size], vecs[start:start + size])
        writer.close()
        start += size
    store = PackedStore(tmp_path, dim)
    store.refresh()
    return store, keys, vecs


@pytest.mark.parametrize("pick", ["file order", "permutation", "few", "mixed with absent",
                                  "reversed run"])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_gather_returns_each_keys_vector_on_every_read_path(tmp_path, pick, layout):
    # Each path of gather (one read into out, one read of the span then a fancy index, a
    # memory map for a few rows), into C and Fortran-ordered outputs, against plain indexing.
    store, keys, vecs = _three_shards(tmp_path)
    rng = np.random.default_rng(11)
    idx = {"file order": np.arange(0, 300),
           "permutation": rng.permutation(470),
           "few": rng.choice(300, size=5, replace=False),
           "mixed with absent": rng.permutation(np.r_[np.arange(470), -np.arange(1, 40)]),
           "reversed run": np.arange(299, 100, -1)}[pick]
    absent = np.random.default_rng(3).integers(0, 2**63, size=(len(idx), 4)).astype("<u8")
    query = np.where((idx >= 0)[:, None], keys[np.maximum(idx, 0)], absent)
    out = np.full((len(idx), 8), 7.5, dtype=np.float32, order=layout)
    shard, row = store.find(query)
    assert ((shard >= 0) == (idx >= 0)).all()
    store.gather(shard, row, out)
    np.testing.assert_array_equal(out[idx >= 0], vecs[idx[idx >= 0]])
    assert (out[idx < 0] == 7.5).all()


def test_empty_rows_start_off_the_file_offsets_place_in_a_page(tmp_path):
    store = PackedStore(tmp_path, dim=384)
    for offset in (0, 1536, 4096 * 3 + 40):
        a = store.empty(1000, file_offset=offset)
        assert a.shape == (1000, 384) and a.dtype == np.float32 and a.flags.c_contiguous
        assert (a.ctypes.data - offset) % 4096 == 256


def test_rows_are_written_in_text_order_and_embedded_in_length_order(tmp_path):
    # Rows in text order make a reread one sequential read; batches of similar length keep
    # padding small. Batch 4 x 16 batches per claim: 100 texts are two units of 64 and 36.
    rng = np.random.default_rng(2)
    texts = [f"t{i} " + "word " * int(rng.integers(1, 30)) for i in range(100)]
    texts += texts[:10]  # repeats: written once, at their first place
    emb = Counting()
    out = EmbeddingCache(str(tmp_path)).embed(emb, texts, "passage", batch_size=4,
                                              progress=False)
    np.testing.assert_array_equal(out, HashEmbedder(dim=32).embed(texts))
    (shard,) = _shards(tmp_path)
    written = shard.with_suffix(".keys").read_bytes()
    assert written == b"".join(_digests(emb.identity, "passage", texts[:100]))
    for unit in (emb.seen[:64], emb.seen[64:]):
        assert [len(t) for t in unit] == sorted(len(t) for t in unit)
    assert sorted(emb.seen) == sorted(texts[:100])
    again = Counting()
    cache = EmbeddingCache(str(tmp_path))
    np.testing.assert_array_equal(cache.embed(again, texts, "passage", progress=False), out)
    assert again.seen == [] and cache.hits == len(texts)


@pytest.mark.parametrize("under", ["file", "proc"])
def test_unwritable_cache_dir_stops_minilm_with_the_fix(tmp_path, under):
    """Trial item 3: the default embedder assembles its model folder under cache_dir; a folder
    that cannot be made (a path under a regular file: ENOTDIR; /proc: ENOENT) is the documented
    CacheWriteError naming the folder and the fix, not a raw OSError."""
    from ragexp.index.cache import CacheWriteError
    from ragexp.index.embedders import FastEmbedEmbedder

    if under == "file":
        (tmp_path / "file").write_text("not a folder")
        cache_dir = tmp_path / "file" / "sub"
    else:
        cache_dir = Path("/proc/x")
    with pytest.raises(CacheWriteError) as err:
        FastEmbedEmbedder("minilm-int8", cache_dir=str(cache_dir))
    msg = str(err.value)
    assert msg.startswith(f"cannot write the model folder at {cache_dir}/models/minilm-int8: ")
    assert msg.endswith("make it writable, free space, or set cache_dir= to a writable folder")
    assert isinstance(err.value.__cause__, OSError)
