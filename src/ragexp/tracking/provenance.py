"""What a run was measured on and with, in the forms other tools read.

- ``stage_tags``: for every stage group, the class that ran (``_target_``), the module it came
  from and that module's version, so a user's own stage (``_target_: mypkg.MyRetriever`` in their
  config directory) is as traceable on a run as a built-in one.
- ``dataset_input``: the evaluation data as an MLflow dataset input (the runs list's Dataset
  column), with the data fingerprint as its digest and the question count and kinds as profile.
- ``trec_files``: ``run.trec`` and ``qrels.trec`` at the run's scoring unit, for trec_eval,
  ir_measures, ranx and PyTerrier.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import logging
from collections import Counter
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from ragexp.data import trec
from ragexp.records import Qrels, Query, Ranking

log = logging.getLogger(__name__)
STAGE_GROUPS = ("dataset", "chunking", "embedder", "index", "retriever", "reranker",
                "abstain.signal", "answer", "judge")


def _node(cfg: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(cfg, Mapping) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


@lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    """``importlib.metadata.packages_distributions()`` (top-level module -> the distributions
    that provide it, in its order and by its rule: ``top_level.txt``, else the first part of
    each recorded file), read once per process. It reads only ``top_level.txt`` and the
    ``RECORD`` text, where ``packages_distributions`` also checks every recorded file on disk
    (0.83 s against 0.1 s in this environment)."""
    out: dict[str, list[str]] = {}
    for dist in metadata.distributions():
        for top in (dist.read_text("top_level.txt") or "").split() or _inferred(dist):
            out.setdefault(top, []).append(dist.metadata["Name"])
    return out


def _inferred(dist) -> set[str]:
    """Top-level importable names of a distribution without ``top_level.txt``: the first part of
    each path in ``RECORD`` (a module file's own name), those without a dot, as
    ``importlib.metadata`` infers them (it also drops files missing on disk: a stale
    ``__pycache__`` entry may add that name, which no stage's module has)."""
    record = dist.read_text("RECORD")
    paths = ([line.rsplit(",", 2)[0] for line in record.splitlines() if line]
             if record is not None else [str(p) for p in dist.files or ()])
    out = set()
    for path in paths:
        parts = path.strip('"').split("/")
        name = parts[0] if len(parts) > 1 else (inspect.getmodulename(parts[0]) or parts[0])
        if "." not in name:
            out.add(name)
    return out


def module_version(module_name: str) -> str:
    """Version of the distribution that provides ``module_name`` (``pkg==1.2``); for a module
    that no installed distribution owns (a file in the user's repository), ``file:<sha256[:12]>``
    of its source, so an edited stage still shows as a different one."""
    top = module_name.split(".")[0]
    if top == __name__.split(".")[0]:  # ragexp's own stages: its distribution, no scan (0.1 s)
        try:
            return f"{top}=={metadata.version(top)}"
        except metadata.PackageNotFoundError:  # run from a source tree: as any unowned file
            pass
    for dist in _distributions().get(top, []):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    try:
        mod = importlib.import_module(module_name)
    except Exception:  # the stage's own construction reports this properly
        return "unknown (module not importable)"
    path = getattr(mod, "__file__", None)
    if path and Path(path).is_file():
        return "file:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    return "unknown"


def stage_tags(resolved: Mapping[str, Any]) -> dict[str, str]:
    """``{"stage.retriever.target": "pkg.mod.Class", "stage.retriever.version": "pkg==1.0", ...}``
    for every stage group whose config names a ``_target_``."""
    tags: dict[str, str] = {}
    for group in STAGE_GROUPS:
        target = _node(resolved, f"{group}._target_")
        if not isinstance(target, str):
            continue
        module = target.rsplit(".", 1)[0]
        tags[f"stage.{group}.target"] = target
        tags[f"stage.{group}.version"] = module_version(module)
    return tags


def dataset_input(name: str, fingerprint: Mapping[str, str], queries: list[Query],
                  source: str):
    """An MLflow ``DatasetInput`` for the run's evaluation data: digest = the data fingerprint
    (corpus + questions hashes), profile = question count and count per kind."""
    # defer heavy import
    from mlflow.entities import Dataset, DatasetInput, InputTag

    digest = hashlib.sha256(json.dumps(dict(fingerprint), sort_keys=True).encode()).hexdigest()
    profile = {"num_questions": len(queries),
               "kinds": dict(Counter(q.kind for q in queries)), **dict(fingerprint)}
    ds = Dataset(name=name, digest=digest[:16], source_type="local", source=source,
                 profile=json.dumps(profile))
    return DatasetInput(ds, tags=[InputTag("mlflow.data.context", "evaluation")])


def trec_files(out_dir: Path, ranking: Ranking, qrels: Qrels, tag: str) -> list[Path]:
    """Write ``run.trec`` and ``qrels.trec`` into ``out_dir``; ids holding whitespace cannot be
    written in TREC format, so then both are skipped with a warning (the run itself stands).
    ``ranking`` is the run's at its scoring unit: at section or document level its scores are
    rank-derived (``docrank.collapse_to_documents``), not the retrieval scores."""
    try:
        return [trec.write_run(ranking, out_dir / "run.trec", tag=tag),
                trec.write_qrels(qrels, out_dir / "qrels.trec")]
    except ValueError as exc:
        log.warning("run.trec/qrels.trec not written: %s", exc)
        for name in ("run.trec", "qrels.trec"):
            (out_dir / name).unlink(missing_ok=True)
        return []
