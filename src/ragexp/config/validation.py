"""Config values checked when the config is composed, before any MLflow run or sweep job exists,
so a job never refuses a value that composition accepted.

What a field accepts is data on the field (``ragexp.settings``): a stage's dataclass field, from
which its schema is generated, or a field of ``schema.py``, declares ``field(default=...,
metadata={...})`` with a range (keys ``ge``, ``gt``, ``le``, ``lt``), a set of names
(``choices``), an input that must exist (``path``: ``dir``, ``file`` or ``any``, relative to the
folder the run starts in, as the readers open it) and, for a value without a default
(``MISSING``), a ``hint`` of what to give. ``check_fields`` walks any composed config whose nodes
keep their schema type, so a new field is checked with no further code; every ``MISSING`` value
left is reported by ``missing_values``. Rules that relate several keys (``overlap_words <
max_words``, ``k`` at least the deepest measure cutoff, the objective among the measures, ...)
are plain functions registered with ``settings.cross_field_rule``: a stage's own rules in the
stage's module (its constructor raises the same message), the rules that relate several groups
or read the corpus here; each returns a list of messages. ``validate`` runs them all and raises
one ``ConfigRangeError`` listing every problem. ``composition_error`` turns Hydra's own
composition errors (an unknown option, a misspelt key) into one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, OmegaConfBaseException

from ragexp import legacy, settings
from ragexp.config import build, compose, schema
from ragexp.data import readers, sizes
from ragexp.errors import RagexpError
from ragexp.evaluation import measures
from ragexp.index import embedders, precomputed
from ragexp.settings import BOUNDS, cross_field_rule, field_problems
from ragexp.stages import chunking


class ConfigRangeError(RagexpError, ValueError):
    """One or more config values a job would refuse: out of range, not among the choices, a
    missing input or a required value not given. The message names each key, value and what is
    valid, one per line."""


def ranged_fields(schema_type: type) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(field name, bounds)`` for each field of a schema dataclass that declares a range."""
    for f in dataclasses.fields(schema_type):
        bounds = {k: v for k, v in f.metadata.items() if k in BOUNDS}
        if bounds:
            yield f.name, bounds


def check_fields(cfg: DictConfig, prefix: str = "", skip: frozenset | set = frozenset()
                 ) -> list[str]:
    """Messages for every field of every node in ``cfg`` (recursively, ``hydra`` left out)
    whose schema type declares a range, choices or a path, and whose value breaks it: ``"key=
    value is out of range: must be RANGE"``, ``"key='x' is not one of a, b"``, ``"key=p: no such
    folder (...)"``. Values that are ``MISSING`` are left to ``missing_values``, and the full
    keys in ``skip`` (values that do not resolve: ``unresolvable``) are not read."""
    problems: list[str] = []
    schema_type = OmegaConf.get_type(cfg)
    if schema_type is not None and dataclasses.is_dataclass(schema_type):
        for f in dataclasses.fields(schema_type):
            if f.metadata and f.name in cfg and not OmegaConf.is_missing(cfg, f.name) \
                    and f"{prefix}{f.name}" not in skip:
                problems += field_problems(f"{prefix}{f.name}", cfg[f.name], f.metadata)
    for key in cfg:
        node = cfg._get_node(key)
        if key != "hydra" and isinstance(node, DictConfig) and not node._is_missing() \
                and not node._is_none():
            problems += check_fields(node, f"{prefix}{key}.", skip)
    return problems


def missing_values(cfg: DictConfig, prefix: str = "") -> list[str]:
    """``"key is required and has no value: hint; add key=..."`` for every value of ``cfg``
    left ``MISSING`` (``???``), outside ``hydra``; the hint is the field's ``hint`` metadata."""
    problems = []
    schema_type = OmegaConf.get_type(cfg)
    meta = ({f.name: f.metadata for f in dataclasses.fields(schema_type)}
            if schema_type is not None and dataclasses.is_dataclass(schema_type) else {})
    for key in cfg:  # nodes, unresolved: an interpolation to a missing value is not one
        node = cfg._get_node(key)
        full = f"{prefix}{key}"
        if node._is_missing():
            hint = meta.get(key, {}).get("hint")
            problems.append(f"{full} is required and has no value{f' ({hint})' if hint else ''}"
                            f": add {full}=...")
        elif key != "hydra" and isinstance(node, DictConfig) and not node._is_none():
            problems += missing_values(node, f"{full}.")
    return problems


