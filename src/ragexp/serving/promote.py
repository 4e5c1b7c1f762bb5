"""Promote a run to the serving default: the champion as an MLflow model.

Each promotion logs the run's pyfunc serving model (``serving.model.log_model``: the run's
``config.yaml``, data fingerprint and index-rebuild information as artifacts, linked to the run),
registers it as a new version of the MLflow registered model ``ragexp-serving`` (source:
``models:/<model_id>``, run id: the promoted run) and moves the alias ``champion`` to it;
earlier versions stay. With a gate rule, the run must pass ``gate.decide`` against the
champion: no significant regression beyond the margin overall or for any kind (p adjusted over
the family), refusals within budget, and a significant gain of at least the rule's minimum
effect. A run that cannot rank a new question (``decide.replay``: ``retriever=trec_run``,
precomputed question vectors) is refused, as serving it would rank nothing.
"""

from __future__ import annotations

from dataclasses import replace

from ragexp.decide import gate, replay
from ragexp.errors import RagexpError
from ragexp.serving.engine import ServingError
from ragexp.tracking import store as tracking
from ragexp.tracking.store import ALIAS, MODEL_NAME

REQUIRED_METRICS = ("rr_at_10", "ndcg_at_10")


class PromotionRefused(RagexpError, RuntimeError):
    """A run that cannot be promoted (not FINISHED, no metrics or config to serve from, an
    unknown id): a refused input, exit code 2."""


class GateRefused(PromotionRefused):
    """The gate's verdict against the champion: a measured "no", exit code 1 as ``ragexp
    gate``'s FAIL, so a CI job tells it from a mistake in what it asked."""


def check_promotable(run_id: str):
    """The MLflow run ``run_id`` if it can be promoted. Raises ``tracking.SweepParentRun`` for
    a sweep's parent run (first, as every command refuses one), ``PromotionRefused`` for an
    unknown id, a run not FINISHED, without ``REQUIRED_METRICS``, one that cannot rank a new
    question (``replay.replays``: ``retriever=trec_run``, precomputed question vectors) or
    without ``config.yaml``."""
    c = tracking.client()
    try:
        run = c.get_run(run_id)
    except Exception:
        raise PromotionRefused(f"no run {run_id!r} in {tracking.tracking_uri()}") from None
    tracking.refuse_sweep_parent(run)
    if run.info.lifecycle_stage == "deleted":
        raise PromotionRefused(f"run {run_id} is deleted: restore it (mlflow runs restore "
                               f"--run-id {run_id}) or promote another run")
    status = run.info.status
    if status != "FINISHED":
        detail = run.data.tags.get("ragexp.error", "")
        raise PromotionRefused(f"run {run_id} is {status}, not FINISHED"
                               + (f" ({detail})" if detail else "")
                               + ": only completed runs can be promoted")
    missing = [m for m in REQUIRED_METRICS if m not in run.data.metrics]
    if missing:
        raise PromotionRefused(f"run {run_id} lacks metrics {', '.join(missing)}: it is not a "
                               f"ragexp evaluation run")
    why = replay.replays(run.data.params)
    if why:  # served, it ranks nothing: `ragexp search` said no passage shares a term
        raise PromotionRefused(f"run {run_id} cannot serve: {why}; {replay.INSTEAD}")
    artifacts = {f.path for f in c.list_artifacts(run_id)}
    if "config.yaml" not in artifacts:
        raise PromotionRefused(f"run {run_id} has no config.yaml artifact to serve from")
    return run


def promote(run_id: str, name: str = MODEL_NAME,
            rule: gate.Rule | None = None) -> tuple[str, str]:
    """Returns (version, message). With ``rule`` (its ``min_effect`` defaults to 0, any
    significant gain, unless it is ``non_inferior``), the run must pass the gate against the current champion, if any.
    Raises PromotionRefused with the reasons, GateRefused (one of them) with the gate's
    verdict for a refused gate."""
    run = check_promotable(run_id)
    c = tracking.client()
    champion = tracking.champion(name)
    same_run = champion is not None and champion.run_id == run_id
    if same_run and champion.source.startswith("models:/"):
        return champion.version, f"run {run_id} is already the {ALIAS} (version {champion.version})"
    if rule is not None and champion is not None and not same_run:
        if rule.min_effect is None and not rule.non_inferior:
            rule = replace(rule, min_effect=0.0)
        verdict = gate.evaluate(run_id, champion.run_id, rule, label=ALIAS)
        if not verdict.passed:
            raise GateRefused("gate refused: " + "; ".join(verdict.reasons)
                                   + "\n" + verdict.render(rule))
    # defer heavy import
    from ragexp.serving.model import log_model

    try:
        logged = log_model(run)
    except ServingError as exc:  # no fingerprint: nothing to check serving data against
        raise PromotionRefused(str(exc)) from None
    with tracking.store_lock():  # two promotions at once must not both create the model
        try:
            c.get_registered_model(name)
        except Exception:
            c.create_registered_model(name, description="ragexp serving configurations; alias "
                                                        f"'{ALIAS}' is the one served")
    version = c.create_model_version(
        name, source=f"models:/{logged.model_id}", run_id=run_id, model_id=logged.model_id,
        tags={"rr_at_10": f"{run.data.metrics['rr_at_10']:.4f}",
              "ablation": run.data.tags.get("ragexp.ablation", ""),
              **{k: v for k, v in logged.tags.items() if k in ("corpus_hash", "golden_hash")}},
        description=f"serving model of run {run_id}")
    c.set_registered_model_alias(name, ALIAS, version.version)
    previous = f" (was version {champion.version}, run {champion.run_id})" if champion else ""
    return version.version, f"{name} version {version.version} is now '{ALIAS}': run {run_id}" \
        f"{previous}"
