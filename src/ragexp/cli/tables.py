"""The result tables of the named ablations, from the MLflow store (``ragexp report``; ``make
tables`` writes them into the docs).

The ablations are the shipped ``conf/ablation/*.yaml`` and a user's own config folder's
(``--config-dir``, by default ``conf/`` of the current folder, as ``ragexp init`` writes it).
For each the latest finished run *whose config is that ablation's composed config* is taken: its ``ragexp.config_hash`` tag must equal the hash the
runner computes for ``+ablation=NAME`` with nothing else overridden (``tracking.config_hash`` over
the resolved config and the data fingerprint), so a run tagged ``hybrid`` with another
retriever is never shown as ``hybrid``. Ablations without such a run are listed as missing. The
table shows its metrics overall and per question kind, refusal rates at the abstain operating
point (in-sample and cross-validated), answer-level metrics, and a paired test of every
ablation against ``default``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ragexp.cli import decisions as decision_tables
from ragexp.config.compose import project_dir
from ragexp.data import shipped
from ragexp.decide import compare, figures, sources
from ragexp.errors import NotFound, listed
from ragexp.evaluation import significance

ABLATIONS = shipped.folder("conf") / "ablation"


def user_config_dir(config_dir: str | Path | None = None) -> Path | None:
    """The user's config folder the tables add to the shipped one: ``config_dir`` if given
    (``MissingInput`` if it is not a folder), else ``conf/`` of the current folder when it has
    an ``ablation/`` folder and is not the shipped ``conf/`` itself; else None."""
    if config_dir is not None:
        return project_dir(config_dir)
    here = Path("conf").resolve()
    return here if (here / "ablation").is_dir() and here != ABLATIONS.parent.resolve() else None


def ablation_files(config_dir: Path | None = None) -> dict[str, Path]:
    """``{ablation name: its yaml}``: the shipped ones, and ``config_dir/ablation/*.yaml``; on
    a name both have, the shipped one, as the runner composes it (``config.compose``)."""
    folders = ([config_dir / "ablation"] if config_dir else []) + [ABLATIONS]
    return {p.stem: p for folder in folders for p in sorted(folder.glob("*.yaml"))}


def ablation_hashes(names: list[str] | None = None, overrides: tuple[str, ...] = (),
                    config_dir: Path | None = None) -> dict[str, str]:
    """``{config hash: ablation}``: each ablation (``ablation_files``) composed as the runner
    composes ``+ablation=NAME`` plus ``overrides`` (the sweep's own, e.g. ``embedder=hash``;
    ``config.compose``, with ``config_dir`` on the search path as ``--config-dir`` puts it),
    hashed as the runner hashes it."""
    # defer heavy import
    from hydra.utils import instantiate

    # defer heavy import
    from ragexp.config import schema
    from ragexp.config.compose import compose
    from ragexp.run import inputs
    from ragexp.run.app import choose_split
    from ragexp.tracking import store as tracking

    schema.register()
    out, fingerprints = {}, {}
    for name in names or sorted(ablation_files(config_dir)):
        cfg = compose("config", [f"+ablation={name}", *overrides], config_dir)
        choose_split(cfg)
        data_key = OmegaConf.to_yaml(cfg.dataset, resolve=True)
        if data_key not in fingerprints:
            fingerprints[data_key] = instantiate(cfg.dataset).fingerprint()
        resolved = OmegaConf.to_container(cfg, resolve=True)
        out[tracking.config_hash(resolved, {**fingerprints[data_key], **inputs.hashes(cfg)})] = name
    return out


def ablation_runs(experiment: str, overrides: tuple[str, ...] = (),
                  config_dir: Path | None = None) -> pd.DataFrame:
    """The latest finished run of each ablation whose config hash is the ablation's own
    (``ablation_hashes``); ``attrs["missing"]`` lists the ablations with no such run, of the
    folders (shipped, the user's) that have one shown. Raises
    ``NotFound`` (``unmatched``) when no run matches."""
    hashes = ablation_hashes(overrides=overrides, config_dir=config_dir)
    runs = compare.runs_frame(experiment)  # latest finished run of each config hash
    df = runs[runs["tags.ragexp.config_hash"].isin(hashes)].copy()
    if "params.split" in df:  # test-split runs are confirmations, not candidates
        df = df[df["params.split"] != "test"]
    if df.empty:
        raise unmatched(experiment, runs, overrides, config_dir)
    df["tags.ragexp.ablation"] = df["tags.ragexp.config_hash"].map(hashes)
    df = df.sort_values("tags.ragexp.ablation").reset_index(drop=True)
    files = ablation_files(config_dir)  # missing: only from the folders that have a run shown
    shown = {files[a].parent for a in df["tags.ragexp.ablation"]}
    df.attrs["missing"] = sorted(a for a in set(hashes.values()) - set(df["tags.ragexp.ablation"])
                                 if files[a].parent in shown)
    return df


def unmatched(experiment: str, runs: pd.DataFrame, overrides: tuple[str, ...],
              config_dir: Path | None) -> NotFound:
    """The one-line error when none of ``experiment``'s finished ``runs`` has an ablation's
    exact config: where the ablations were read, the overrides tried, and the command lines the
    runs did record (``ragexp.overrides``), which say what to pass as ``--overrides``."""
    where = str(ABLATIONS) + (f" and {config_dir / 'ablation'}" if config_dir else
                              " (a project's own: --config-dir DIR)")
    recorded = sorted({str(o) for o in runs.get("tags.ragexp.overrides", pd.Series(dtype=str))
                       .fillna("")})
    shown = listed((f"`{o}`" if o else "(no overrides)" for o in recorded), 4, "; ")
    return NotFound(f"none of the {len(runs)} finished runs in experiment {experiment!r} has "
                    f"the exact config of an ablation of {where} with overrides "
                    f"{list(overrides) or 'none'}; the runs were launched with {shown}"
                    f"{'; ...' if len(recorded) > 4 else ''}: pass the sweep's own overrides "
                    f"beside +ablation with --overrides KEY=VALUE ..., or rerun the sweep if its "
                    f"code or data changed since")


def describe(name: str, config_dir: Path | None = None) -> str:
    """An ablation's description: the comment lines at the top of its yaml."""
    path = ablation_files(config_dir)[name]
    lines = [ln[2:] for ln in path.read_text().splitlines()[1:] if ln.startswith("# ")]
    return " ".join(lines)


def ran_with(row: pd.Series) -> str:
    """The stages a run used, as its logged params and tags say (``row``: one run of a
    ``search_runs`` frame): ``Ran: retriever=dense, embedder=hash, reranker=lexical.``. A hybrid
    retriever names its parts (and a part's own embedder) and fusion; the run's embedder is
    named only when a stage used it (tag ``embedder.backend`` not ``none ...``: a BM25 run
    with the lexical signal embeds nothing). An ablation's description is its yaml's comment,
    written for the ablation's own config: a starter's ``Dense retrieval (MiniLM)`` described
    a run of ``embedder=hash`` (the sweep's override), so the table says what ran beside it."""
    get = lambda key: "" if pd.isna(v := row.get(key)) else str(v)  # noqa: E731
    retriever = get("params.retriever.name") or "?"
    prefix = "params.retriever.parts."
    parts = sorted({c[len(prefix):].split(".")[0] for c in row.index
                    if c.startswith(prefix) and c.endswith(".depth") and get(c)})
    if parts:
        named = [p + (f" embedder={e}" if (e := get(f"{prefix}{p}.embedder")) not in
                      ("", "None") else "") for p in parts]
        fusion = get("params.retriever.fusion.name") or get("params.fusion.name")
        retriever += f" ({', '.join(named)}" + (f"; {fusion}" if fusion else "") + ")"
    used = [f"retriever={retriever}"]
    backend = get("tags.embedder.backend")
    if backend and not backend.startswith("none"):
        name, model = get("params.embedder.name"), get("params.embedder.model")
        used.append(f"embedder={name or backend}"
                    + (f" ({model})" if name == "fastembed" and model else ""))
    used.append(f"reranker={get('params.reranker.name') or '?'}")
    return f"Ran: {', '.join(used)}."


def missing_line(names: list[str], overrides: tuple[str, ...],
                 config_dir: Path | None) -> str:
    """The line naming the ablations with no run of their exact config, and the command that
    runs them (with the sweep's ``overrides`` and the project's ``--config-dir``)."""
    folder = f"--config-dir {config_dir} " if config_dir else ""
    command = " ".join(["python -m ragexp", f"{folder}-m", f"'+ablation={','.join(names)}'",
                        *overrides])
    return (f"Not shown, no run with this exact config: {', '.join(names)} (run them: "
            f"`{command}`).")


def metric_column(df: pd.DataFrame, metric: str) -> pd.Series:
    """``metric`` of each run of ``df`` (a ``search_runs`` frame), NaN where a run logged none
    (or no run did: the frame has no such column)."""
    return df.get(f"metrics.{metric}", pd.Series(float("nan"), index=df.index))


def shown_metric(df: pd.DataFrame, metric: str) -> pd.Series:
    """``metric`` of each run of ``df`` (a ``search_runs`` frame) to 3 decimals, ``n/a`` where
    a run logged none: a statistic its questions were too few for (the abstain curve without
    unanswerable questions on both sides of a fold, say; the runner said why) shows as n/a,
    never as an error."""
    return metric_column(df, metric).map(lambda v: "n/a" if pd.isna(v) else f"{v:.3f}")


def cv_note(df: pd.DataFrame) -> tuple[str, int | None]:
    """What the refusal table's header says of its cross-validation, and the one fold count
    every run of ``df`` used (None when they differ, or a run logged none: a run recorded before
    ``abstain.cv.folds``, or one without a curve). The folds a run used (``abstain.cv.folds``)
    are ``abstain.folds`` but at most its unanswerable questions (``stages.abstain.cv_folds``):
    the header printed ``abstain.folds`` (CV = 50-fold) for runs cross-validated over 2
    folds."""
    asked = {int(float(v)) for v in df.get("params.abstain.folds", pd.Series(dtype=str)).dropna()}
    asked_text = ", ".join(map(str, sorted(asked))) or "?"
    used = metric_column(df, "abstain.cv.folds")
    if used.isna().any() or used.nunique() != 1:
        return (f"CV = cross-validated threshold, over the folds in column CV folds "
                f"(abstain.folds={asked_text}; fewer where the unanswerable questions are "
                f"fewer)"), None
    k = int(used.iloc[0])
    fewer = (f", fewer than abstain.folds={asked_text}: each fold holds out an unanswerable "
             f"question, and there are only {k}" if asked and k < min(asked) else "")
    return f"CV = {k}-fold cross-validated threshold{fewer}", k


def build(experiment: str, run_confirm: bool = False, overrides: tuple[str, ...] = (),
          config_dir: Path | None = None, command: str = "ragexp report") -> str:
    """The results block: one row per ablation whose exact config (with ``overrides``) ran;
    ``command`` the one that prints it, as the block's first line names it."""
    df = ablation_runs(experiment, overrides, config_dir)
    kinds = compare.kinds_in(df, "rr_at_10")
    source = compare.deciding_source(df)
    # with several question sources, the overall numbers are the deciding source's
    of = (lambda col: f"{col}.source.{source}"  # noqa: E731
          if f"metrics.rr_at_10.source.{source}" in df else col)
    m = lambda col: shown_metric(df, col)  # noqa: E731
    main = pd.DataFrame({"ablation": df["tags.ragexp.ablation"],
                         "what": [f"{describe(a, config_dir)} {ran_with(row)}"
                                  for a, (_, row) in zip(df["tags.ragexp.ablation"],
                                                         df.iterrows())],
                         "RR@10": m(of("rr_at_10")), "nDCG@10": m(of("ndcg_at_10")),
                         "Success@1": m(of("success_at_1")),
                         "Success@10": m(of("success_at_10")),
                         "R@10": m(of("r_at_10")), "R@100": m(of("r_at_100"))})
    # whose questions, and how many (``decide.figures``): the only source's, or the deciding one's
    every = {r: compare.per_question(r) for r in df["run_id"]}  # read once: tag and kinds
    tag = figures.together(figures.figure(every[r], sources.ALL_SOURCES
                                          if of("x") == "x" else source, "rr_at_10")
                           for r in df["run_id"])
    overall = f"answerable questions: {tag}" + ("" if of("x") == "x" else
                                                  f", which decide: `objective_source={source}`;"
                                                  f" each source's choice below")
    per_kind = pd.DataFrame({"ablation": df["tags.ragexp.ablation"],
                             **{f"RR@10 {k}": m(f"rr_at_10.{k}") for k in kinds},
                             **{f"nDCG@10 {k}": m(f"ndcg_at_10.{k}") for k in kinds}})
    kinds_of = "every source's questions"
    if of("x") != "x":  # a kind's logged metric averages every source: the deciding one's
        per_kind, kinds_of = _kinds_of_source(df, every, source), f"questions of source `{source}`"
    cv, one_k = cv_note(df)
    # the runs used different folds (or one logged none): a column says each run's
    folds = {} if one_k is not None else {"CV folds": metric_column(df, "abstain.cv.folds").map(
        lambda v: "n/a" if pd.isna(v) else str(int(v)))}
    refusal = pd.DataFrame({
        "ablation": df["tags.ragexp.ablation"], "signal": df["params.abstain.signal.name"],
        "AUC": m("abstain.auc"), "threshold": m("abstain.threshold"),
        "unanswerable refused": m("abstain.refused_unanswerable"),
        "answerable refused": m("abstain.refused_answerable"), **folds,
        "CV unanswerable refused": m("abstain.cv.refused_unanswerable"),
        "CV answerable refused": m("abstain.cv.refused_answerable"),
        "answer rate": m("answer.rate_answerable"),
        "citation precision": m("answer.citation_precision")})
    parts = [
        f"Experiment `{experiment}`, {len(df)} ablations, the latest finished run with each "
        f"one's exact config; generated by `{command}` on {time.strftime('%Y-%m-%d')}.",
        "", f"**Overall** ({overall})", "", compare.render(main)]
    if df.attrs.get("missing"):
        parts += ["", missing_line(df.attrs["missing"], overrides, config_dir)]
    named = df.get("params.baseline", pd.Series(dtype=str)).dropna()  # the config key baseline
    baseline = str(named.iloc[0]) if len(named) else "default"
    base = df[df["tags.ragexp.ablation"] == baseline]
    if not base.empty and len(df) == 1:
        parts += ["", f"**Against `{baseline}`**: no paired test: the baseline is the only "
                      f"ablation with a run here, so there is nothing to compare it with."]
    elif not base.empty:
        tab, results = compare.with_baseline(
            df, pd.DataFrame({"ablation": df["tags.ragexp.ablation"]}), base["run_id"].iloc[0],
            significance.DEFAULT_MEASURES)
        parts += ["", f"**Against `{baseline}`** (paired, per question)", "", compare.render(tab),
                  "", significance.note("holm", results, significance.DEFAULT_MEASURES)]
    parts += ["", *decision_tables.build(df, run_confirm=run_confirm)]
    parts += ["", f"**Per question kind** ({kinds_of})", "", compare.render(per_kind),
              "", f"**Refusal** at the operating point (budget: at most "
              f"{df['params.abstain.budget'].iloc[0]} of answerable questions refused; "
              f"{cv}) and answers", "", compare.render(refusal)]
    return "\n".join(parts)


def _kinds_of_source(df: pd.DataFrame, every: dict[str, pd.DataFrame], source: str
                     ) -> pd.DataFrame:
    """The per-kind table on ``source``'s questions alone: each kind's mean RR@10 and nDCG@10
    over the answerable questions of that source and kind (a kind without one, ``unanswerable``,
    has no column, as it has no logged metric), from ``every`` run's per-question table
    (``report.facts.group_means``, as the sweep's page computes them): a kind's logged metric
    (``rr_at_10.<kind>``) averages every source's questions, and a generated set asking the
    hand-written kinds (``structure``) would move it."""
    # defer heavy import
    from ragexp.report import facts

    tables = {r: sources.deciding(every[r], source) for r in df["run_id"]}
    kinds = sorted({str(k) for t in tables.values() for k in t["kind"]})
    means = {(r, col): facts.group_means(t, col, kinds) for r, t in tables.items()
             for col in ("rr_at_10", "ndcg_at_10")}
    kinds = [k for k in kinds if any(pd.notna(v[k]) for v in means.values())]  # scored ones
    shown = lambda v: "n/a" if pd.isna(v) else f"{v:.3f}"  # noqa: E731
    return pd.DataFrame({"ablation": df["tags.ragexp.ablation"], **{
        f"{name} {k}": [shown(means[(r, col)][k]) for r in df["run_id"]]
        for name, col in (("RR@10", "rr_at_10"), ("nDCG@10", "ndcg_at_10")) for k in kinds}})


def print_tables(experiment: str, run_confirm: bool = False,
                 overrides: tuple[str, ...] = (), config_dir: str | Path | None = None) -> int:
    """Print the results tables (``build``): ``ragexp report`` without ``--html``/``--chart``;
    ``config_dir`` as ``user_config_dir`` takes it."""
    folder = user_config_dir(config_dir)
    command = " ".join(["ragexp report", f"--experiment {experiment}",
                        *([f"--config-dir {config_dir}"] if config_dir else []),
                        *(["--overrides", *overrides] if overrides else [])])
    print(build(experiment, run_confirm=run_confirm, overrides=overrides, config_dir=folder,
                command=command))
    return 0
