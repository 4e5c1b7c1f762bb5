"""Promote a run's resolved configuration to the serving default.

Each promotion registers a new version of the MLflow registered model ``ragexp-serving``
(source: the run's artifacts, which hold ``config.yaml``) and moves the alias ``champion`` to
it; earlier versions stay. With ``gate=True`` a run must match the champion's RR@10 or beat it,
on the same data, with no per-kind RR@10 regression at p < 0.05 (paired test, ``compare.py``).
"""

from __future__ import annotations

from ragexp import tracking
from ragexp.compare import against_baseline
from ragexp.tracking import ALIAS, MODEL_NAME

REQUIRED_METRICS = ("rr_at_10", "ndcg_at_10")


class PromotionRefused(RuntimeError):
    pass


def check_promotable(run_id: str):
    c = tracking.client()
    try:
        run = c.get_run(run_id)
    except Exception:
        raise PromotionRefused(f"no run {run_id!r} in {tracking.tracking_uri()}") from None
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
    artifacts = {f.path for f in c.list_artifacts(run_id)}
    if "config.yaml" not in artifacts:
        raise PromotionRefused(f"run {run_id} has no config.yaml artifact to serve from")
    return run


def current_champion(name: str = MODEL_NAME):
    c = tracking.client()
    try:
        return c.get_model_version_by_alias(name, ALIAS)
    except Exception:
        return None


def gate_check(run, champion_run) -> list[str]:
    """Reasons to refuse; empty when the run may replace the champion."""
    reasons = []
    same = [run.data.tags.get(k) == champion_run.data.tags.get(k)
            for k in ("corpus_hash", "golden_hash")]
    if not all(same):
        return [f"run and champion {champion_run.info.run_id[:8]} were evaluated on different "
                f"data; the gate cannot compare them"]
    rr, champ = run.data.metrics["rr_at_10"], champion_run.data.metrics["rr_at_10"]
    if rr < champ:
        reasons.append(f"RR@10 {rr:.3f} is below the champion's {champ:.3f}")
    _, worse = against_baseline(run.info.run_id, champion_run.info.run_id)
    significant = [w for w in worse if "*" in w.split(" ")[0]]
    if significant:
        reasons.append("significant per-kind RR@10 regression: " + ", ".join(significant))
    return reasons


def promote(run_id: str, name: str = MODEL_NAME, gate: bool = False) -> tuple[str, str]:
    """Returns (version, message). Raises PromotionRefused with the reasons."""
    run = check_promotable(run_id)
    c = tracking.client()
    champion = current_champion(name)
    if champion is not None and champion.run_id == run_id:
        return champion.version, f"run {run_id} is already the {ALIAS} (version {champion.version})"
    if gate and champion is not None:
        reasons = gate_check(run, c.get_run(champion.run_id))
        if reasons:
            raise PromotionRefused("gate refused: " + "; ".join(reasons))
    try:
        c.get_registered_model(name)
    except Exception:
        c.create_registered_model(name, description="ragexp serving configurations; alias "
                                                    f"'{ALIAS}' is the one served")
    version = c.create_model_version(
        name, source=run.info.artifact_uri, run_id=run_id,
        tags={"rr_at_10": f"{run.data.metrics['rr_at_10']:.4f}",
              "ablation": run.data.tags.get("ragexp.ablation", "")},
        description=f"config of run {run_id}")
    c.set_registered_model_alias(name, ALIAS, version.version)
    previous = f" (was version {champion.version}, run {champion.run_id})" if champion else ""
    return version.version, f"{name} version {version.version} is now '{ALIAS}': run {run_id}" \
        f"{previous}"
