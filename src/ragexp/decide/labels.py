"""One naming rule for runs, wherever runs are shown side by side: ``compare``'s table and its
paired tests, ``confirm``, the sweep's console lines and parent tags, its page, ``questions
plan``.

A run of a named ablation is its ablation (tag ``ragexp.ablation``). A run of overrides only
(ablation ``custom``, or none recorded) is named by the settings that tell it apart from the
runs shown beside it: of the config keys every one of them has and that differ between them,
those it measures (``tracking.measured``: no ``fusion.*`` on a run without hybrid parts, no
bookkeeping key such as ``experiment``), and of a group's keys other than its ``name`` only
those that differ between runs of the same option (the option's own values go with its name:
``reranker.name=none`` without ``reranker.top_n=0``); numbers print as written, integral ones
as integers (``fusion.k=10``, where MLflow recorded ``10.0``). A run with no such setting is
the first 8 characters of its id; a label two runs share gets the id's first 8 appended.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ragexp.tracking import store as tracking

CUSTOM = "custom"  # the ablation of a run of overrides only (config key ``ablation``'s default)
# config keys that say how a run was shown or compared, not what it is
BOOKKEEPING = frozenset({"progress", "force", "experiment", "cache_dir", "ablation", "verbose",
                         "objective", "baseline", "reuse_stages", "sweep_report"})
_INTEGRAL = re.compile(r"-?\d+\.0+")


def of_overrides(overrides: list[str]) -> str:
    """The console and MLflow run name of a run of overrides only, before other runs are known:
    its command-line overrides less the bookkeeping ones (``BOOKKEEPING``, ``hydra.*``), e.g.
    ``retriever=bm25 embedder=hash``; ``custom`` when none is left. Every job of a sweep of
    overrides was shown as ``[custom]``, and named at random by MLflow."""
    kept = [o for o in overrides
            if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] not in BOOKKEEPING | {"hydra"}]
    return " ".join(kept) or CUSTOM


def shown(value: str) -> str:
    """A recorded value as a label prints it: ``"10.0"`` -> ``"10"``; anything else unchanged."""
    return value.split(".")[0] if _INTEGRAL.fullmatch(value) else value


def _nested(params: Mapping[str, str]) -> dict:
    """Flat ``{"a.b": v}`` -> nested ``{"a": {"b": v}}`` (the shape ``tracking.measured`` reads)."""
    out: dict = {}
    for key, value in params.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):  # a key both a value and a group: keep the value
                break
        else:
            node[leaf] = value
    return out


def _flat_keys(tree: dict, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for k, v in tree.items():
        keys |= _flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
    return keys


def measured_keys(params: Mapping[str, str]) -> set[str]:
    """Of a run's flat config keys, those it measures (``tracking.measured``)."""
    return _flat_keys(tracking.measured(_nested(params)))


def differing(params: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Config keys every run has, outside ``BOOKKEEPING``, whose values differ between the runs
    (``{run id: {key: recorded value}}``), sorted; a key ending in another such key's name with
    the same values in every run (a copy the config interpolates) is left out."""
    runs = list(params.values())
    if len(runs) < 2:
        return []
    common = set.intersection(*(set(p) for p in runs)) - BOOKKEEPING
    keys = [k for k in common if len({str(p[k]) for p in runs}) > 1]
    values = {k: [str(p[k]) for p in runs] for k in keys}
    # a key the config copies from another (``retriever.fusion.k``: ``${fusion.k}``) is that
    # key again: kept once, as the shorter
    return sorted(k for k in keys if not any(
        k.endswith(f".{other}") and values[other] == values[k] for other in keys))


def labels(ablations: Mapping[str, str | None],
           params: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """``{run id: label}`` by the module's rule, for runs ``ablations`` (run id -> recorded
    ablation, None when none) with ``params`` (run id -> flat config keys as MLflow recorded
    them, no ``params.`` prefix). Pure."""
    keys = differing(params)
    by_option: dict[str, set[tuple[str, str]]] = {}  # group key -> {(option, value)} seen
    for p in params.values():
        for k in keys:
            group = k.split(".")[0]
            by_option.setdefault(k, set()).add((str(p.get(f"{group}.name")), str(p[k])))
    out = {}
    for run, ablation in ablations.items():
        if isinstance(ablation, str) and ablation and ablation != CUSTOM:
            out[run] = ablation
            continue
        p = params.get(run, {})
        kept = measured_keys(p)
        parts = []
        for k in keys:
            group = k.split(".")[0]
            if k not in kept:
                continue
            if k != f"{group}.name" and f"{group}.name" in keys:
                same = {v for option, v in by_option[k] if option == str(p.get(f"{group}.name"))}
                if len(same) < 2:  # one value per option: its name says it
                    continue
            parts.append(f"{k}={shown(str(p[k]))}")
        out[run] = " ".join(parts) or run[:8]
    counts: dict[str, int] = {}
    for lab in out.values():
        counts[lab] = counts.get(lab, 0) + 1
    return {r: f"{lab} ({r[:8]})" if counts[lab] > 1 and lab != r[:8] else lab
            for r, lab in out.items()}
