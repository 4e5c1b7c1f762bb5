"""Config values checked against their valid ranges when the config is composed, before any
MLflow run or sweep job exists.

Ranges are data on the schema: a dataclass field in ``schema.py`` declares
``field(default=..., metadata={"ge": 1})`` (keys ``ge``, ``gt``, ``le``, ``lt``), and
``check_ranges`` walks any composed config whose nodes keep their schema type, so a new field
with a range is checked with no further code. Rules that relate several keys (``overlap_words <
max_words``, ``k`` at least the deepest measure cutoff, ...) are plain functions registered with
``cross_field_rule``; each returns a list of messages. ``validate`` runs both and raises one
``ConfigRangeError`` listing every violation.
"""

from __future__ import annotations

import dataclasses
import operator
from pathlib import Path
from typing import Any, Callable, Iterator

from omegaconf import DictConfig, OmegaConf

from ragexp.errors import RagexpError
from ragexp.evaluation import measures
from ragexp.index import embedders
from ragexp.stages.chunking import WINDOWS

BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "ge": (operator.ge, ">="), "gt": (operator.gt, ">"),
    "le": (operator.le, "<="), "lt": (operator.lt, "<"),
}
CrossFieldRule = Callable[[DictConfig], list[str]]
_RULES: list[CrossFieldRule] = []


class ConfigRangeError(RagexpError, ValueError):
    """One or more config values outside their valid range; the message names each key, value
    and range, one per line."""


def describe(bounds: dict[str, Any]) -> str:
    """``{"ge": 0, "le": 1}`` -> ``"[0, 1]"``; one-sided bounds read ``">= 1"``."""
    lo = next(((k, bounds[k]) for k in ("ge", "gt") if k in bounds), None)
    hi = next(((k, bounds[k]) for k in ("le", "lt") if k in bounds), None)
    if lo and hi:
        return f"{'[' if lo[0] == 'ge' else '('}{lo[1]}, {hi[1]}{']' if hi[0] == 'le' else ')'}"
    only = lo or hi
    return f"{BOUNDS[only[0]][1]} {only[1]}"


def ranged_fields(schema_type: type) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(field name, bounds)`` for each field of a schema dataclass that declares a range."""
    for f in dataclasses.fields(schema_type):
        bounds = {k: v for k, v in f.metadata.items() if k in BOUNDS}
        if bounds:
            yield f.name, bounds


def out_of_range(value: Any, bounds: dict[str, Any]) -> bool:
    """True when ``value`` breaks any bound; ``None`` (an unset optional) is never out of range."""
    if value is None:
        return False
    return any(not BOUNDS[k][0](value, bound) for k, bound in bounds.items())


def check_ranges(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Messages ``"key=value is out of range: must be RANGE"`` for every ranged field of every
    node in ``cfg`` (recursively) whose schema type declares one."""
    problems: list[str] = []
    schema_type = OmegaConf.get_type(cfg)
    if schema_type is not None and dataclasses.is_dataclass(schema_type):
        for name, bounds in ranged_fields(schema_type):
            value = cfg.get(name)
            if out_of_range(value, bounds):
                problems.append(f"{prefix}{name}={value} is out of range: must be "
                                f"{describe(bounds)}")
    for key in cfg:
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_missing() and not node._is_none():
            problems += check_ranges(node, f"{prefix}{key}.")
    return problems


def cross_field_rule(rule: CrossFieldRule) -> CrossFieldRule:
    """Register ``rule(cfg) -> [message, ...]`` to run on every composed config (decorator)."""
    if rule not in _RULES:
        _RULES.append(rule)
    return rule


def validate(cfg: DictConfig, where: str = "") -> None:
    """Raise ``ConfigRangeError`` naming every out-of-range value and broken cross-field rule.

    ``where`` (e.g. the job's overrides) is added to the message so a sweep says which job."""
    problems = check_ranges(cfg)
    for rule in _RULES:
        problems += rule(cfg)
    if problems:
        head = f"invalid config{f' ({where})' if where else ''}:"
        raise ConfigRangeError("\n  ".join([head, *problems]))


@cross_field_rule
def overlap_below_window(cfg: DictConfig) -> list[str]:
    """Markdown chunking: consecutive windows share fewer words than a window holds."""
    ch = cfg.get("chunking")
    if ch is None or "overlap_words" not in ch or "max_words" not in ch:
        return []
    if ch.overlap_words >= ch.max_words:
        return [f"chunking.overlap_words={ch.overlap_words} is out of range: must be < "
                f"chunking.max_words ({ch.max_words})"]
    return []


@cross_field_rule
def token_overlap_below_window(cfg: DictConfig) -> list[str]:
    """Markdown chunking in tokens: consecutive windows share fewer tokens than one holds."""
    ch = cfg.get("chunking")
    if ch is None or ch.get("max_tokens") is None or "overlap_tokens" not in ch:
        return []
    if ch.overlap_tokens >= ch.max_tokens:
        return [f"chunking.overlap_tokens={ch.overlap_tokens} is out of range: must be < "
                f"chunking.max_tokens ({ch.max_tokens})"]
    return []


@cross_field_rule
def windows_is_a_choice(cfg: DictConfig) -> list[str]:
    """``chunking.windows`` names a way to treat passages over the embedder's window."""
    ch = cfg.get("chunking")
    if ch is None or "windows" not in ch or ch.windows in WINDOWS:
        return []
    return [f"chunking.windows={ch.windows} is not a choice: must be one of "
            f"{', '.join(WINDOWS)}"]


