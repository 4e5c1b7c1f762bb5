"""Every stage of a run built from its composed config, in one place, for the runner
(``app.build_and_run``) and the serving engine (``serving.Engine``) alike.

Objects come from each group's ``_target_`` (``hydra.utils.instantiate``); nothing here chooses
a class by name. The only difference between the two callers is how the embedding cache treats
a failed write: an experiment run stops with an error naming the cache folder, a server warns
once and goes on computing (``EmbeddingCache.on_write_error``).

The config's file-system locations are relative to the folder a run started in. ``PATH_KEYS``
lists them; a run records each as an absolute path (``locations``), and serving rebuilds the
run from those (``with_locations``), whatever its own working folder.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from ragexp import legacy
from ragexp.answer.base import Answerer
from ragexp.answer.extractive import ExtractiveAnswerer
from ragexp.config import schema
from ragexp.data import shipped
from ragexp.errors import InvalidValue
from ragexp.index import precomputed
from ragexp.index.ann import FlatSpec, IndexSpec
from ragexp.index.bm25 import BM25Params
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import Embedder
from ragexp.index.resources import Resources
from ragexp.index.stagestore import StageStore
from ragexp.stages.abstain import AbstainSignal
from ragexp.stages.chunking import Chunker, TokenSized
from ragexp.stages.rerankers import Reranker
from ragexp.stages.retrievers import Retriever

# Config keys holding a file-system location (relative ones are relative to the launch folder:
# ``anchor_paths``).
PATH_KEYS = ("dataset.corpus_dir", "dataset.questions", "dataset.path", "cache_dir",
             "embedder.cache_dir", "embedder.model_path", "embedder.path", "reranker.model_path",
             "retriever.path")
LOCATION_TAG = "ragexp.path."
PART = "ragexp.stages.retrievers.Part"  # a hybrid part written without ``_target_``


@dataclass
class Stages:
    """The stages of one run, as ``pipeline.run_experiment`` and ``serving.Engine`` take them.

    ``make_embedder`` and ``make_retriever`` are factories (the model loads only when a stage
    needs it; a retriever indexes a run's ``Resources``); ``bm25`` is the ``bm25`` group, the
    settings of the one BM25 index every lexical stage shares; ``index`` the ``index`` group
    (how dense search finds neighbours, ``index.ann``). The defaults are the config's
    (extractive answers, an embedding cache under ``.cache/ragexp/embeddings``, exact search)."""

    chunker: Chunker
    make_embedder: Callable[[], Embedder]
    make_retriever: Callable[[Resources], Retriever]
    reranker: Reranker
    signal: AbstainSignal
    answerer: Answerer = field(default_factory=ExtractiveAnswerer)
    cache: EmbeddingCache = field(default_factory=EmbeddingCache)
    bm25: BM25Params = BM25Params()
    index: IndexSpec = field(default_factory=FlatSpec)


def stage_store(cfg: DictConfig) -> StageStore:
    """Chunks, tokens, BM25 and vectors shared by the jobs of a sweep and by serving, under
    ``cache_dir/stages`` (``reuse_stages=false``: built every time)."""
    return StageStore(root=str(Path(cfg.cache_dir) / "stages"),
                      enabled=bool(cfg.get("reuse_stages", True)))


def embedding_cache(cfg: DictConfig, on_write_error: str = "raise") -> EmbeddingCache:
    """The embedding cache under ``cfg.cache_dir/embeddings``; ``on_write_error`` is what a
    failed write does (``EmbeddingCache``: raise, or warn and compute without caching)."""
    return EmbeddingCache(root=str(Path(cfg.cache_dir) / "embeddings"),
                          on_write_error=on_write_error)


def bm25_params(cfg: DictConfig) -> BM25Params:
    """The ``bm25`` group of ``cfg`` as one value (``k1``, ``b``, ``method``, ``delta``). The
    group has no ``_target_``: a recorded ``config.yaml`` stays as runs have always written it,
    and ``serving.engine.config_gaps`` names the keys an older run lacks. Raises
    ``InvalidValue`` on an unknown ``bm25.method``."""
    return BM25Params(**OmegaConf.to_container(cfg.bm25, resolve=True))


def build(cfg: DictConfig, serving: bool = False) -> Stages:
    """Instantiate every stage of ``cfg``. The embedder and the retriever are factories: the
    model loads only when a stage needs it, and a retriever indexes a run's ``Resources``.
    A chunker that sizes in the embedder's tokens (``TokenSized.needs_tokenizer``:
    ``chunking.max_tokens``, ``chunking.windows=maxp``) gets the embedder's tokenizer now,
    from the one embedder the run uses. ``serving=True``: a cache that cannot be written is
    warned about once, never an error. A config without an ``index`` group (a run recorded
    before it existed) searches exactly, as that run did. Raises ``InvalidValue`` for a
    token-sized chunker with an embedder that has no tokenizer."""
    make_embedder = functools.cache(lambda: embedder(cfg))
    chunker = instantiate(cfg.chunking)
    if isinstance(chunker, TokenSized) and chunker.needs_tokenizer:
        chunker = chunker.with_tokenizer(make_embedder().tokens())
    return Stages(
        chunker=chunker,
        make_embedder=make_embedder,
        make_retriever=retriever_factory(cfg),
        reranker=instantiate(cfg.reranker),
        signal=instantiate(cfg.abstain.signal),
        answerer=instantiate(cfg.answer),
        cache=embedding_cache(cfg, "warn" if serving else "raise"),
        bm25=bm25_params(cfg),
        index=instantiate(cfg.index) if cfg.get("index") is not None else FlatSpec())


def check_vectors(cfg: DictConfig) -> None:
    """Read and check the rows of ``embedder=precomputed``'s matrices (NaN/inf, zero rows:
    ``precomputed.check_rows``, memoised for the embedder built later), so the runner refuses
    them before it creates a run; composition checked everything else. Raises
    ``PrecomputedError`` naming ``embedder.path``, the file, the row and its id."""
    path = OmegaConf.select(cfg, "embedder.path", default=None)
    if OmegaConf.get_type(cfg, "embedder") is schema.PrecomputedEmbedderConf and path:
        try:
            precomputed.check_rows(str(path))
        except precomputed.PrecomputedError as exc:
            raise precomputed.PrecomputedError(f"embedder.path={path}: {exc}") from None


def embedder(cfg: DictConfig) -> Embedder:
    """The run's embedder (``cfg.embedder``). ``embedder.queries=NAME`` (precomputed passages)
    builds the embedder option NAME, composed as ``embedder=NAME`` would compose it, for the
    questions. Raises ``InvalidValue`` for an unknown option or one that is itself
    precomputed."""
    name = OmegaConf.select(cfg, "embedder.queries", default=None)
    if not isinstance(name, str):
        return instantiate(cfg.embedder)
    # a partial: Hydra would turn an object passed to instantiate into config
    return instantiate(cfg.embedder, _partial_=True)(
        query_embedder=instantiate(named_embedder(cfg, name)))


def named_embedder(cfg: DictConfig, name: str, key: str = "embedder.queries") -> DictConfig:
    """The embedder option ``name`` (``named_option``), named by the config key ``key``.
    Raises ``InvalidValue`` naming the key for an unknown option or one that reads
    precomputed vectors."""
    composed = named_option(cfg, "embedder", name, key)
    if OmegaConf.select(composed, "queries", default=None) is not None or \
            "path" in composed.keys():  # ``in`` alone misses a MISSING path
        raise InvalidValue(f"{key}={name} is itself precomputed: name an embedder that "
                           f"computes vectors (minilm, hash, ...)")
    return composed


def named_retriever(cfg: DictConfig, name: str, key: str) -> DictConfig:
    """The retriever option ``name`` (``named_option``: ``dense``, ``bm25``, ...) for a hybrid
    part written ``retriever: NAME``. Raises ``InvalidValue`` naming ``key`` for an unknown
    option or ``hybrid`` (a part that is itself a hybrid)."""
    composed = named_option(cfg, "retriever", name, key)
    if "parts" in composed:
        raise InvalidValue(f"{key}={name}: a part cannot itself be a hybrid; name a retriever "
                           f"that ranks (dense, bm25, ...)")
    return composed


def named_option(cfg: DictConfig, group: str, name: str, key: str) -> DictConfig:
    """The option ``name`` of the config group ``group`` composed onto ``cfg``'s
    ``cache_dir``, as ``GROUP=NAME`` would compose it: through the running Hydra app's search
    path when there is one (a user's ``--config-dir`` too), else the shipped config groups.
    ``key`` is the config key that named it. Raises ``InvalidValue`` naming the key."""
    # defer heavy import
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    overrides = [f"{group}={name}", f"cache_dir={cfg.cache_dir}"]
    schema.register()  # serving composes outside the Hydra app that registers the schemas
    try:
        if GlobalHydra.instance().is_initialized():
            composed = compose("config", overrides=overrides)
        else:
            with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
                composed = compose("config", overrides=overrides)
    except HydraException as exc:
        raise InvalidValue(f"{key}={name}: no {group} option of that name "
                           f"({str(exc).splitlines()[0]})") from None
    return composed[group]


def retriever_factory(cfg: DictConfig) -> Callable[[Resources], Retriever]:
    """``resources -> retriever`` of ``cfg.retriever`` (its ``_target_``, built on a run's
    ``Resources``). A hybrid part's ``embedder: NAME`` is composed now, as
    ``embedder=NAME`` would compose it (``named_embedder``), into a factory of that embedder
    (``Part.embedder``), and its ``retriever: NAME`` into that retriever option
    (``named_retriever``); a part without ``_target_`` is a ``Part``. Raises ``InvalidValue``
    naming ``retriever.parts.<name>.embedder`` or ``.retriever`` for an option it refuses."""
    conf = cfg.retriever
    parts = OmegaConf.select(cfg, "retriever.parts")
    if isinstance(parts, DictConfig) and any(
            p is not None and ("embedder" in p or "_target_" not in p
                               or isinstance(p.get("retriever"), str)) for p in parts.values()):
        conf = OmegaConf.create(OmegaConf.to_container(cfg.retriever, resolve=True))
        for name, part in conf.parts.items():
            if part is None:
                continue
            part.setdefault("_target_", PART)
            if isinstance(part.get("retriever"), str):
                part.retriever = _partial(named_retriever(
                    cfg, part.retriever, f"retriever.parts.{name}.retriever"))
            if part.get("embedder") is not None:
                part.embedder = _partial(named_embedder(
                    cfg, part.embedder, f"retriever.parts.{name}.embedder"))
    return lambda res: instantiate(conf, _partial_=True)(resources=res)


def _partial(option: DictConfig) -> dict:
    """A composed option, resolved, as a factory config (``_partial_: true``)."""
    return {**OmegaConf.to_container(option, resolve=True), "_partial_": True}


def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, default=None)


def locations(cfg: DictConfig, cwd: Path | None = None) -> dict[str, str]:
    """``{tag: absolute path}`` for every location the config names (``PATH_KEYS`` set to a
    non-empty value), resolved against ``cwd`` (default: the current folder). Recorded as tags
    ``ragexp.path.<key>`` on each run."""
    base = (cwd or Path.cwd()).resolve()
    out = {}
    for key in PATH_KEYS:
        value = _get(cfg, key)
        if isinstance(value, (list, ListConfig)):  # several question files: a JSON list of paths
            out[LOCATION_TAG + key] = json.dumps(
                [str((base / Path(str(v)).expanduser()).resolve()) for v in value])
        elif value:
            out[LOCATION_TAG + key] = str((base / Path(str(value)).expanduser()).resolve())
    return out


def anchor_paths(cfg: DictConfig, launch: Path) -> None:
    """Make every relative location of ``cfg`` (``PATH_KEYS``) absolute against ``launch``, the
    folder ragexp was started in, in place, when the job runs in another folder
    (``hydra.job.chdir=true``): dataset files, the TREC run, caches and model folders are then
    the same ones whatever ``hydra.job.chdir`` is. A job run where it was launched is left as
    written (its config, and so its identity, unchanged)."""
    if Path.cwd().resolve() == launch.resolve():
        return
    with open_dict(cfg):
        for key in PATH_KEYS:
            value = _get(cfg, key)
            if isinstance(value, ListConfig):  # several question files: each anchored
                OmegaConf.update(cfg, key, [str((launch / str(v)).resolve())
                                            if not Path(str(v)).expanduser().is_absolute()
                                            else str(v) for v in value], merge=False)
            elif value and not Path(str(value)).expanduser().is_absolute():
                OmegaConf.update(cfg, key, str((launch / str(value)).resolve()), merge=False)


def with_locations(cfg: DictConfig, tags: dict[str, str]) -> DictConfig:
    """A copy of a run's recorded config with each location replaced by the absolute path the
    run recorded (``ragexp.path.<key>`` tags; keys the run did not record are left as they are;
    the handbook where an older ragexp shipped it is today's, ``shipped.relocated``) and every
    ``_target_`` named as today (``legacy.upgrade``: runs logged before the packages by role name
    the old module paths)."""
    out = legacy.upgrade(OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)))
    with open_dict(out):
        for key in PATH_KEYS:
            recorded = tags.get(LOCATION_TAG + key)
            if recorded and _get(out, key) is not None:
                value = ([shipped.relocated(p) for p in json.loads(recorded)]
                         if recorded.startswith("[") else shipped.relocated(recorded))
                OmegaConf.update(out, key, value, merge=False)
    return out