def unresolvable(cfg: DictConfig | ListConfig, where: str = "") -> list[str]:
    """``"key=${x}: why"`` for every value of ``cfg`` (outside ``hydra``; a list item is
    ``key[i]``) whose interpolation does not resolve: a key that does not exist, a resolver that
    is not registered or fails, text that does not parse. An interpolation to a value left
    ``MISSING`` is left to ``missing_values`` (one mistake, one line), and one that reads
    ``${hydra:...}`` to the job (Hydra sets a job's number, name and folder as it launches it,
    after a sweep's up-front check). A job's config resolves
    whole before its run exists; without this, ``k=${nosuch}`` failed the job with OmegaConf's
    message, naming no key, and a sweep stopped on it naming no job."""
    problems = []
    is_list = isinstance(cfg, ListConfig)
    for key in range(len(cfg)) if is_list else cfg:
        full = f"{where}[{key}]" if is_list else f"{where}.{key}" if where else str(key)
        node = cfg._get_node(key)
        if key == "hydra" and not is_list or node._is_missing():
            continue
        if node._is_interpolation() and "hydra:" not in str(node._value()):
            try:
                cfg[key]
            except InterpolationToMissingValueError:
                pass
            except OmegaConfBaseException as exc:
                why = " ".join(str(exc).splitlines()[0].split())
                problems.append(f"{full}={node._value()}: {why}")
        elif isinstance(node, (DictConfig, ListConfig)) and not node._is_none():
            problems += unresolvable(node, full)
    return problems


def validate(cfg: DictConfig, where: str = "") -> None:
    """Raise ``ConfigRangeError`` naming every required value not given, every field value a
    job would refuse (``check_fields``) and every broken cross-field rule.

    ``where`` (e.g. the job's overrides) is added to the message so a sweep says which job. A
    rule that cannot read its keys because a required value is missing is skipped (the missing
    value is reported); any other config error inside a rule is reported as a problem. A key
    already refused as out of range or not among its choices is not reported again by a later
    rule, nor blamed for a rule it takes part in (``refused_keys``, ``names_refused``): one
    mistake, one line."""
    unresolved = unresolvable(cfg)
    problems = missing_values(cfg) + unresolved
    problems += check_fields(cfg, skip={p.split("=", 1)[0] for p in unresolved})
    refused = refused_keys(problems)
    for rule in settings.RULES:
        try:
            found = [p for p in rule(cfg) if not names_refused(p, refused)]
        except OmegaConfBaseException as exc:  # e.g. an interpolation to a missing value
            if not problems:
                problems.append(" ".join(str(exc).split()))
            continue
        problems += found
        refused |= refused_keys(found)
    if problems:
        head = f"invalid config{f' ({where})' if where else ''}:"
        raise ConfigRangeError("\n  ".join([head, *problems]))


_KEY_VALUE = re.compile(r"([\w.@-]+)=")


def leading_key(message: str) -> str | None:
    """The config key a problem message starts with, ``"k=5 is ..."`` -> ``"k"``; None for a
    message that does not start ``key=value``."""
    found = _KEY_VALUE.match(message)
    return found.group(1) if found else None


def refused_keys(problems: list[str]) -> set[str]:
    """Keys that ``problems`` refuse as out of range or not among their choices (the wording of
    ``field_problems``)."""
    return {leading_key(p) for p in problems
            if leading_key(p) and (" is out of range" in p or " is not one of" in p)}


@cross_field_rule
def depth_covers_measures(cfg: DictConfig) -> list[str]:
    """Every measure name parses and ``k`` reaches the deepest measure cutoff
    (``measures.resolve``)."""
    if "measures" not in cfg or "k" not in cfg:
        return []

    try:
        measures.resolve(cfg.measures, cfg.k)
    except OmegaConfBaseException:  # a value that does not resolve: validate says it once
        raise
    except ValueError as exc:
        return [str(exc)]
    return []


@cross_field_rule
def reads_within_depth(cfg: DictConfig) -> list[str]:
    """Stages that read the top ``n`` of the ranking (``abstain.signal.top_k``,
    ``answer.n_chunks``) read at most ``k`` items (``measures.check_reads``)."""

    reads = {key: OmegaConf.select(cfg, key) for key in ("abstain.signal.top_k", "answer.n_chunks")}
    reads = {key: n for key, n in reads.items() if isinstance(n, int)}
    if "k" not in cfg or not reads:
        return []
    try:
        measures.check_reads(cfg.k, reads)
    except OmegaConfBaseException:  # a value that does not resolve: validate says it once
        raise
    except ValueError as exc:
        return [str(exc)]
    return []


def names_refused(message: str, refused: set[str]) -> bool:
    """Whether a cross-field rule's ``message`` starts with or names a key of ``refused``:
    ``index.nprobe=8 ... <= index.nlist (-3)`` once ``index.nlist=-3`` was refused compares
    against a value already reported as impossible, so only that key's own range is shown."""
    return leading_key(message) in refused or any(
        re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.]*\w)", message) for key in refused)


