"""``make bench`` rows for the packed embedding cache at 100,000 passages.

Reading: all cached vectors of a 100,000 x 384 store (texts of 20 to 140 words, written by
``EmbeddingCache.embed`` as a run writes them), found by key and gathered, against
``np.load`` of the same matrix saved as one ``.npy`` (the floor: one sequential read). The full
``EmbeddingCache.embed`` path also hashes every text (sha256, the cache key), which ``np.load``
does not: that row is printed for information with the hashing time beside it. Disk: the
store's bytes against the raw float32 matrix.
"""

from __future__ import annotations

import tempfile
from collections import namedtuple
from pathlib import Path

import numpy as np

from ragexp.index.cache import EmbeddingCache, _digests
from ragexp.index.embedders import EmbedderIdentity
from tools.timing import best_of

Row = namedtuple("Row", "name ours ref ratio target ok")


class RandomEmbedder:
    """Unit vectors from a seeded generator: embedding cost ~0, so only the cache is timed."""

    def __init__(self, dim: int):
        self.identity = EmbedderIdentity("bench-random", f"normal-{dim}", "", "seeded", dim)
        self.rng = np.random.default_rng(13)

    def embed(self, texts, mode="passage"):
        v = self.rng.standard_normal((len(texts), self.identity.dim), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def cache_rows(n: int = 100_000, dim: int = 384) -> tuple[list[Row], list[str]]:
    words = "lease broker queue snapshot retry partition leader follower segment".split()
    lengths = np.random.default_rng(7).integers(20, 140, size=n)  # embedded in length order
    texts = [f"passage {i}: " + " ".join(words[(i + j) % len(words)] for j in range(m))
             for i, m in enumerate(lengths)]
    emb = RandomEmbedder(dim)
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-cache-") as tmp:
        root = Path(tmp) / "cache"
        ref = EmbeddingCache(str(root)).embed(emb, texts, "passage", batch_size=4096,
                                              progress=False)
        np.save(Path(tmp) / "matrix.npy", ref)
        keys = np.frombuffer(b"".join(_digests(emb.identity, "passage", texts)),
                             dtype="<u8").reshape(-1, 4)

        def store_read():
            store = EmbeddingCache(str(root)).store(emb.identity)
            store.refresh()
            out = store.empty(n)
            store.gather(*store.find(keys), out)
            return out

        def full_read():
            cache = EmbeddingCache(str(root))
            out = cache.embed(emb, texts, "passage", progress=False)
            assert cache.misses == 0
            return out

        loaded, via_store, via_full = np.load(Path(tmp) / "matrix.npy"), store_read(), full_read()
        same = np.array_equal(via_store, loaded) and np.array_equal(via_full, loaded)
        del via_store, via_full
        times = best_of({"load": lambda: np.load(Path(tmp) / "matrix.npy"), "store": store_read,
                         "full": full_read,
                         "hash": lambda: _digests(emb.identity, "passage", texts)}, repeats=7)
        t_load, t_store, t_full, t_hash = (times[k] for k in ("load", "store", "full", "hash"))
        disk = EmbeddingCache(str(root)).store(emb.identity).disk_bytes()
    mb = 1 << 20
    shape = f"{n:,} x {dim}-d"
    rows = [
        Row(f"cached read, {shape}: packed store find + gather (keys given) vs np.load of one "
            f".npy (vectors identical: {same})", f"{t_store * 1000:.0f} ms",
            f"{t_load * 1000:.0f} ms", f"{t_store / t_load:.2f}", "<= 2", same and
            t_store <= 2 * t_load),
        Row(f"cached read, {shape}: EmbeddingCache.embed, all hits, incl. sha256 of every text "
            f"({t_hash * 1000:.0f} ms of it) vs np.load (information)", f"{t_full * 1000:.0f} ms",
            f"{t_load * 1000:.0f} ms", f"{t_full / t_load:.2f}", "-", None),
        Row(f"cache disk, {shape}: packed store vs raw float32 bytes", f"{disk / mb:.1f} MiB",
            f"{ref.nbytes / mb:.1f} MiB", f"{disk / ref.nbytes:.3f}", "<= 1.2",
            disk <= 1.2 * ref.nbytes),
    ]
    return rows, []


if __name__ == "__main__":
    for row in cache_rows()[0]:
        print(row)
