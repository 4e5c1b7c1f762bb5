"""Hydra entry point: ``python -m ragexp [overrides]`` runs one experiment and logs it to MLflow;
``python -m ragexp -m ...`` sweeps (one child run per job under one parent run)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ragexp import failures, measures, provenance, schema, stages, tracking
from ragexp.pipeline import RunResult, run_experiment

log = logging.getLogger("ragexp")
schema.register()


def build_and_run(cfg: DictConfig, dataset, answerer=None, judge=None) -> RunResult:
    """Build every stage from the composed config (``stages.build``) and run the experiment
    (``answerer`` and ``judge`` when already built: they check their API keys before any work)."""
    built = stages.build(cfg).as_kwargs()
    if answerer is not None:
        built["answerer"] = answerer
    return run_experiment(
        measures=measures.resolve(cfg.measures, cfg.k),
        dataset=dataset, **built, judge=judge or instantiate(cfg.judge), k=cfg.k,
        budget=cfg.abstain.budget, folds=cfg.abstain.folds, bm25_k1=cfg.bm25.k1,
        bm25_b=cfg.bm25.b, bm25_method=cfg.bm25.method, bm25_delta=cfg.bm25.delta,
        progress=cfg.progress)


def plot_curve(result: RunResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ab = result.abstain
    xs = [p.refused_answerable for p in ab.curve]
    ys = [p.refused_unanswerable for p in ab.curve]
    fig, axis = plt.subplots(figsize=(5, 4))
    axis.plot(xs, ys, drawstyle="steps-post", label=f"{ab.signal} signal (AUC {ab.auc:.3f})")
    axis.axvline(ab.budget, linestyle=":", color="grey", label=f"budget {ab.budget:.3f}")
    axis.scatter([ab.refused_answerable], [ab.refused_unanswerable], color="red", zorder=3,
                 label=f"operating point, tau={ab.threshold:.3f}")
    axis.set_xlabel("answerable questions refused (wrongly)")
    axis.set_ylabel("unanswerable questions refused")
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1.02)
    axis.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def log_artifacts(run_id: str, cfg: DictConfig, result: RunResult) -> None:
    c = tracking.client()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        result.per_question.to_csv(out / "per_question.csv", index=False)
        provenance.trec_files(out, result.judged, result.qrels, tag=cfg.ablation)
        if result.abstain is not None:
            (out / "abstain_curve.json").write_text(json.dumps(result.abstain.to_json(), indent=1))
            plot_curve(result, out / "abstain_curve.png")
        c.log_artifacts(run_id, str(out))


def dataset_source(resolved: dict) -> str:
    """Where the evaluation data lives, as absolute paths (for the run's dataset input)."""
    ds = resolved["dataset"]
    paths = [ds[k] for k in ("path", "corpus_dir", "questions") if isinstance(ds.get(k), str)]
    return " ".join(str(Path(p).resolve()) for p in paths)


def run_logged(cfg: DictConfig) -> dict:
    measures.resolve(cfg.measures, cfg.k)  # refuse a bad measure list or depth before any run
    measures.check_reads(cfg.k, {"abstain.signal.top_k": cfg.abstain.signal.top_k,
                                 "answer.n_chunks": cfg.answer.n_chunks})
    resolved = OmegaConf.to_container(cfg, resolve=True)
    exp_id = tracking.ensure_experiment(resolved["experiment"])
    dataset, data, early, answerer, judge = None, {}, None, None, None
    try:  # loading validates the golden set against the corpus; a failure fails the run below
        answerer, judge = instantiate(cfg.answer), instantiate(cfg.judge)  # API keys, first
        dataset = instantiate(cfg.dataset)
        data = dataset.fingerprint()
    except Exception as exc:
        early = exc
    chash = tracking.config_hash(resolved, data)
    try:
        output_dir = HydraConfig.get().runtime.output_dir
        overrides = " ".join(HydraConfig.get().overrides.task)
    except ValueError:  # called outside Hydra (tests, notebooks): no job folder, no status
        output_dir, overrides = None, ""
    if not cfg.force and early is None:
        done = tracking.find_finished(exp_id, chash)
        if done:
            log.warning("skipping: identical config already finished on the same data as run %s "
                        "(force=true reruns it)", done)
            tracking.write_status(output_dir, status="SKIPPED", run_id=done, overrides=overrides)
            return {"status": "SKIPPED", "run_id": done}
    parent = os.environ.get(tracking.PARENT_ENV)
    tags = {"ragexp.config_hash": chash, "ragexp.ablation": cfg.ablation,
            "ragexp.overrides": overrides, "git.commit": tracking.git_commit(),
            **tracking.versions(), **provenance.stage_tags(resolved)}
    tags.update(stages.locations(cfg))  # serving finds the data wherever it is started
    if parent:
        tags["mlflow.parentRunId"] = parent
    c = tracking.client()
    run = c.create_run(exp_id, run_name=cfg.ablation if cfg.ablation != "custom" else None,
                       tags=tags)
    run_id = run.info.run_id
    tracking.log_batch(run_id, params=tracking.flatten(resolved))
    log.info("MLflow run %s (experiment %s)", run_id, resolved["experiment"])
    try:
        if early is not None:
            raise early
        c.log_inputs(run_id, [provenance.dataset_input(
            str(cfg.dataset.name), data, dataset.queries(), source=dataset_source(resolved))])
        result = build_and_run(cfg, dataset, answerer, judge)
        ident = result.identity
        tags = {"embedder.backend": ident.backend if ident else "none (no stage used it)",
                "embedder.model": ident.model if ident else "",
                "embedder.model_file": ident.model_file if ident else "",
                "embedder.model_sha256": ident.model_sha256 if ident else "", **data,
                **result.tags}
        tracking.log_batch(run_id, metrics=result.metrics, tags=tags)
        log_artifacts(run_id, cfg, result)
    except BaseException as exc:
        error = failures.describe(exc)
        c.set_tag(run_id, "ragexp.error", error[:5000])
        c.log_text(run_id, traceback.format_exc(), "error.txt")
        c.set_terminated(run_id, "FAILED")
        tracking.write_status(output_dir, status="FAILED", run_id=run_id, overrides=overrides,
                              error=error[:2000])
        raise
    c.set_terminated(run_id, "FINISHED")
    tracking.write_status(output_dir, status="FINISHED", run_id=run_id, overrides=overrides)
    m = result.metrics
    keys = [ms.key for ms in measures.parse_all(cfg.measures)]
    summary = "  ".join(f"{k}={m[k]:.3f}" for k in (*keys, "abstain.auc") if k in m)
    print(f"run {run_id} [{cfg.ablation}] {summary}")
    return {"status": "FINISHED", "run_id": run_id, **m}


# The config groups ship inside the package (ragexp/conf), so an installed ragexp composes its
# configs from any folder; a user's own folder adds to them with --config-dir.
CONF_DIR = str(Path(__file__).resolve().parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> dict | None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        return run_logged(cfg)
    except Exception as exc:
        failures.report(exc, verbose=cfg.verbose)
        if os.environ.get(tracking.PARENT_ENV):
            log.error("the sweep goes on and reports failed jobs at the end")
            return None
        if cfg.verbose:
            raise
        raise SystemExit(1) from None