def known_passages(cfg: DictConfig) -> tuple[int, str] | None:
    """``(n, where)``: at most ``n`` passages will be indexed, as composition can know before
    reading the corpus, and what says so; None when it cannot know. Known only for
    ``chunking=none`` with ``chunking.windows=truncate`` (one passage per document): a BEIR
    folder holds at most as many documents as ``corpus.jsonl`` has lines, a markdown folder as
    many as its ``*.md`` files (``data.sizes``). Any other chunker can make more chunks than
    documents (a long document splits) or fewer (the markdown chunkers skip a document with no
    text, front matter alone included), so the document count bounds nothing there and the
    index checks its chunk count when it is built."""
    ch, ds = cfg.get("chunking"), cfg.get("dataset")
    if not isinstance(ch, DictConfig) or ch.get("name") != "none" \
            or ch.get("windows") != "truncate" or not isinstance(ds, DictConfig):
        return None
    kind = OmegaConf.get_type(ds)
    if kind is schema.BeirDatasetConf and not OmegaConf.is_missing(ds, "path"):
        corpus = Path(str(ds.path)).expanduser() / "corpus.jsonl"
        if corpus.is_file():
            n = sizes.jsonl_lines(corpus)
            return n, (f"dataset.path={ds.path}: at most {n:,} passages, corpus.jsonl having "
                       f"{n:,} lines and chunking=none one passage per document")
    if kind is schema.MarkdownDatasetConf and not OmegaConf.is_missing(ds, "corpus_dir"):
        n = sizes.markdown_documents(str(ds.corpus_dir))
        if n:  # none: markdown_folder_has_documents reports it
            return n, (f"dataset.corpus_dir={ds.corpus_dir}: {n:,} passages, one per markdown "
                       f"document with chunking=none")
    return None


def embedding_dimension(cfg: DictConfig) -> tuple[int, str] | None:
    """``(dimension, where)`` of the run's passage vectors as composition can know it:
    ``embedder.dim`` of the hash embedder, the model's of a fastembed one
    (``embedders.resolve_spec``), the ``passages.npy`` header of a precomputed folder; None
    when it cannot (other rules report a model or folder that is not there)."""
    e = cfg.get("embedder")
    return node_dimension(e) if isinstance(e, DictConfig) else None


def node_dimension(e: DictConfig) -> tuple[int, str] | None:
    """``embedding_dimension`` of the embedder node ``e`` (an option of the ``embedder``
    group, as ``build.named_embedder`` composes it too); a model is never loaded."""
    kind = OmegaConf.get_type(e)
    if kind is schema.HashEmbedderConf:
        return int(e.dim), "embedder.dim"
    try:
        if kind is schema.FastEmbedConf and not OmegaConf.is_missing(e, "model"):
            spec = embedders.resolve_spec(e.model, e.model_path, e.dim, e.pooling)
            return spec.dim, f"embedder.model={e.model}"
        if kind is schema.PrecomputedEmbedderConf and not OmegaConf.is_missing(e, "path"):
            npy = Path(str(e.path)).expanduser() / "passages.npy"
            shape = precomputed.matrix_shape(npy) if npy.is_file() else ()
            if len(shape) == 2:
                return int(shape[1]), f"{npy}"
    except RagexpError:
        return None
    return None


@cross_field_rule
def index_fits_the_data(cfg: DictConfig) -> list[str]:
    """The ``index`` option's own ``fits`` (``index.ann.DenseOption``: ``nlist`` lists and
    ``ivfpq``'s ``2**nbits`` codebook centroids at most the passages, ``m`` dividing the
    dimension) with what composition knows of the passages (``known_passages``) and of their
    dimension (``embedding_dimension``); the option refuses the same at build. An ``index``
    node the option refuses is left to its fields' ranges and its rules."""
    # defer heavy import
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    node = cfg.get("index")
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return []
    try:
        spec = instantiate(node)
    except (InstantiationException, RagexpError):
        return []
    fits = getattr(spec, "fits", None)
    return fits(known_passages(cfg), embedding_dimension(cfg)) if fits is not None else []


def _deepest(cfg: DictConfig) -> measures.Measure | None:
    """The measure with the deepest cutoff in ``cfg.measures`` (None when they do not parse:
    ``depth_covers_measures`` reports that)."""
    try:
        return max(measures.parse_all(cfg.measures), key=lambda m: m.cutoff)
    except (ValueError, KeyError):
        return None


def _hybrid_parts(cfg: DictConfig) -> dict[str, int]:
    """``{part name: depth}`` of the enabled parts of ``retriever=hybrid`` (empty otherwise)."""
    parts = OmegaConf.select(cfg, "retriever.parts")
    if not isinstance(parts, DictConfig):
        return {}
    return {name: parts[name].get("depth", 100) for name in parts
            if parts[name] is not None and isinstance(parts[name].get("depth", 100), int)}


