"""Module paths of ragexp before its packages by role, kept loadable.

Runs logged and champions registered before the move name the old flat paths: a run's
``config.yaml`` has ``_target_: ragexp.retrievers.DenseRetriever``, a registered model's
``model_code.py`` imports ``ragexp.servingmodel``. ``install`` puts a finder on ``sys.meta_path``
that answers each old path (``OLD_PATHS``) with the module that now holds its code, the same
module object, so classes and functions are identical under both names. ``upgrade`` rewrites a
recorded config's ``_target_`` values to today's paths before it is built, and a hybrid retriever
recorded before fusion became a group (``dense``, ``bm25``, ``rrf_k``, ``depth``) as today's
``parts`` and ``fusion=rrf`` (``hybrid_parts``), which rank the same.

Eight old modules share their name with a package of today (``ragexp.text``, ``index``,
``answer``, ``stages``, ``tracking``, ``report``, ``serving``, ``cli``): no recorded config or
model names a class in them, and their old paths now mean the packages.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_PATHS = {f"ragexp.{old}": f"ragexp.{new}" for old, new in {
    "tokens": "text.tokens", "sections": "text.sections",
    "readers": "data.readers", "beir": "data.beir", "trec": "data.trec", "golden": "data.golden",
    "relevance": "data.relevance", "units": "data.units", "split": "data.split",
    "datasets": "data.datasets", "examples": "data.shipped",
    "embedders": "index.embedders", "cache": "index.cache", "packstore": "index.packstore",
    "bm25": "index.bm25", "stagestore": "index.stagestore", "resources": "index.resources",
    "chunking": "stages.chunking", "retrievers": "stages.retrievers", "fusion": "stages.fusion",
    "external": "stages.external", "rerankers": "stages.rerankers", "abstain": "stages.abstain",
    "extractive": "answer.extractive", "llm": "answer.llm", "llm_answer": "answer.llm_answer",
    "judge": "answer.judge", "judge_metrics": "answer.judge_metrics",
    "agreement": "answer.agreement",
    "measures": "evaluation.measures", "metrics": "evaluation.metrics",
    "docrank": "data.docrank", "stats": "evaluation.stats",
    "significance": "evaluation.significance",
    "question_failures": "evaluation.question_failures",
    "outbox": "tracking.outbox", "lifecycle": "tracking.lifecycle",
    "failures": "tracking.failures", "provenance": "tracking.provenance",
    "compare": "decide.compare", "selection": "decide.selection", "gate": "decide.gate",
    "report_html": "report.html", "report_charts": "report.charts", "report_facts": "report.facts",
    "sweep_data": "report.sweep_data",
    "schema": "config.schema", "validation": "config.validation", "pipeline": "run.pipeline",
    # the config language, in run/ until it became the config package
    "run.schema": "config.schema", "run.validation": "config.validation",
    "run.build": "config.build", "run.compose": "config.compose",
    "app": "run.app", "sweep": "run.sweep", "confirm": "run.confirm",
    "servingmodel": "serving.model", "model_code": "serving.model_code", "api": "serving.api",
    "page": "serving.page", "access": "serving.access", "tracing": "serving.tracing",
    "mining": "serving.mining", "promote": "serving.promote",
    "traces_cli": "cli.traces", "housekeeping": "cli.runs", "mlflow_ui": "cli.ui",
    "starter": "cli.init", "decision_tables": "cli.decisions",
    # moved after the package layout shipped: hybrid parts (``stages``) count judged units
    "evaluation.docrank": "data.docrank",
}.items()}
# Recorded targets that moved to another class, not only another module: before ``answer``
# became a config group, the extractive answerer was logged as the ``Answerer`` protocol.
OLD_TARGETS = {"ragexp.answer.Answerer": "ragexp.answer.extractive.ExtractiveAnswerer"}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds an old module path and loads it as the module that holds its code today."""

    def __init__(self) -> None:
        self._own: dict[str, tuple] = {}  # today's name -> its own (spec, loader)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in OLD_PATHS:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        """The module of today itself (imported now), under the old name too."""
        module = importlib.import_module(OLD_PATHS[spec.name])
        self._own[module.__name__] = (module.__spec__, module.__loader__)
        return module

    def exec_module(self, module) -> None:
        """Nothing to run: the module ran when ``create_module`` imported it. The import system
        has given it the old path's spec; its own is put back, so it reloads as itself."""
        module.__spec__, module.__loader__ = self._own[module.__name__]

    def get_source(self, fullname):
        """The source of today's module (``python -m`` of an old path runs it)."""
        spec = importlib.util.find_spec(OLD_PATHS[fullname])
        return spec.loader.get_source(spec.name)


