"""A stage's settings, declared once on its own dataclass fields.

What a field accepts is data on the field (as ir_measures declares ``SUPPORTED_PARAMS`` beside
each measure): ``field(default=120, metadata={"ge": 10})``, with keys ``ge``, ``gt``, ``le``,
``lt`` (a range), ``choices`` (a set of names), ``path`` (an input that must exist: ``dir``,
``file`` or ``any``), ``hint`` (what to give: the config must give a value), ``built`` (given
by the run that builds the stage, never a config key: a tokenizer; ``BUILT``) and
``interpolate`` (what the composed config holds by default in place of the field's default:
``"${cache_dir}"``, the run's value). Two class attributes of a stage shape its schema further:
``HYDRA_KEYS`` (Hydra's own keys, ``{"_recursive_": False}``) and ``LEADING`` (the settings a
config lists first; default ``("name",)``). From that one declaration:

- ``schema`` makes the typed config Hydra composes (registered by ``config.schema``), so a value
  out of range fails at composition, for every job of a sweep, before any run exists;
- ``problems`` and ``check`` apply the same metadata to a built stage (``__post_init__``), with
  the same message (``field_problems``), so constructing a stage directly refuses what
  composition refuses, in the same words;
- ``cross_field_rule`` (or ``rule_for``, for a check of one group's node) registers, from the
  stage's own module, a rule relating several keys (``overlap_words < max_words``), which
  ``config.validation`` runs on every composed config.

May import only the standard library and ``ragexp.errors``: every package imports it.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Optional

from ragexp.errors import PATH_KINDS, InvalidValue, path_problem

BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "ge": (operator.ge, ">="), "gt": (operator.gt, ">"),
    "le": (operator.le, "<="), "lt": (operator.lt, "<"),
}
BUILT = {"built": True}  # metadata of a field the run gives when it builds the stage
SCHEMA_ONLY = ("built", "interpolate")  # metadata read by ``schema``, not by validation
REQUIRED = "???"  # OmegaConf's MISSING: a value the user must give
HYDRA_KEYS = "HYDRA_KEYS"  # a stage's class attribute: Hydra keys of its schema (_convert_, ...)
CrossFieldRule = Callable[[Any], list[str]]  # (composed config) -> [message, ...]
RULES: list[CrossFieldRule] = []


def describe(bounds: Mapping[str, Any]) -> str:
    """``{"ge": 0, "le": 1}`` -> ``"[0, 1]"``; one-sided bounds read ``">= 1"``."""
    lo = next(((k, bounds[k]) for k in ("ge", "gt") if k in bounds), None)
    hi = next(((k, bounds[k]) for k in ("le", "lt") if k in bounds), None)
    if lo and hi:
        return f"{'[' if lo[0] == 'ge' else '('}{lo[1]}, {hi[1]}{']' if hi[0] == 'le' else ')'}"
    only = lo or hi
    return f"{BOUNDS[only[0]][1]} {only[1]}"


def out_of_range(value: Any, bounds: Mapping[str, Any]) -> bool:
    """True when ``value`` breaks any bound; ``None`` (an unset optional) is never out of range."""
    if value is None:
        return False
    return any(not BOUNDS[k][0](value, bound) for k, bound in bounds.items())


def field_problems(key: str, value: Any, meta: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``value`` of the config key ``key`` under its field's metadata
    (ranges, ``choices``, ``path``); ``None`` (an unset optional) is never wrong."""
    if value is None:
        return []
    bounds = {k: v for k, v in meta.items() if k in BOUNDS}
    if bounds and out_of_range(value, bounds):
        return [f"{key}={value} is out of range: must be {describe(bounds)}"]
    if "choices" in meta and value not in meta["choices"]:
        return [f"{key}={value!r} is not one of {', '.join(map(str, meta['choices']))}"]
    if "path" in meta:  # one path, or a list of them (dataset.questions)
        paths = list(value) if isinstance(value, Sequence) and not isinstance(value, str) \
            else [value]
        wrong = [(p, path_problem(str(p), meta["path"])) for p in paths]
        return [f"{key}={p}: {problem} ({Path(str(p)).expanduser().resolve()}); give the path "
                f"of a {PATH_KINDS[meta['path']]} that exists (relative paths start from the "
                f"folder ragexp runs in)" for p, problem in wrong if problem]
    return []