@cross_field_rule
def parts_are_typed(cfg: DictConfig) -> list[str]:
    """Each enabled hybrid part (``retriever.parts.<name>``: plain mappings, so that a command
    line can add one) fits ``schema.HybridPartConf``: known keys of the right types, a
    ``retriever`` given, ``depth`` in range; its ``embedder``, when named, an option of the
    ``embedder`` group that computes vectors (``build.named_embedder``, composed now), and its
    ``retriever``, when a name, an option of the ``retriever`` group (``named_retriever``)."""
    parts = OmegaConf.select(cfg, "retriever.parts")
    if not isinstance(parts, DictConfig):
        return []
    problems = []
    for name in parts:
        key = f"retriever.parts.{name}"
        if parts[name] is None:
            continue
        try:
            typed = OmegaConf.merge(OmegaConf.structured(schema.HybridPartConf), parts[name])
        except OmegaConfBaseException as exc:
            problems.append(f"{key}: {str(exc).splitlines()[0]} (a part has the keys "
                            f"retriever, depth and embedder)")
            continue
        problems += missing_values(typed, f"{key}.") + check_fields(typed, f"{key}.")
        named = {"retriever": build.named_retriever, "embedder": build.named_embedder}
        for slot, option in named.items():
            value = None if OmegaConf.is_missing(typed, slot) else typed[slot]
            if isinstance(value, str):
                try:
                    option(cfg, value, f"{key}.{slot}")
                except RagexpError as exc:
                    problems.append(str(exc))
    return problems


CONTROL_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})
BUILT_WITH = frozenset({"resources"})  # arguments a stage's factory is called with, not config
# Keys of ``retriever=hybrid`` before fusion became a group (the form ``legacy.hybrid_parts``
# rewrites in a recorded config): ``(target, key) -> where that setting went`` (``{where}``: the
# node's own key).
MOVED_KEYS = {
    (legacy.HYBRID, "depth"): "retriever.parts.<name>.depth (one per part)",
    (legacy.HYBRID, "rrf_k"): "fusion.k (fusion=rrf)",
    (legacy.HYBRID, "dense"): "retriever.parts.dense (=null switches the part off)",
    (legacy.HYBRID, "bm25"): "retriever.parts.bm25 (=null switches the part off)",
    # a stage's endpoint keys, its own before the endpoint was one node (legacy.endpoint_node)
    **{(user, key): f"{{where}}.llm.{key}" for user in legacy.ENDPOINT_USERS
       for key in legacy.ENDPOINT_KEYS},
}
DENSE = "ragexp.stages.retrievers.DenseRetriever"
# Targets whose own keys take the ranges of a group's schema: a BM25 part's ``k1``, ``b``,
# ``method`` and ``delta`` are the ``bm25`` group's (``BM25Retriever`` refuses the same).
KEYS_RANGED_AS = {"ragexp.stages.retrievers.BM25Retriever": schema.BM25Conf}


def target_schemas() -> dict[str, type]:
    """``{_target_: schema dataclass}`` for every schema of ``schema.py`` that names one."""
    out: dict[str, type] = {}
    for _, kind in inspect.getmembers(schema, inspect.isclass):
        if dataclasses.is_dataclass(kind) and kind.__module__ == schema.__name__:
            default = {f.name: f.default for f in dataclasses.fields(kind)}.get("_target_")
            if isinstance(default, str):
                out.setdefault(default, kind)
    return out


