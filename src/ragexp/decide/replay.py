"""Which runs can rank a question they were not evaluated on: the one rule that keeps a run that
only replays rankings or vectors made elsewhere from being chosen as cheaper, promoted, or served.

A run replays when its ranking of a new question cannot be computed:

- ``retriever=trec_run`` (or a hybrid part reading a TREC run file, ``retriever.parts.<p>.
  retriever.path``): the file ranks the evaluation's question ids, nothing else;
- ``embedder=precomputed`` without ``embedder.queries`` (a named embedder for the questions),
  when a stage embeds the questions (a dense retriever, a hybrid part on the run's embedder, the
  dense abstain signal), or a hybrid part whose own ``embedder`` is ``precomputed``: the
  questions' vectors are rows of ``queries.npy``, looked up by the evaluation's questions.

Such a run is measured like any other, but its latency is a lookup, not retrieval (a sweep
named a TREC run "714.3x less" time than the best), and served it ranks nothing: ``ragexp
search`` said "none shares a term with it" of a word the corpus holds. Read from a run's flat
config (``replays``: its MLflow params; ``of_config``: its ``config.yaml``, flattened as MLflow
records params). Pure.
"""

from __future__ import annotations

from typing import Any, Mapping

from ragexp.tracking import store as tracking

PARTS = "retriever.parts."
INSTEAD = ("promote a run whose retriever ranks any question (retriever=dense, bm25 or hybrid; "
           "embedder=precomputed with embedder.queries=NAME), e.g. the same sweep's best such run")


def _set(value: Any) -> bool:
    """Whether a recorded config value is given (MLflow records a null as ``"None"``)."""
    return value is not None and str(value) not in ("", "None", "null", "nan")


def replays(params: Mapping[str, Any]) -> str | None:
    """Why a run of flat config ``params`` (``{"retriever.name": "trec_run", ...}``, as
    ``tracking.flatten`` writes it and MLflow records it) cannot rank a new question, or None
    when it can. The reason names the config keys, for a message to quote."""
    retriever = str(params.get("retriever.name", ""))
    if retriever == "trec_run":
        return (f"its retriever (retriever=trec_run, {params.get('retriever.path', '?')}) only "
                f"replays a precomputed ranking of the evaluation's question ids")
    parts = sorted({k[len(PARTS):].split(".")[0] for k in params if k.startswith(PARTS)})
    for part in parts:
        path = params.get(f"{PARTS}{part}.retriever.path")
        if _set(path) or str(params.get(f"{PARTS}{part}.retriever.name")) == "trec_run":
            return (f"its hybrid part {part} (retriever.parts.{part}.retriever.path={path}) only "
                    f"replays a precomputed ranking of the evaluation's question ids")
        if str(params.get(f"{PARTS}{part}.embedder")) == "precomputed":
            return (f"its hybrid part {part} embeds questions with embedder=precomputed, whose "
                    f"question vectors are rows of queries.npy for the evaluation's questions")
    if str(params.get("embedder.name")) != "precomputed" or _set(params.get("embedder.queries")):
        return None
    own = [p for p in parts if not _set(params.get(f"{PARTS}{p}.embedder"))]
    if (retriever == "dense" or (retriever == "hybrid" and own)
            or str(params.get("abstain.signal.name")) == "dense"):
        return (f"its embedder (embedder=precomputed, {params.get('embedder.path', '?')}, no "
                f"embedder.queries) only looks up the evaluation's questions in queries.npy: it "
                f"cannot embed a new question")
    return None


def of_config(config: Mapping[str, Any]) -> str | None:
    """``replays`` of a run's resolved config as a nested mapping (its ``config.yaml``)."""
    return replays(tracking.flatten(dict(config)))


def left_out_line(left_out: Mapping[str, str], label: Mapping[str, str]) -> str:
    """The line naming the runs a sweep left out of its cost comparison (``left_out``: ``{run
    id: why}``, ``replays``' reasons), each by its ``label`` (else its id's first 8)."""
    return ("left out of the cost comparison (they cannot serve a new question, and their "
            "latency is a lookup, not retrieval): "
            + "; ".join(f"{label.get(r, r[:8])}: {why}" for r, why in left_out.items()))
