"""One naming rule for runs, wherever runs are shown side by side: ``compare``'s table and its
paired tests, ``confirm``, ``gate``, the sweep's console lines and parent tags, its page,
``questions plan``.

A run of a named ablation is its ablation (tag ``ragexp.ablation``); runs that share one are
told apart by what follows it, the settings that differ between them. A run of overrides only
(ablation ``custom``, or none recorded) is named by the settings that tell it apart from the
runs shown beside it: of the config keys that differ between them (a run lacking a key differs
from one that has it: ``chunking.sentences`` of two sentence-chunking runs beside a markdown
one), those it measures (``tracking.measured``: no ``fusion.*`` on a run without hybrid parts,
no bookkeeping key such as ``experiment``), and of a group's keys other than its ``name`` only
those that differ between runs of the same option (the option's own values go with its name:
``reranker.name=none`` without ``reranker.top_n=0``); numbers print as written, integral ones
as integers (``fusion.k=10``, where MLflow recorded ``10.0``). So two runs share a label only
when the settings they measure are the same: such a label gets the id's first 8 appended, and
a run with no such setting is the first 8 characters of its id. Only keys every run had used
to count, so two sentence-chunking runs of 2 and 1 sentences beside a markdown one were both
``chunking.name=sentences`` with an id.
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


def _values(params: Mapping[str, Mapping[str, str]], key: str) -> list[str | None]:
    """``key``'s recorded value in each run, None where a run lacks it."""
    return [None if key not in p else str(p[key]) for p in params.values()]


def differing(params: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Config keys of any of the runs (``{run id: {key: recorded value}}``), outside
    ``BOOKKEEPING``, whose values differ between them, sorted: a run that lacks a key differs
    from one that has it (``chunking.sentences`` of two sentence-chunking runs beside a
    markdown one). A key ending in another such key's name with the same values in every run
    (a copy the config interpolates) is left out."""
    if len(params) < 2:
        return []
    every = set().union(*(set(p) for p in params.values())) - BOOKKEEPING
    values = {k: _values(params, k) for k in every}
    keys = [k for k in every if len(set(values[k])) > 1]
    # a key the config copies from another (``retriever.fusion.k``: ``${fusion.k}``) is that
    # key again: kept once, as the shorter
    return sorted(k for k in keys if not any(
        k.endswith(f".{other}") and values[other] == values[k] for other in keys))


def _settings(params: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """``{run id: [key, ...]}``: the differing keys (``differing``) that name each run by the
    module's rule (those it measures; of a group's keys other than its ``name``, those that
    differ between runs of the same option, a run lacking the key counting as a value)."""
    keys = differing(params)
    option = {r: {k: str(p.get(f"{k.split('.')[0]}.name")) for k in keys}
              for r, p in params.items()}
    seen: dict[str, set[tuple[str, str | None]]] = {}  # key -> {(option, value)}
    for r, p in params.items():
        for k in keys:
            seen.setdefault(k, set()).add((option[r][k], None if k not in p else str(p[k])))
    out = {}
    for r, p in params.items():
        kept, named = measured_keys(p), []
        for k in keys:
            name = f"{k.split('.')[0]}.name"
            if k not in kept:
                continue
            if k != name and name in keys and len(
                    {v for o, v in seen[k] if o == option[r][k]}) < 2:
                continue  # one value per option: its name says it
            named.append(k)
        out[r] = named
    return out


def _base(ablations: Mapping[str, str | None],
          params: Mapping[str, Mapping[str, str]]) -> tuple[dict[str, str], set[str]]:
    """Each run's label before ids tell equal ones apart, and the config keys the labels name.
    Runs of overrides are told apart from every run listed; runs that share a named ablation
    (a sweep of ``+ablation=a`` with overrides, an ablation file edited between runs) from each
    other, by the settings that differ between them after the name."""
    groups: dict[str | None, list[str]] = {}
    for r, a in ablations.items():
        groups.setdefault(a if isinstance(a, str) and a and a != CUSTOM else None, []).append(r)
    out: dict[str, str] = {}
    named: set[str] = set()
    for name, runs in groups.items():
        among = params if name is None else {r: params.get(r, {}) for r in runs}
        keys = _settings(among) if name is None or len(runs) > 1 else {}
        for r in runs:
            p = params.get(r, {})
            named.update(keys.get(r, []))
            parts = [f"{k}={shown(str(p[k]))}" for k in keys.get(r, [])]
            out[r] = " ".join([name, *parts]) if name is not None else " ".join(parts) or r[:8]
    return out, named


def labels(ablations: Mapping[str, str | None], params: Mapping[str, Mapping[str, str]],
           ids: bool = True) -> dict[str, str]:
    """``{run id: label}`` by the module's rule, for runs ``ablations`` (run id -> recorded
    ablation, None when none) with ``params`` (run id -> flat config keys as MLflow recorded
    them, no ``params.`` prefix). ``ids=False``: no id appended to a label two runs share, for
    a line that prints each run's id beside its label (the gate's). Pure."""
    out, _ = _base(ablations, params)
    if not ids:
        return out
    counts: dict[str, int] = {}
    for lab in out.values():
        counts[lab] = counts.get(lab, 0) + 1
    return {r: f"{lab} ({r[:8]})" if counts[lab] > 1 and lab != r[:8] else lab
            for r, lab in out.items()}


def columns(ablations: Mapping[str, str | None],
            params: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The config keys a table of these runs shows beside their labels (``compare``'s), sorted:
    those every run has whose values differ (``differing``), and those a label names. A key only
    some runs have belongs to one option of a group and the group's ``name`` already says it,
    unless it tells runs of that option apart (``chunking.sentences`` of two sentence-chunking
    runs) and so is in their labels."""
    _, named = _base(ablations, params)
    every = set.intersection(*(set(p) for p in params.values())) if params else set()
    return sorted({k for k in differing(params) if k in every} | named)


def of_runs(runs: Mapping[str, object], ids: bool = True) -> dict[str, str]:
    """``labels`` of MLflow runs shown together (``{run id: mlflow Run}``), from their
    ``ragexp.ablation`` tags and recorded params: the sweep's console lines, ``gate``,
    ``confirm``."""
    return labels({r: run.data.tags.get("ragexp.ablation") for r, run in runs.items()},
                  {r: dict(run.data.params) for r, run in runs.items()}, ids)


def beside_id(run_id: str, label: str) -> str:
    """A run's id, first 8 characters, with its label (``labels(..., ids=False)``) when the
    label says more than the id: ``9dd8f809 (bm25)``, ``0949c327 (chunking.sentences=1)``,
    ``1a2b3c4d`` (the gate's header printed ``(custom)`` of a run of overrides)."""
    return run_id[:8] + (f" ({label})" if label and label != run_id[:8] else "")