def target_node_problems(node: DictConfig, where: str) -> list[str]:
    """What ``instantiate`` would refuse in one config node with a ``_target_`` at ``where``
    (``"retriever"``): a target that does not import; a key its signature does not take (a key
    that moved says where, ``MOVED_KEYS``); for a factory (``_partial_: true``) a required
    argument not given (the run supplies only ``BUILT_WITH``); and, for a node that lost its
    schema type (a hybrid part's retriever), its schema's ranges, choices, paths and required
    values (``target_schemas``), and the ranges its keys share with a group (``KEYS_RANGED_AS``:
    a BM25 part's ``b`` is ``bm25.b``'s)."""
    # defer heavy import
    from hydra.utils import get_object

    target = node.get("_target_")
    if not isinstance(target, str):
        return []
    try:
        built = get_object(legacy.target(target))
        params = inspect.signature(built).parameters
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        return [f"{where}._target_={target} does not name a class or function ({exc})"]
    problems = []
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        takes = ", ".join(n for n in params if n not in BUILT_WITH) or "nothing"
        for key in node:
            if key in CONTROL_KEYS or key in params:
                continue
            moved = MOVED_KEYS.get((legacy.target(target), key))
            near = difflib.get_close_matches(str(key), [n for n in params if n not in
                                                        BUILT_WITH], n=1, cutoff=0.75)
            hint = f"did you mean {where}.{near[0]}? " if near else ""
            problems.append(f"{where}.{key} moved to {moved.format(where=where)}: drop "
                            f"{where}.{key}" if moved else
                            f"{where}.{key} is not a setting of {target} ({hint}it takes "
                            f"{takes})")
    if node.get("_partial_") is True:
        problems += [f"{where}.{name} is required by {target} and has no value: add it"
                     for name, p in params.items()
                     if p.default is inspect.Parameter.empty and name not in BUILT_WITH
                     and name not in node and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not dataclasses.is_dataclass(OmegaConf.get_type(node)):
        for kind in (target_schemas().get(legacy.target(target)),
                     KEYS_RANGED_AS.get(legacy.target(target))):
            for f in dataclasses.fields(kind) if kind is not None else ():
                if f.name in node and f.metadata and not OmegaConf.is_missing(node, f.name):
                    problems += field_problems(f"{where}.{f.name}", node[f.name], f.metadata)
    return problems


def config_children(cfg: DictConfig) -> Iterator[tuple[str, DictConfig]]:
    """``(key, node)`` for each mapping under ``cfg`` that a rule walking the config reads:
    ``hydra``, interpolations, missing and switched-off (``None``) nodes left out."""
    for key in cfg:
        node = cfg._get_node(key)
        if key == "hydra" or not isinstance(node, DictConfig) or node._is_missing() \
                or node._is_none() or node._is_interpolation():
            continue
        yield str(key), cfg[key]


@cross_field_rule
def targets_take_their_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """``target_node_problems`` for every node of ``cfg`` with a ``_target_`` (recursively;
    ``hydra``, interpolations and switched-off nodes left out), so that a key a stage does not
    take (``+retriever.depth=1`` under ``retriever=hybrid``, ``+fusion.alpha=0.1`` under
    ``fusion=rrf``) is refused before any run, not as a job's ``TypeError``."""
    problems = []
    for key, node in config_children(cfg):
        problems += target_node_problems(node, f"{prefix}{key}")
        problems += targets_take_their_keys(node, f"{prefix}{key}.")
    return problems


def typo_of(key: str, name: str) -> bool:
    """Whether ``key`` is one slip of the keyboard from ``name``: an edit distance (optimal
    string alignment: insert, delete, replace, swap two neighbours; ``rapidfuzz``) of 1,
    case ignored, or 2 where both have 8 characters or more. A name of ragexp's with a word
    added (``experiment_note``, ``baseline_run``) is no typo: a similarity ratio
    (``difflib``) refused those as typos of ``experiment`` and ``baseline``."""
    # defer heavy import
    from rapidfuzz.distance import OSA

    key, name = key.lower(), name.lower()
    if key == name:
        return True
    return OSA.distance(key, name) <= (2 if min(len(key), len(name)) >= 8 else 1)


@cross_field_rule
def schemas_take_their_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """A key appended (``+abstain.budgt=0.05``, following Hydra's "To append to your config
    use +..." hint for a misspelt key) to a typed node that has no ``_target_`` (``abstain``,
    ``bm25``, ``llm``, ``traces``): refused, naming the keys its schema takes and the closest
    one. Nothing reads such a key: a sweep over ``+abstain.budgt=0.05,0.5`` ran two identical
    configs and named a best of them, and ``+bm25.k=2`` failed every job with a ``TypeError``.
    At the top level, where a key of the user's own (``+tag=...``) is logged with the run's
    params and read by nothing, only a typo of one of ragexp's (``typo_of``: ``+split_sed=3``
    for ``split_seed``) is refused; ``+experiment_note=x`` is the user's own. Nodes with a
    ``_target_`` are ``targets_take_their_keys``'."""
    problems = []
    kind = OmegaConf.get_type(cfg)
    if dataclasses.is_dataclass(kind) and "_target_" not in cfg:
        fields = [f.name for f in dataclasses.fields(kind)]
        where = prefix.rstrip(".") or "ragexp's config"
        for key in cfg:
            if key in fields or key == "hydra":
                continue
            near = (difflib.get_close_matches(str(key), fields, n=1, cutoff=0.75) if prefix
                    else [f for f in fields if typo_of(str(key), f)][:1])
            if not prefix and not near:
                continue  # a top-level key of the user's own
            takes = (f"did you mean {near[0]}?" if not prefix else
                     f"{f'did you mean {prefix}{near[0]}? ' if near else ''}it takes "
                     f"{', '.join(fields)}")
            problems.append(f"{prefix}{key} is not a setting of {where} ({takes}): nothing "
                            f"would read it")
    for key, node in config_children(cfg):
        problems += schemas_take_their_keys(node, f"{prefix}{key}.")
    return problems


@cross_field_rule
def selected_options_are_read(cfg: DictConfig) -> list[str]:
    """``compose.shadowed_choices`` for the config's own Hydra runtime: ``cfg.hydra.runtime``
    where it was composed with it (a sweep's jobs, checked before its parent run), else the
    running app's (``HydraConfig``); nothing outside Hydra."""
    # defer heavy import
    from hydra.core.hydra_config import HydraConfig

    runtime = OmegaConf.select(cfg, "hydra.runtime", default=None)
    if runtime is None and HydraConfig.initialized():
        runtime = HydraConfig.get().runtime
    if runtime is None or "config_sources" not in runtime:
        return []
    sources = [(s.provider, s.schema, s.path) for s in runtime.config_sources]
    return compose.shadowed_choices(sources, OmegaConf.to_container(runtime.choices))


@cross_field_rule
def parts_build(cfg: DictConfig) -> list[str]:
    """Each enabled hybrid part can be built as written: its ``retriever`` is an option name
    whose option needs no value a name cannot give (``retriever: trec_run`` lacks ``path``), or
    a mapping with ``_target_`` and ``_partial_: true`` (the rest is checked by
    ``targets_take_their_keys``); an ``embedder`` only on a dense part (no other part reads
    one)."""
    parts = OmegaConf.select(cfg, "retriever.parts")
    if not isinstance(parts, DictConfig):
        return []
    problems = []
    for name in parts:
        part, key = parts[name], f"retriever.parts.{name}"
        if not isinstance(part, DictConfig) or "retriever" not in part \
                or OmegaConf.is_missing(part, "retriever"):
            continue  # off, or parts_are_typed reports it
        retriever, target = part.retriever, None
        if isinstance(retriever, str):
            try:
                option = build.named_retriever(cfg, retriever, f"{key}.retriever")
            except RagexpError:
                continue  # parts_are_typed reports it
            target = option.get("_target_")
            needs = [m.split(" is required")[0].removeprefix(f"{key}.retriever.")
                     for m in missing_values(option, f"{key}.retriever.")]
            if needs:
                problems.append(
                    f"{key}.retriever={retriever}: the {retriever} option needs "
                    f"{', '.join(needs)}, which a part naming it cannot give: write it as a "
                    f"mapping, {key}.retriever={{_target_: {option._target_}, _partial_: true, "
                    f"{': ..., '.join(needs)}: ...}}")
        elif isinstance(retriever, DictConfig):
            if "_target_" not in retriever:
                problems.append(
                    f"{key}.retriever is a mapping without _target_: a part's retriever is an "
                    f"option name of the retriever group (dense, bm25) or a mapping with "
                    f"_target_ and _partial_: true (conf/retriever/hybrid.yaml)")
                continue
            if retriever.get("_partial_") is not True:
                problems.append(f"{key}.retriever needs _partial_: true (a part's retriever is "
                                f"built on the run's resources)")
            target = retriever._target_
        embedder = part.get("embedder")
        if embedder is not None and target is not None and legacy.target(target) != DENSE:
            problems.append(f"{key}.embedder={embedder}: only a dense part reads an embedder; "
                            f"this part's retriever is {target}: drop {key}.embedder")
    return problems


@cross_field_rule
def part_depths_cover_measures(cfg: DictConfig) -> list[str]:
    """Every enabled hybrid part feeds fusion at least as deep as the deepest measure cutoff:
    a part cut shallower drops items a measure counts (at depth 1 a relevant item at rank 2
    of the dense part is lost, and R@10 reads 0.5 where it is 1.0). Both count judged units
    (chunks, or distinct sections, documents or parents: ``HybridRetriever``)."""
    deepest = _deepest(cfg) if "measures" in cfg else None
    if deepest is None:
        return []
    return [f"retriever.parts.{name}.depth={depth} is below the deepest measure cutoff "
            f"{deepest.cutoff} ({deepest.name} in measures): set retriever.parts.{name}.depth>="
            f"{deepest.cutoff} or drop {deepest.name}"
            for name, depth in _hybrid_parts(cfg).items() if depth < deepest.cutoff]


@cross_field_rule
def rerank_within_first_stage(cfg: DictConfig) -> list[str]:
    """``reranker.top_n`` reads no deeper than the hybrid first stage's deepest part: the fused
    list is only sure to hold that many items per query."""
    top_n, depths = OmegaConf.select(cfg, "reranker.top_n"), _hybrid_parts(cfg)
    if not isinstance(top_n, int) or not depths:
        return []
    name, depth = max(depths.items(), key=lambda kv: kv[1])
    if top_n > depth:
        return [f"reranker.top_n={top_n} is above the first-stage depth "
                f"retriever.parts.{name}.depth={depth} (its deepest part): set reranker.top_n"
                f"<={depth} or retriever.parts.{name}.depth>={top_n}"]
    return []


@cross_field_rule
def objective_is_measured(cfg: DictConfig) -> list[str]:
    """``objective`` is one of ``measures`` (``measures.check_objective``); measures that do
    not parse are ``depth_covers_measures``' to report, once (``measures=[AP]`` was also
    reported as the objective's fault)."""
    if "objective" not in cfg or "measures" not in cfg:
        return []
    try:
        measures.parse_all(cfg.measures)
    except OmegaConfBaseException:  # a value that does not resolve: validate says it once
        raise
    except ValueError:
        return []
    try:
        measures.check_objective(cfg.objective, cfg.measures)
    except OmegaConfBaseException:  # a value that does not resolve: validate says it once
        raise
    except ValueError as exc:
        return [f"objective={cfg.objective!r}: {exc}"]
    return []


@cross_field_rule
def sections_need_headings(cfg: DictConfig) -> list[str]:
    """``dataset.unit=section`` scores a chunk's heading path (``data.units``); a chunker that
    keeps every document whole (``WholeDocumentChunker``, ``chunking=none``) gives each
    document one chunk and so one section, and the run would score documents under the name
    of sections (a trial: silently)."""
    target = OmegaConf.select(cfg, "chunking._target_", default="")
    if (OmegaConf.select(cfg, "dataset.unit", default=None) != "section"
            or not str(target).endswith(".WholeDocumentChunker")):
        return []
    return [f"dataset.unit=section scores heading sections, but chunking="
            f"{OmegaConf.select(cfg, 'chunking.name', default='none')} keeps each document "
            f"whole (one chunk, so one section per document): the run would score documents; "
            f"use a chunking that splits at headings (chunking=markdown, sentences, semantic, "
            f"parent_child) or dataset.unit=document"]


@cross_field_rule
def markdown_folder_has_documents(cfg: DictConfig) -> list[str]:
    """A markdown dataset's ``corpus_dir`` holds at least one markdown file
    (``readers.has_markdown_documents``: ``golden.load_corpus`` reads only those), checked once
    it is a folder: a fresh ``ragexp init`` folder has an empty ``docs/``."""
    ds = cfg.get("dataset")
    if ds is None or "corpus_dir" not in ds or OmegaConf.is_missing(ds, "corpus_dir"):
        return []
    root = Path(str(ds.corpus_dir)).expanduser()
    if not root.is_dir() or readers.has_markdown_documents(root):
        return []  # check_fields reports a missing folder
    return [f"dataset.corpus_dir={ds.corpus_dir} holds no markdown documents (*.md, *.markdown):"
            f" put your documents there, or point dataset.corpus_dir at their folder"]


@cross_field_rule
def beir_files_exist(cfg: DictConfig) -> list[str]:
    """A BEIR folder holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<dataset.split>.tsv``
    (``data.beir``'s readers), checked once ``dataset.path`` is a folder."""
    ds = cfg.get("dataset")
    if ds is None or "split" not in ds or "path" not in ds or OmegaConf.is_missing(ds, "path"):
        return []
    root = Path(str(ds.path)).expanduser()
    if not root.is_dir():
        return []  # check_fields reports the folder
    wanted = ("corpus.jsonl", "queries.jsonl", f"qrels/{ds.split}.tsv")
    absent = [name for name in wanted if not (root / name).is_file()]
    return [f"dataset.path={ds.path} has no {', '.join(absent)} (a BEIR folder needs corpus.jsonl, "
            f"queries.jsonl and qrels/<dataset.split>.tsv)"] if absent else []


@cross_field_rule
def embedder_model_known(cfg: DictConfig) -> list[str]:
    """A fastembed embedder's ``model``, ``model_path``, ``dim`` and ``pooling`` describe one
    model (``embedders.resolve_spec``: ragexp's catalogue, fastembed's, or a local folder)."""
    e = cfg.get("embedder")
    if e is None or "model" not in e or "pooling" not in e or OmegaConf.is_missing(e, "model"):
        return []
    try:
        embedders.resolve_spec(e.model, e.model_path, e.dim, e.pooling)
    except RagexpError as exc:
        return [str(exc)]
    return []


@cross_field_rule
def token_sizes_have_a_tokenizer(cfg: DictConfig) -> list[str]:
    """``chunking.max_tokens`` and ``chunking.windows=maxp`` size in the embedder's tokens, so
    the embedder has a tokenizer: the hash embedder has none (the chunker's ``with_tokenizer``
    refuses it in the same words, ``chunking.without_tokenizer``)."""
    ch, e = cfg.get("chunking"), cfg.get("embedder")
    if ch is None or e is None or OmegaConf.get_type(e) is not schema.HashEmbedderConf:
        return []
    asked = [key for key, on in (("chunking.max_tokens", ch.get("max_tokens") is not None),
                                 ("chunking.windows=maxp", ch.get("windows") == "maxp")) if on]
    return [chunking.without_tokenizer(key) for key in asked]


def composition_error(exc: BaseException) -> str:
    """Hydra's composition error as one line: ``Could not find 'retriever/hybrd'; options in
    'retriever': bm25, dense, ...`` (the ``*_schema`` entries of the ConfigStore left out: they
    are no option; with ``(conf/dataset/mine.yaml is here: pass --config-dir conf)`` when the
    current folder's ``conf/``, as ``ragexp init`` writes it, has the option), or the error and
    its cause (``Could not override 'k'. ...: Key 'x' is not in struct``) without Hydra's
    config search path; an override of a stage's endpoint key as the stage's own
    (``answer.model=x``, before the endpoint was one node) says where it is now
    (``answer.llm.model``)."""
    options = [o for o in getattr(exc, "options", None) or [] if not o.endswith("_schema")]
    text = str(exc).split("\nAvailable options")[0].split("\nConfig search path")[0]
    message = " ".join(text.split())
    if options:
        group = getattr(exc, "missing_cfg_file", "") or ""
        message += f"; options in '{group.rpartition('/')[0]}': {', '.join(options)}"
        project = Path("conf") / f"{group}.yaml"
        if group and project.is_file():  # ragexp init's layout, not on the search path
            message += f" ({project} is here: pass --config-dir conf)"
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException):
        message += f": {' '.join(str(cause).splitlines()[0].split())}"
    moved = re.search(r"Could not override '(answer|judge|generator)\.(\w+)'", message)
    if moved and moved.group(2) in legacy.ENDPOINT_KEYS:
        stage, key = moved.groups()
        message += f" ({stage}.{key} is {stage}.llm.{key} now: docs/llm.md)"
    return message