def problems(stage: Any, prefix: str) -> list[str]:
    """``field_problems`` of each field of the dataclass instance ``stage`` that declares a
    range or choices, its key read ``<prefix>.<field>`` (``"chunking.max_words=5 is out of
    range: must be >= 10"``). Paths are left to the code that opens them."""
    out = []
    for f in dataclasses.fields(stage):
        meta = {k: v for k, v in f.metadata.items() if k in BOUNDS or k == "choices"}
        if meta:
            out += field_problems(f"{prefix}.{f.name}", getattr(stage, f.name), meta)
    return out


def ordered(low_key: str, low: Any, high_key: str, high: Any, strict: bool = True
            ) -> list[str]:
    """``["low_key=low is out of range: must be < high_key (high)"]`` unless ``low < high``
    (``<=`` when not ``strict``); ``[]`` when it holds or either value is None."""
    if low is None or high is None or (low < high if strict else low <= high):
        return []
    return [f"{low_key}={low} is out of range: must be {'<' if strict else '<='} {high_key} "
            f"({high})"]


def refuse(found: list[str], error: type[Exception] = InvalidValue) -> None:
    """Raise ``error`` (a ``RagexpError``; default ``InvalidValue``) listing ``found``
    (``"; "``-joined), if there is any."""
    if found:
        raise error("; ".join(found))


def check(stage: Any, prefix: str, *more: list[str], error: type[Exception] = InvalidValue
          ) -> None:
    """Raise ``InvalidValue`` naming every field of ``stage`` out of its range or choices
    (``problems``) and every problem of ``more`` (a stage's cross-field rules, applied to
    itself), these only when every field is in range (a rule compares with a value already
    refused, as ``config.validation`` reports it): the guard of a stage built directly, in
    composition's words. ``error``: the stage's own error class."""
    refuse(problems(stage, prefix) or [p for found in more for p in found], error)


def cross_field_rule(rule: CrossFieldRule) -> CrossFieldRule:
    """Register ``rule(cfg) -> [message, ...]`` to run on every composed config (decorator;
    ``config.validation.validate`` runs them in the order registered)."""
    if rule not in RULES:
        RULES.append(rule)
    return rule


def rule_for(group: str, keys: Iterable[str], check: Callable[[Any, str], list[str]]
             ) -> CrossFieldRule:
    """Register, and return, the rule ``check(node, group)`` on the composed config's node at
    ``group`` (dotted: ``chunking.children``) when that node holds every one of ``keys``: a
    stage's own cross-field check, which its constructor applies to itself
    (``check(self, "chunking")``), so both say the same."""
    needed = frozenset(keys)

    def rule(cfg: Any) -> list[str]:
        node = cfg
        for part in group.split("."):
            node = node.get(part) if hasattr(node, "keys") and part in node else None
        return check(node, group) if hasattr(node, "keys") and needed <= set(node) else []

    rule.__name__ = rule.__qualname__ = f"{check.__name__}_of_{group.replace('.', '_')}"
    rule.__module__ = check.__module__
    rule.__doc__ = f"``{check.__name__}`` of the composed ``{group}``."
    return cross_field_rule(rule)