def install() -> None:
    """Answer old module paths from now on (once per process; called by ``import ragexp``)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())


def target(path: str) -> str:
    """Today's dotted path of a recorded ``_target_`` (``ragexp.retrievers.DenseRetriever`` ->
    ``ragexp.stages.retrievers.DenseRetriever``); any other path is returned unchanged."""
    if path in OLD_TARGETS:
        return OLD_TARGETS[path]
    module, _, name = path.rpartition(".")
    return f"{OLD_PATHS[module]}.{name}" if module in OLD_PATHS else path


HYBRID = "ragexp.stages.retrievers.HybridRetriever"
PART_RETRIEVERS = {"dense": "ragexp.stages.retrievers.DenseRetriever",
                   "bm25": "ragexp.stages.retrievers.BM25Retriever"}


def hybrid_parts(retriever: dict) -> dict:
    """Today's form of a hybrid retriever config recorded with the switches of old (``{dense:
    bool, bm25: bool, rrf_k, depth}``, every part cut to the one ``depth`` and fused by RRF at
    ``rrf_k``): ``parts`` (a part switched off is ``None``) and ``fusion`` (``rrf`` at ``k =
    rrf_k``). Any other retriever config is returned unchanged."""
    old = ("dense", "bm25", "rrf_k", "depth")
    if retriever.get("_target_") != HYBRID or "parts" in retriever:
        return retriever
    depth = retriever.get("depth", 100)
    parts = {name: {"_target_": "ragexp.stages.retrievers.Part", "depth": depth,
                    "retriever": {"_target_": path, "_partial_": True}}
             if retriever.get(name, True) else None for name, path in PART_RETRIEVERS.items()}
    fusion = {"_target_": "ragexp.stages.fusion.rank.RRF", "name": "rrf",
              "k": retriever.get("rrf_k", 60.0)}
    kept = {key: v for key, v in retriever.items() if key not in old}
    return {**kept, "parts": parts, "fusion": fusion}


ENDPOINT = "ragexp.answer.llm.Endpoint"
# The stages that call an endpoint, and the keys of it they were recorded with as their own
# (``answer.model``) before it was one ``llm`` node (``answer.llm.model``).
ENDPOINT_USERS = ("ragexp.answer.llm_answer.LLMAnswerer", "ragexp.answer.judge.LLMJudge",
                  "ragexp.generate.llm_questions.LLMGenerator")
ENDPOINT_KEYS = ("base_url", "model", "api_key_env", "timeout", "max_retries", "concurrency",
                 "temperature", "price_in_per_mtok", "price_out_per_mtok", "max_error_rate")


def endpoint_node(stage: dict) -> dict:
    """Today's form of a stage config recorded with its endpoint's keys as its own
    (``{_target_: ...LLMAnswerer, model: m, ..., n_chunks: 3}``): those keys in one ``llm``
    node that builds an ``Endpoint`` (``{..., llm: {_target_: ...Endpoint, model: m, ...}}``).
    Any other config is returned unchanged (``tracking.store.as_recorded`` is the inverse)."""
    if stage.get("_target_") not in ENDPOINT_USERS or "llm" in stage:
        return stage
    llm = {"_target_": ENDPOINT, **{k: stage[k] for k in ENDPOINT_KEYS if k in stage}}
    kept = {k: v for k, v in stage.items() if k not in ENDPOINT_KEYS}
    return {**kept, "llm": llm}


def upgrade(cfg):
    """A copy of a recorded config (an OmegaConf ``DictConfig``) whose every ``_target_`` names
    today's path (``target``), whose hybrid retriever, if recorded with the switches of old,
    has today's parts and fusion (``hybrid_parts``; the top-level ``fusion`` is set to the same
    when the config has none), and whose ``answer``, ``judge`` and ``generator``, if recorded
    with their endpoint's keys as their own, hold them in one ``llm`` node (``endpoint_node``);
    the config itself is not changed."""
    # defer heavy import
    from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

    out = cfg.copy()

    def walk(node) -> None:
        if isinstance(node, DictConfig):
            for key in node.keys():
                if key == "_target_" and isinstance(node.get(key), str):
                    node[key] = target(node[key])
                elif OmegaConf.is_config(node._get_node(key)):
                    walk(node[key])
        elif isinstance(node, ListConfig):
            for item in node:
                walk(item)

    with_flag = OmegaConf.is_readonly(out)
    OmegaConf.set_readonly(out, False)
    walk(out)
    retriever = out.get("retriever")
    if isinstance(retriever, DictConfig) and "parts" not in retriever:
        new = hybrid_parts(OmegaConf.to_container(retriever))
        if "parts" in new:
            with open_dict(out):
                out.retriever = new
                if out.get("fusion") is None:
                    out.fusion = new["fusion"]
    for stage in ("answer", "judge", "generator"):
        node = out.get(stage)
        if isinstance(node, DictConfig) and "llm" not in node:
            new = endpoint_node(OmegaConf.to_container(node))
            if "llm" in new:
                with open_dict(out):
                    out[stage] = new
    OmegaConf.set_readonly(out, with_flag)
    return out