@cross_field_rule
def depth_covers_measures(cfg: DictConfig) -> list[str]:
    """Every measure name parses and ``k`` reaches the deepest measure cutoff
    (``measures.resolve``)."""
    if "measures" not in cfg or "k" not in cfg:
        return []

    try:
        measures.resolve(cfg.measures, cfg.k)
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
    except ValueError as exc:
        return [str(exc)]
    return []


@cross_field_rule
def chunk_sizes_ordered(cfg: DictConfig) -> list[str]:
    """Sentence chunking shares fewer sentences than a chunk holds; semantic chunking's
    ``min_words`` is at most its ``max_words``; parent-child children, as markdown windows,
    share fewer words than a window holds."""
    rules = (("chunking", "overlap_sentences", "sentences", operator.lt, "<"),
             ("chunking", "min_words", "max_words", operator.le, "<="),
             ("chunking.children", "overlap_words", "max_words", operator.lt, "<"))
    problems = []
    for node, low, high, holds, sign in rules:
        ch = OmegaConf.select(cfg, node)
        if isinstance(ch, DictConfig) and low in ch and high in ch and not holds(ch[low],
                                                                                ch[high]):
            problems.append(f"{node}.{low}={ch[low]} is out of range: must be {sign} "
                            f"{node}.{high} ({ch[high]})")
    return problems


@cross_field_rule
def ef_search_covers_depth(cfg: DictConfig) -> list[str]:
    """``index.ef_search`` (HNSW's candidates per query) at least the depth the first stage
    retrieves, ``max(k, reranker.top_n)``: FAISS would silently search ``k`` candidates
    instead, so the setting would not measure what it says."""
    ef = OmegaConf.select(cfg, "index.ef_search")
    if not isinstance(ef, int) or "k" not in cfg:
        return []
    top_n = OmegaConf.select(cfg, "reranker.top_n")
    depth = max(cfg.k, top_n if isinstance(top_n, int) else 0)
    if ef < depth:
        return [f"index.ef_search={ef} is out of range: must be >= the depth retrieved, "
                f"max(k, reranker.top_n) = {depth}; raise index.ef_search or lower k"]
    return []


@cross_field_rule
def nprobe_within_nlist(cfg: DictConfig) -> list[str]:
    """``index.nprobe`` (IVF lists searched per query) at most ``index.nlist`` (lists built)."""
    nprobe, nlist = (OmegaConf.select(cfg, f"index.{key}") for key in ("nprobe", "nlist"))
    if isinstance(nprobe, int) and isinstance(nlist, int) and nprobe > nlist:
        return [f"index.nprobe={nprobe} is out of range: must be <= index.nlist ({nlist})"]
    return []


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
    return {name: parts[name].depth for name in parts
            if parts[name] is not None and isinstance(parts[name].get("depth"), int)}


@cross_field_rule
def part_depths_cover_measures(cfg: DictConfig) -> list[str]:
    """Every enabled hybrid part feeds fusion at least as deep as the deepest measure cutoff:
    a part cut shallower drops items a measure counts (at depth 1 a relevant item at rank 2
    of the dense part is lost, and R@10 reads 0.5 where it is 1.0)."""
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
def convex_fuses_two_parts(cfg: DictConfig) -> list[str]:
    """``fusion=convex`` with ``retriever=hybrid``: exactly two parts on, one of them
    ``fusion.part``."""
    fusion, depths = cfg.get("fusion"), _hybrid_parts(cfg)
    if not depths or not isinstance(fusion, DictConfig) or fusion.get("name") != "convex":
        return []
    if len(depths) != 2 or fusion.get("part") not in depths:
        return [f"fusion=convex combines exactly two parts, one of them fusion.part="
                f"{fusion.get('part')}; retriever.parts has {sorted(depths)} on"]
    return []


@cross_field_rule
def device_runs_here(cfg: DictConfig) -> list[str]:
    """``embedder.device`` is cpu or cuda, and cuda only where onnxruntime has its CUDA
    provider (``embedders.cuda_unavailable``): a sweep stops before any job, never running on
    the CPU instead."""
    device = OmegaConf.select(cfg, "embedder.device", default=None)
    if device is None or device == "cpu":
        return []
    if device not in embedders.DEVICES:
        return [f"embedder.device={device} is not a choice: must be one of "
                f"{', '.join(embedders.DEVICES)}"]
    why = embedders.cuda_unavailable()
    return [why] if why else []


@cross_field_rule
def precomputed_folder_exists(cfg: DictConfig) -> list[str]:
    """``embedder.path`` (``embedder=precomputed``) is a folder holding passages.npy and
    passages.txt; their contents are checked when the embedder is built
    (``index.precomputed``)."""
    path = OmegaConf.select(cfg, "embedder.path", default=None)
    if OmegaConf.select(cfg, "embedder.name", default=None) != "precomputed" or path is None:
        return []
    missing = [n for n in ("passages.npy", "passages.txt") if not (Path(path) / n).is_file()]
    if not missing:
        return []
    return [f"embedder.path={path} lacks {', '.join(missing)} (a folder of passages.npy, "
            f"passages.txt and queries.npy/queries.txt: docs/embedding.md)"]