def config_type(hint: Any) -> Any:
    """The type a structured config gives a field of type ``hint``: ``X | None`` is
    ``Optional[X]``, a ``Mapping``/``Sequence`` of plain values a ``Dict``/``List``, and
    anything OmegaConf cannot type (a protocol, a callable) ``Any``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = config_type(rest[0]) if len(rest) == 1 else Any
        return Optional[inner] if type(None) in args and inner is not Any else inner
    if origin in (dict, Mapping, typing.Mapping) and args:
        return typing.Dict[config_type(args[0]), config_type(args[1])]  # noqa: UP006
    if origin in (list, Sequence, typing.Sequence) and args:
        return typing.List[config_type(args[0])]  # noqa: UP006
    if hint in (int, float, bool, str, Any):
        return hint
    return Any


def field_type(cls: type, f: dataclasses.Field) -> Any:
    """The annotation of ``cls``'s field ``f``, evaluated in its module (``from __future__
    import annotations`` leaves it a string)."""
    if not isinstance(f.type, str):
        return f.type
    return eval(f.type, vars(sys.modules[cls.__module__]), dict(vars(cls)))  # noqa: S307


def settings(cls: type) -> list[dataclasses.Field]:
    """The fields of the stage dataclass ``cls`` that are config keys: those its constructor
    takes, less any marked ``built``; ``name`` first (as a config reads: which option), or
    those its class attribute ``LEADING`` names, in that order."""
    own = [f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("built")]
    leading = getattr(cls, "LEADING", ("name",))
    return sorted(own, key=lambda f: leading.index(f.name) if f.name in leading
                  else len(leading))


def values(stage: Any) -> dict[str, Any]:
    """``{key: value}`` of the ``settings`` of the stage dataclass instance ``stage``: the
    config that builds it again."""
    return {f.name: getattr(stage, f.name) for f in settings(type(stage))}


def schema(cls: type, name: str, *, fields: Mapping[str, tuple[Any, dataclasses.Field]]
           | None = None, module: str | None = None, target: bool | str = True) -> type:
    """The structured config of the stage dataclass ``cls``, a dataclass named ``name``:
    ``_target_`` (``cls``'s import path, so Hydra builds ``cls``), the Hydra keys ``cls``
    declares (class attribute ``HYDRA_KEYS``: ``{"_recursive_": False}``), then each of its
    ``settings`` with the same name, default (or ``interpolate``) and metadata and its type as
    a config (``config_type``); a field without a default, or with a ``hint`` (what to give),
    is required (``???``, its type not optional: the stage may refuse None in its own words).
    ``fields`` replaces a field's ``(type, dataclasses.field(...))`` where the config holds
    something else than the stage (a nested chunker's config). ``module`` (default: the
    caller's) is the schema's module, so validation finds the schemas a module registers.
    ``target=False`` leaves out ``_target_``, for a group that code builds itself (``bm25``:
    recorded configs have none); a string is the ``_target_`` to write instead of ``cls``'s own
    path (the path configs have always named it by, part of every run's identity)."""
    path = target if isinstance(target, str) else f"{cls.__module__}.{cls.__qualname__}"
    spec: list[tuple[str, Any, dataclasses.Field]] = [
        ("_target_", str, dataclasses.field(default=path))] if target else []
    spec += [(k, type(v), dataclasses.field(default=v))
             for k, v in getattr(cls, HYDRA_KEYS, {}).items()]
    for f in settings(cls):
        if fields and f.name in fields:
            spec.append((f.name, *fields[f.name]))
            continue
        meta = {k: v for k, v in f.metadata.items() if k not in SCHEMA_ONLY}
        kind = config_type(field_type(cls, f))
        if "hint" in f.metadata:  # the config must give it, whatever the stage's default
            kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
            default = dataclasses.field(default=REQUIRED, metadata=meta)
        elif "interpolate" in f.metadata:
            default = dataclasses.field(default=f.metadata["interpolate"], metadata=meta)
        elif f.default_factory is not dataclasses.MISSING:
            default = dataclasses.field(default_factory=f.default_factory, metadata=meta)
        else:
            default = dataclasses.field(
                default=REQUIRED if f.default is dataclasses.MISSING else f.default,
                metadata=meta)
        spec.append((f.name, kind, default))
    out = dataclasses.make_dataclass(name, spec)
    out.__stage__ = cls  # what it was generated from (tests/unit/test_settings.py)
    out.__module__ = module or sys._getframe(1).f_globals["__name__"]
    out.__doc__ = f"The settings of ``{cls.__module__}.{cls.__qualname__}`` (generated)."
    return out
