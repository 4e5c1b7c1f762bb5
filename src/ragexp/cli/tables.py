"""The result tables of the shipped ablations, from the MLflow store (``ragexp report``; ``make
tables`` writes them into the docs).

For each named ablation (``conf/ablation/*.yaml``) the latest finished run *whose config is
that ablation's composed config* is taken: its ``ragexp.config_hash`` tag must equal the hash the
runner computes for ``+ablation=NAME`` with nothing else overridden (``tracking.config_hash`` over
the resolved config and the data fingerprint), so a run tagged ``hybrid`` with another
retriever is never shown as ``hybrid``. Ablations without such a run are listed as missing. The
table shows its metrics overall and per question kind, refusal rates at the abstain operating
point (in-sample and cross-validated), answer-level metrics, and a paired test of every
ablation against ``default``.
"""

from __future__ import annotations

import time

import pandas as pd
from omegaconf import OmegaConf

from ragexp.cli import decisions as decision_tables
from ragexp.data import shipped
from ragexp.decide import compare
from ragexp.evaluation import significance

ABLATIONS = shipped.folder("conf") / "ablation"


MISSING = "no run with this exact config; run `make sweep`"


def ablation_hashes(names: list[str] | None = None,
                    overrides: tuple[str, ...] = ()) -> dict[str, str]:
    """``{config hash: ablation}``: each ``conf/ablation/NAME.yaml`` composed as the runner
    composes ``+ablation=NAME`` plus ``overrides`` (the sweep's own, e.g. ``embedder=hash``;
    Hydra's compose API), hashed as the runner hashes it."""
    # defer heavy import
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    # defer heavy import
    from ragexp.run import schema
    from ragexp.run.app import CONF_DIR, choose_split
    from ragexp.tracking import store as tracking

    schema.register()
    out, fingerprints = {}, {}
    for name in names or sorted(p.stem for p in ABLATIONS.glob("*.yaml")):
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose("config", overrides=[f"+ablation={name}", *overrides])
        choose_split(cfg)
        data_key = OmegaConf.to_yaml(cfg.dataset, resolve=True)
        if data_key not in fingerprints:
            fingerprints[data_key] = instantiate(cfg.dataset).fingerprint()
        resolved = OmegaConf.to_container(cfg, resolve=True)
        out[tracking.config_hash(resolved, fingerprints[data_key])] = name
    return out


def ablation_runs(experiment: str, overrides: tuple[str, ...] = ()) -> pd.DataFrame:
    """The latest finished run of each ablation whose config hash is the ablation's own
    (``ablation_hashes``); ``attrs["missing"]`` lists the ablations with no such run."""
    hashes = ablation_hashes(overrides=overrides)
    df = compare.runs_frame(experiment)  # latest finished run of each config hash
    df = df[df["tags.ragexp.config_hash"].isin(hashes)].copy()
    if "params.split" in df:  # test-split runs are confirmations, not candidates
        df = df[df["params.split"] != "test"]
    if df.empty:
        raise SystemExit(f"no run in {experiment!r} has the exact config of any ablation "
                         f"(conf/ablation/*.yaml): run `make sweep` first")
    df["tags.ragexp.ablation"] = df["tags.ragexp.config_hash"].map(hashes)
    df = df.sort_values("tags.ragexp.ablation").reset_index(drop=True)
    df.attrs["missing"] = sorted(set(hashes.values()) - set(df["tags.ragexp.ablation"]))
    return df


def describe(name: str) -> str:
    path = ABLATIONS / f"{name}.yaml"
    lines = [ln[2:] for ln in path.read_text().splitlines()[1:] if ln.startswith("# ")]
    return " ".join(lines)


def build(experiment: str, run_confirm: bool = False, overrides: tuple[str, ...] = ()) -> str:
    """The results block: one row per ablation whose exact config (with ``overrides``) ran."""
    df = ablation_runs(experiment, overrides)
    kinds = compare.kinds_in(df, "rr_at_10")
    source = compare.deciding_source(df)
    # with several question sources, the overall numbers are the deciding source's
    of = (lambda col: f"{col}.source.{source}"  # noqa: E731
          if f"metrics.rr_at_10.source.{source}" in df else col)
    m = lambda col: df[f"metrics.{col}"].map(lambda v: f"{v:.3f}")  # noqa: E731
    main = pd.DataFrame({"ablation": df["tags.ragexp.ablation"],
                         "what": df["tags.ragexp.ablation"].map(describe),
                         "RR@10": m(of("rr_at_10")), "nDCG@10": m(of("ndcg_at_10")),
                         "Success@1": m(of("success_at_1")),
                         "Success@10": m(of("success_at_10")),
                         "R@10": m(of("r_at_10")), "R@100": m(of("r_at_100"))})
    overall = ("answerable questions" if of("x") == "x" else
               f"answerable questions of source `{source}`, which decides: "
               f"`objective_source={source}`; each source's choice below")
    per_kind = pd.DataFrame({"ablation": df["tags.ragexp.ablation"],
                             **{f"RR@10 {k}": m(f"rr_at_10.{k}") for k in kinds},
                             **{f"nDCG@10 {k}": m(f"ndcg_at_10.{k}") for k in kinds}})
    refusal = pd.DataFrame({
        "ablation": df["tags.ragexp.ablation"], "signal": df["params.abstain.signal.name"],
        "AUC": m("abstain.auc"), "threshold": m("abstain.threshold"),
        "unanswerable refused": m("abstain.refused_unanswerable"),
        "answerable refused": m("abstain.refused_answerable"),
        "CV unanswerable refused": m("abstain.cv.refused_unanswerable"),
        "CV answerable refused": m("abstain.cv.refused_answerable"),
        "answer rate": m("answer.rate_answerable"),
        "citation precision": m("answer.citation_precision")})
    parts = [
        f"Experiment `{experiment}`, {len(df)} ablations, the latest finished run with each "
        f"one's exact config; generated by `make tables` on {time.strftime('%Y-%m-%d')}.",
        "", f"**Overall** ({overall})", "", compare.render(main)]
    if df.attrs.get("missing"):
        parts += ["", f"Not shown, {MISSING}: {', '.join(df.attrs['missing'])}."]
    base = df[df["tags.ragexp.ablation"] == "default"]
    if not base.empty:
        tab, results = compare.with_baseline(
            df, pd.DataFrame({"ablation": df["tags.ragexp.ablation"]}), base["run_id"].iloc[0],
            significance.DEFAULT_MEASURES)
        parts += ["", "**Against `default`** (paired, per question)", "", compare.render(tab),
                  "", significance.note("holm", results, significance.DEFAULT_MEASURES)]
    parts += ["", *decision_tables.build(df, run_confirm=run_confirm)]
    parts += ["", "**Per question kind**", "", compare.render(per_kind),
              "", f"**Refusal** at the operating point (budget: at most "
              f"{df['params.abstain.budget'].iloc[0]} of answerable questions refused; CV = "
              f"{int(float(df['params.abstain.folds'].iloc[0]))}-fold cross-validated "
              f"threshold) and answers", "", compare.render(refusal)]
    return "\n".join(parts)


def print_tables(experiment: str, run_confirm: bool = False,
                 overrides: tuple[str, ...] = ()) -> int:
    """Print the results tables (``build``): ``ragexp report`` without ``--html``/``--chart``."""
    print(build(experiment, run_confirm=run_confirm, overrides=overrides))
    return 0