@cross_field_rule
def experiment_named(cfg: DictConfig) -> list[str]:
    """``experiment`` names an MLflow experiment: not empty or blank (MLflow refuses it when
    the run is created, after the data loaded: ``Invalid experiment name: ''``)."""
    node = cfg._get_node("experiment") if "experiment" in cfg else None
    if node is None or node._is_interpolation():  # unresolvable's, or the job's (${hydra:..})
        return []
    name = node._value()
    if name is None or str(name).strip():
        return []
    return [f"experiment={name!r} is blank: name the MLflow experiment (default "
            f"ragexp-<dataset name>)"]


@cross_field_rule
def precomputed_folder_checks(cfg: DictConfig) -> list[str]:
    """``embedder=precomputed``: ``embedder.path`` is a folder whose files pass every check
    composition can make without loading a matrix (``precomputed.folder_problems``: headers,
    ids); the questions' vectors come from exactly one of queries.npy and ``embedder.queries``,
    an embedder option that computes vectors (``build.named_embedder``) of passages.npy's
    dimension (``node_dimension``: hash ``dim``, a fastembed model's catalogue dimension)."""
    e = cfg.get("embedder")
    if not isinstance(e, DictConfig) or OmegaConf.get_type(e) \
            is not schema.PrecomputedEmbedderConf or OmegaConf.is_missing(e, "path"):
        return []
    path, queries = str(e.path), e.get("queries")
    problems = [f"embedder.path={p}" if p.startswith((f"{path} ", f"{path}:"))
                else f"embedder.path={path}: {p}" for p in precomputed.folder_problems(path)]
    if problems:
        return problems
    folder = Path(path).expanduser()
    if queries is None:
        if not (folder / "queries.npy").is_file():
            return [f"embedder.path={path} has no queries.npy/queries.txt: add them, or embed "
                    f"the questions with a named embedder (embedder.queries=minilm)"]
        return []
    if (folder / "queries.npy").is_file():
        return [f"embedder.queries={queries} and {folder / 'queries.npy'} both give the "
                f"questions' vectors: remove one (or leave embedder.queries null)"]
    try:
        named = node_dimension(build.named_embedder(cfg, str(queries)))
    except RagexpError as exc:
        return [str(exc)]
    dim = precomputed.matrix_shape(folder / "passages.npy")[1]
    if named is not None and named[0] != dim:
        return [f"embedder.queries={queries} gives {named[0]}-d vectors (its {named[1]}) but "
                f"{folder / 'passages.npy'} holds {dim}-d ones: both must have the same "
                f"dimension (docs/embedding.md: another dim)"]
    return []
