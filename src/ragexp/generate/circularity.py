"""Circular question sets: generated questions scored by a system that holds the model that
wrote them.

A model tends to find its own writing easy: it answers questions in the words it chose, a judge
grades answers by the phrasing it would have written, an embedding model places its own
paraphrase near the passage it paraphrased. So a run whose answerer, judge or embedder is the
model that wrote its generated questions measures that model on its own work, and a comparison
with another model is not even. Nothing is refused: the warning names both sides, and the
remedy (questions from another model, or another model in the run).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from ragexp.errors import counted
from ragexp.records import Query

# the keys of a run's config that name a model of the system under test (answer=llm, judge=llm;
# the embedder of a dense or hybrid run)
SYSTEM_KEYS = ("answer.llm.model", "judge.llm.model", "embedder.model")


def _select(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not hasattr(node, "get"):
            return None
        node = node.get(part)
    return node


def system_models(cfg: Mapping[str, Any]) -> dict[str, str]:
    """``{key: model}`` for each of ``SYSTEM_KEYS`` that the run's resolved config ``cfg`` (a
    nested mapping) holds as a non-empty string: ``answer.llm.model`` only with ``answer=llm``,
    ``judge.llm.model`` only with ``judge=llm``, ``embedder.model`` with a model-backed
    embedder (``fastembed``: ``minilm-int8``)."""
    found = {key: _select(cfg, key) for key in SYSTEM_KEYS}
    return {key: model for key, model in found.items() if isinstance(model, str) and model}


def writers(queries: Iterable[Query]) -> Counter:
    """Generated questions per model that wrote them (``Query.model``; those without one, hand
    written or offline, are not counted)."""
    return Counter(q.model for q in queries if q.model)


def warnings(written: Mapping[str, int], system: Mapping[str, str]) -> list[str]:
    """One line per pair of a model that wrote ``written[model]`` of the scored questions and a
    key of ``system`` (``system_models``) naming the same model, in key order; ``[]`` when no
    writer is in the system."""
    return [f"{counted(written[model], 'scored question')} were written by {model}, which is "
            f"also {key}={model} in this run: the run scores the model on questions it wrote "
            f"(circular: a model answers, judges and embeds its own wording best); score "
            f"questions another model wrote, or set {key} to another model"
            for key, model in system.items() if model in written]


def generator_warning(generator_model: str | None, shared_model: str) -> str | None:
    """The line ``questions generate`` says when its generator writes with ``shared_model``
    (the config's ``llm.model``), the model a run's ``answer=llm`` and ``judge=llm`` call
    unless ``answer.llm.model`` / ``judge.llm.model`` name another; None for a generator
    without a model (``known_item``) or with another one."""
    if generator_model is None or generator_model != shared_model:
        return None
    return (f"the questions are written by {generator_model}, which is llm.model, the model "
            f"answer=llm and judge=llm call unless answer.llm.model or judge.llm.model name "
            f"another: a run answering or judging with {generator_model} would score it on "
            f"questions it wrote (circular); write with another model "
            f"(generator.llm.model=...), or answer and judge with another")
