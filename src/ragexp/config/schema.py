"""Typed config schemas, registered in Hydra's ConfigStore.

Every option file in ``conf/<group>/`` starts from one of these (``defaults: [<name>_schema]``),
so a misspelt key or a wrong type fails at composition, before a sweep starts, not halfway
through it. A stage's schema is generated from the stage's own dataclass (``settings.schema``):
its fields, defaults and what each accepts, declared once beside the code that reads them, and
checked for every composed config by ``ragexp.config.validation``: a range (``metadata={"ge":
1}``, keys ``ge``, ``gt``, ``le``, ``lt``), a set of names (``choices``), an input that must
exist (``path``: ``dir``, ``file`` or ``any``), and for a value the user must give what to give
(``hint``). ``_target_`` names the class Hydra instantiates for that option. The schemas
written here are those with no stage class of their own (the top-level ``Config``, the abstain
group), the generator's with its ``llm`` endpoint node (``generator=llm``; the node's schema,
``LLMCallConf``, is generated from ``Endpoint``, and given to ``answer=llm``'s and ``judge=llm``'s
generated schemas too) and those whose stage takes the run's resources (the retrievers).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from ragexp import settings
from ragexp.answer.extractive import ExtractiveAnswerer
from ragexp.answer.judge import LLMJudge, NoJudge
from ragexp.answer.llm import MAX_TOKENS, Endpoint
from ragexp.answer.llm_answer import LLMAnswerer
from ragexp.data import shipped
from ragexp.data.datasets import BeirDataset, MarkdownDataset
from ragexp.data.split import AUTO, SPLITS
from ragexp.data.units import UNITS
from ragexp.evaluation.measures import DEFAULT_NAMES
from ragexp.generate.known_item import KnownItemGenerator
from ragexp.generate.llm_questions import LLMGenerator
from ragexp.generate.structure import StructureGenerator
from ragexp.index import ann
from ragexp.index.bm25 import BM25Params
from ragexp.index.embedders import FastEmbedEmbedder, HashEmbedder
from ragexp.index.precomputed import PrecomputedEmbedder
from ragexp.stages import abstain, retrievers
from ragexp.stages.abstain import DenseSignal, LexicalSignal
from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker
from ragexp.stages.fusion.rank import RRF, WeightedRRF
from ragexp.stages.fusion.score import CombMNZ, CombSUM, Convex
from ragexp.stages.parent_child import ParentChildChunker
from ragexp.stages.rerankers import CrossEncoderReranker, LexicalReranker, NoReranker
from ragexp.stages.semantic_chunking import SemanticChunker
from ragexp.stages.sentence_chunking import SentenceChunker


MarkdownDatasetConf = settings.schema(MarkdownDataset, "MarkdownDatasetConf")
BeirDatasetConf = settings.schema(BeirDataset, "BeirDatasetConf")

MarkdownChunkingConf = settings.schema(MarkdownChunker, "MarkdownChunkingConf")
SentenceChunkingConf = settings.schema(SentenceChunker, "SentenceChunkingConf")
SemanticChunkingConf = settings.schema(SemanticChunker, "SemanticChunkingConf", fields={
    "embedder": (Any, field(default="${embedder}"))})  # the run's embedder config, whatever type
ParentChildChunkingConf = settings.schema(ParentChildChunker, "ParentChildChunkingConf", fields={
    "children": (MarkdownChunkingConf, field(default_factory=lambda: MarkdownChunkingConf(
        **settings.values(ParentChildChunker().children))))})
WholeDocChunkingConf = settings.schema(WholeDocumentChunker, "WholeDocChunkingConf")


HashEmbedderConf = settings.schema(HashEmbedder, "HashEmbedderConf")
FastEmbedConf = settings.schema(FastEmbedEmbedder, "FastEmbedConf")
PrecomputedEmbedderConf = settings.schema(PrecomputedEmbedder, "PrecomputedEmbedderConf")


def index_schema(spec: type) -> type:
    """The schema of the ``index`` option ``spec`` (a class of ``index.ann``, found by
    ``ann.options()``): generated from its fields (``settings.schema``), its ``_target_`` the path
    configs name it by (``ragexp.index.ann.<class>``, part of every run's identity), named
    ``<class without Spec>IndexConf`` and bound in this module (a sweep's jobs unpickle it by
    that name), so a new index option needs no line here."""
    name = f"{spec.__name__.removesuffix('Spec')}IndexConf"
    out = settings.schema(spec, name, target=f"{ann.__name__}.{spec.__name__}")
    globals()[name] = out
    return out


@dataclass
class DenseRetrieverConf:
    _target_: str = "ragexp.stages.retrievers.DenseRetriever"
    name: str = "dense"


@dataclass
class BM25RetrieverConf:
    _target_: str = "ragexp.stages.retrievers.BM25Retriever"
    name: str = "bm25"


@dataclass
class HybridPartConf:
    """One part of ``retriever=hybrid`` (``retriever.parts.<name>``): any retriever config with
    ``_partial_: true`` (it is built on the run's resources), the depth it feeds fusion and,
    for a dense part, an ``embedder`` option of its own. ``retriever.parts`` holds plain
    mappings (OmegaConf refuses a command-line mapping, ``+retriever.parts.x={...}``, for a
    typed entry); ``validation.parts_are_typed`` checks each against this schema."""

    _target_: str = "ragexp.stages.retrievers.Part"
    retriever: Any = MISSING
    # items per query that go into fusion; at least the deepest measure cutoff (validation)
    depth: int = field(default=100, metadata=retrievers.DEPTH)
    # an embedder option (conf/embedder: hash, minilm, bge, ...) for this part's vectors; null:
    # the run's embedder. Left out of a part's config, it is not part of the run's identity.
    embedder: Optional[str] = None


@dataclass
class HybridRetrieverConf:
    _target_: str = "ragexp.stages.retrievers.HybridRetriever"
    name: str = "hybrid"
    # {name: part (HybridPartConf)}; a part set to null is off (conf/retriever/hybrid.yaml)
    parts: Dict[str, Any] = field(default_factory=dict)
    fusion: Any = "${fusion}"  # the fusion group


RRFConf = settings.schema(RRF, "RRFConf")
WeightedRRFConf = settings.schema(WeightedRRF, "WeightedRRFConf")
CombSUMConf = settings.schema(CombSUM, "CombSUMConf")
CombMNZConf = settings.schema(CombMNZ, "CombMNZConf")
ConvexConf = settings.schema(Convex, "ConvexConf")


@dataclass
class TrecRunRetrieverConf:
    _target_: str = "ragexp.stages.external.TrecRunRetriever"
    name: str = "trec_run"
    path: str = field(default=MISSING, metadata={
        "path": "file", "hint": "a TREC run file (6 columns) written by another system"})
    # its item ids are ids of the scoring unit
    unit: str = field(default="${dataset.unit}", metadata={"choices": UNITS})


NoRerankerConf = settings.schema(NoReranker, "NoRerankerConf")
LexicalRerankerConf = settings.schema(LexicalReranker, "LexicalRerankerConf")
CrossEncoderRerankerConf = settings.schema(CrossEncoderReranker, "CrossEncoderRerankerConf")
LexicalSignalConf = settings.schema(LexicalSignal, "LexicalSignalConf")
DenseSignalConf = settings.schema(DenseSignal, "DenseSignalConf")


@dataclass
class LexicalAbstainConf:
    signal: LexicalSignalConf = field(default_factory=LexicalSignalConf)
    # share of answerable questions we accept to refuse wrongly
    budget: float = field(default=0.125, metadata=abstain.BUDGET)
    folds: int = field(default=5, metadata=abstain.FOLDS)


@dataclass
class DenseAbstainConf:
    signal: DenseSignalConf = field(default_factory=DenseSignalConf)
    budget: float = field(default=0.125, metadata=abstain.BUDGET)
    folds: int = field(default=5, metadata=abstain.FOLDS)


# The ``bm25`` group: the fields of ``index.bm25.BM25Params``, which ``build.bm25_params`` makes
# of it (no ``_target_``: recorded configs stay as they were).
BM25Conf = settings.schema(BM25Params, "BM25Conf", target=False)


ExtractiveAnswerConf = settings.schema(ExtractiveAnswerer, "ExtractiveAnswerConf")


# The ``llm`` node: the fields of ``answer.llm.Endpoint``, the one endpoint each stage's ``llm``
# defaults to (no ``_target_``: only the stages' nodes are built, and every recorded config's
# ``llm`` stays as it was).
LLMEndpointConf = settings.schema(Endpoint, "LLMEndpointConf", target=False)
# A stage's ``llm`` (``answer.llm``, ``judge.llm``, ``generator.llm``): an ``Endpoint`` whose
# every key interpolates the shared ``llm.*``, so ``answer.llm.model=gpt-4o`` overrides one key
# for one stage and the rest follow ``llm``.
LLMCallConf = settings.schema(Endpoint, "LLMCallConf", fields={
    f.name: (settings.config_type(settings.field_type(Endpoint, f)),
             field(default=f"${{llm.{f.name}}}", metadata=dict(f.metadata)))
    for f in settings.settings(Endpoint)})


# ``answer=llm`` and ``judge=llm``: the stage's own settings and its ``llm`` endpoint node (each
# key ``${llm.<key>}`` unless this stage overrides it: ``answer.llm.model=...``).
LLMAnswerConf = settings.schema(LLMAnswerer, "LLMAnswerConf", fields={
    "llm": (LLMCallConf, field(default_factory=LLMCallConf))})


NoJudgeConf = settings.schema(NoJudge, "NoJudgeConf")


LLMJudgeConf = settings.schema(LLMJudge, "LLMJudgeConf", fields={
    "llm": (LLMCallConf, field(default_factory=LLMCallConf))})


@dataclass
class TracesConf:
    """MLflow Tracing of ``ragexp serve`` (``tracing.py``); not part of a run's identity."""

    enabled: bool = True
    experiment: str = "ragexp-serving"


@dataclass
class Config:
    """The whole config of one run (``conf/config.yaml``): one option per group, the shared
    ``llm`` endpoint, and the run's own settings below them."""

    dataset: Any = MISSING
    chunking: Any = MISSING
    embedder: Any = MISSING
    index: Any = MISSING
    retriever: Any = MISSING
    fusion: Any = MISSING  # used by retriever=hybrid
    reranker: Any = MISSING
    abstain: Any = MISSING
    bm25: BM25Conf = field(default_factory=BM25Conf)
    answer: Any = MISSING
    judge: Any = MISSING
    llm: LLMEndpointConf = field(default_factory=LLMEndpointConf)
    traces: TracesConf = field(default_factory=TracesConf)  # serving only
    experiment: str = "ragexp-${dataset.name}"
    ablation: str = "custom"
    # ranking depth; at least the deepest cutoff in measures (validation's cross-field rule)
    k: int = field(default=100, metadata={"ge": 1})
    measures: list[str] = field(default_factory=lambda: list(DEFAULT_NAMES))  # ir_measures names
    force: bool = False
    progress: bool = True
    cache_dir: str = ".cache/ragexp"
    verbose: bool = False  # a failed job's traceback on the console too (always in error.txt)
    # questions scored: auto (a dataset's own split whole, else dev), dev (selection),
    # test (confirmation) or all (data.split.effective)
    split: str = field(default="auto", metadata={"choices": (AUTO, *SPLITS)})
    split_seed: int = 0
    split_test_share: float = field(default=0.5, metadata={"ge": 0, "le": 1})
    # what the entry point returns to a sweeper (Optuna); one of measures (validation's rule)
    objective: str = "nDCG@10"
    # which questions decide (objective, sweep choice, gate) when they come from several
    # sources: hand (the hand-written ones), all, or a source name (decide/sources.py)
    objective_source: str = "hand"
    baseline: str = "default"  # ablation of a sweep's job that every other job is tested against
    reuse_stages: bool = True  # chunks/tokens/BM25/vectors from earlier jobs (stagestore.py)
    sweep_report: bool = True  # report.html on the sweep's parent run (12 runs: 0.25 s, make bench)
    # questions timed one by one for time.query_p50_ms/p95_ms (0: none; pipeline.LATENCY_SAMPLE)
    latency_sample: int = field(default=100, metadata={"ge": 0})


KnownItemGeneratorConf = settings.schema(KnownItemGenerator, "KnownItemGeneratorConf")
StructureGeneratorConf = settings.schema(StructureGenerator, "StructureGeneratorConf")


# ``generator=llm``: the fields of ``generate.llm_questions.LLMGenerator``, its ``llm`` keys
# defaulting to ``llm.*`` as ``answer.llm``'s do.
LLMGeneratorConf = settings.schema(LLMGenerator, "LLMGeneratorConf", fields={
    "llm": (LLMCallConf, field(default_factory=LLMCallConf))})


@dataclass
class QuestionsConfig:
    """``conf/questions.yaml``, the config of ``ragexp questions generate``: the dataset whose
    documents are read, the generator, and the filters' question length in words."""

    dataset: Any = MISSING
    generator: Any = MISSING
    llm: LLMEndpointConf = field(default_factory=LLMEndpointConf)
    min_words: int = field(default=2, metadata={"ge": 1})  # shorter questions are dropped
    max_words: int = field(default=40, metadata={"ge": 1})  # longer ones too
    draws: int = field(default=3, metadata={"ge": 1})  # passes over the passages at most
    batch: int = field(default=16, metadata={"ge": 1})  # jobs per batch (llm: calls in parallel)
    source: str = "generated"  # each question's source: a name per generator certifies each set
    progress: bool = True


GENERATORS = {"known_item": KnownItemGeneratorConf, "structure": StructureGeneratorConf,
              "llm": LLMGeneratorConf}


SCHEMAS = {
    "dataset": {"markdown": MarkdownDatasetConf, "beir": BeirDatasetConf},
    "chunking": {"markdown": MarkdownChunkingConf, "none": WholeDocChunkingConf,
                 "sentences": SentenceChunkingConf, "semantic": SemanticChunkingConf,
                 "parent_child": ParentChildChunkingConf},
    "embedder": {"hash": HashEmbedderConf, "fastembed": FastEmbedConf,
                 "precomputed": PrecomputedEmbedderConf},
    "index": {name: index_schema(spec) for name, spec in ann.options().items()},
    "retriever": {"dense": DenseRetrieverConf, "bm25": BM25RetrieverConf,
                  "hybrid": HybridRetrieverConf, "trec_run": TrecRunRetrieverConf},
    "fusion": {"rrf": RRFConf, "weighted_rrf": WeightedRRFConf, "combsum": CombSUMConf,
               "combmnz": CombMNZConf, "convex": ConvexConf},
    "reranker": {"none": NoRerankerConf, "lexical": LexicalRerankerConf,
                 "cross_encoder": CrossEncoderRerankerConf},
    "abstain": {"lexical": LexicalAbstainConf, "dense": DenseAbstainConf},
    "answer": {"extractive": ExtractiveAnswerConf, "llm": LLMAnswerConf},
    "judge": {"none": NoJudgeConf, "llm": LLMJudgeConf},
}


def folder_name(path: str) -> str:
    """A folder's name as one experiment per folder: its base name (characters outside
    ``[A-Za-z0-9_.-]`` become ``_``), ``-``, and the first 6 hex digits of the SHA-1 of its
    resolved absolute path, so two folders that share a base name (five ``beir_format`` folders)
    get distinct names. ``/data/scifact/beir_format`` -> ``beir_format-`` + 6 hex digits."""
    resolved = Path(str(path)).expanduser().resolve()
    tag = hashlib.sha1(str(resolved).encode()).hexdigest()[:6]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', resolved.name)}-{tag}"


def register() -> None:
    """Store every schema in Hydra's ConfigStore and register ragexp's config resolvers
    (``${ragexp.example:handbook/corpus}``: absolute path of shipped example data;
    ``${ragexp.folder_name:DIR}``: ``folder_name``)."""
    OmegaConf.register_new_resolver("ragexp.example", shipped.path, replace=True)
    OmegaConf.register_new_resolver("ragexp.folder_name", folder_name, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(name="questions_config", node=QuestionsConfig)
    for name, node in GENERATORS.items():
        cs.store(group="generator", name=f"{name}_schema", node=node)
    for group, options in SCHEMAS.items():
        for name, node in options.items():
            cs.store(group=group, name=f"{name}_schema", node=node)
