"""Tables for the decision a sweep ends in (``docs/results.md``; part of ``make tables``).

- **Tied with the best**: the ablation with the best mean objective on dev, and every ablation
  tested against it (paired, Holm over those tests); tied = not significantly worse. With
  questions from several sources, on the ``objective_source`` questions; followed by the
  certificate of every source's questions (``decide.sources``: reliability, discriminative
  power, verdicts, and between sources tau with its interval, inversions, winners, tied sets).
- **Winner on dev and test**: the winner's and ``default``'s numbers on the dev questions they
  were chosen on, next to the held-out test questions (``ragexp confirm``). The dev number of a
  winner is optimistic: it is the maximum of many noisy estimates on the same questions, so part
  of its lead is luck that test questions do not repeat.
"""

from __future__ import annotations

import pandas as pd

from ragexp.decide import compare, labels, sources
from ragexp.decide.selection import aligned_scores, objective
from ragexp.evaluation import significance, stats
from ragexp.evaluation.measures import measure_key
from ragexp.records import HAND


def tied_table(df: pd.DataFrame, objective: str) -> tuple[list[str], list[str]]:
    """Markdown lines of the tied-with-best table and the run ids by mean objective, best
    first (none when fewer than two runs are scored on the same questions)."""
    names = dict(zip(df["run_id"], df["tags.ragexp.ablation"]))
    every = {r: compare.per_question(r) for r in df["run_id"]}
    source = compare.deciding_source(df)
    tables = {r: sources.deciding(t, source) for r, t in every.items()}
    scores, left_out = aligned_scores(tables, objective)
    if len(scores) < 2:
        return [], []
    tied = stats.tied_with_best(scores, objective)
    rows = []
    ranked = sorted(scores.items(), key=lambda kv: -kv[1].mean())
    for r, s in ranked:
        t = tied.tests.get(r)
        rows.append({"ablation": names[r], objective: f"{s.mean():.3f}",
                     "Δ vs best [95% CI]": "best" if t is None else
                     significance.format_delta(t),
                     "p": "-" if t is None else significance.format_p(t.p),
                     "p_adj": "-" if t is None else significance.format_p(t.p_adj),
                     "tied with best": "yes" if r in tied.tied else "no"})
    lines = [f"**Tied with the best** ({objective} on the dev questions; best: "
             f"`{names[tied.best]}`; tied: {', '.join(f'`{names[r]}`' for r in tied.tied)})", "",
             compare.render(pd.DataFrame(rows)), "",
             "Every ablation tested against the best, paired per question; "
             + stats.correction_note("holm", f"these {len(scores) - 1} tests")
             + " Tied = not significantly worse than the best: the golden set cannot tell them "
               "apart."]
    if left_out:
        lines.append(f"Left out (scored on other questions): {', '.join(names[r] for r in left_out)}.")
    return lines + certificate_lines(df, objective, every), [r for r, _ in ranked]


def no_winner(df: pd.DataFrame) -> str:
    """Why the tables name no winner and confirm nothing: fewer than two runs were scored on
    the same questions (a sweep of its baseline alone said nothing, ``--confirm`` included)."""
    names = ", ".join(f"`{n}`" for n in df["tags.ragexp.ablation"])
    return (f"**Winner on dev and test**: none chosen and nothing confirmed: a winner needs two "
            f"runs scored on the same questions, and the runs here are {names}.")


def certificate(df: pd.DataFrame, objective: str,
                every: dict[str, pd.DataFrame] | None = None) -> sources.Certificate | None:
    """The certificate of the runs' question sets (``decide.sources.certify``, coverage from
    the first run's dataset); ``None`` when no source is ranked by two runs. ``every``: each
    run's per-question table, read from the store when not given."""
    every = every or {r: compare.per_question(r) for r in df["run_id"]}
    return sources.certify(every, objective, compare.deciding_source(df),
                           corpus=sources.corpus_of(str(df["run_id"].iloc[0])))


def certificate_lines(df: pd.DataFrame, objective: str,
                      every: dict[str, pd.DataFrame] | None = None) -> list[str]:
    """Markdown lines of the certificate of the runs' question sets (``certificate``): each
    source's figures and verdict, each pair's agreement, each source not used and why."""
    cert = certificate(df, objective, every)
    if cert is None:
        return []
    names = dict(zip(df["run_id"], df["tags.ragexp.ablation"]))
    head, *rest = sources.lines(cert, names)
    return ["", f"**Question sets** (the certificate of each source's dev questions, {len(df)} "
                f"ablations)", "", head[0].upper() + head[1:], "", *(f"- {line}" for line in rest)]


def winner_table(df: pd.DataFrame, winner: str, measures: tuple[str, ...],
                 run_confirm: bool, runner_up: str | None = None) -> list[str]:
    """Markdown lines: the winner and its confirmation baseline on dev and on test. The
    baseline is ``ragexp confirm``'s (the sweep's baseline job, else the champion), except
    for a winner that is the sweep's baseline job itself: it is confirmed against
    ``runner_up`` (the second best on dev), as confirm cannot test a run against itself."""
    # defer heavy import
    from ragexp.run.confirm import confirm, sweep_baseline
    from ragexp.tracking import store as tracking

    c = tracking.client()
    run = c.get_run(winner)
    # the ablations' own names (the tables'), else the rule's (``decide.labels``)
    names = {} if df is None else dict(zip(df["run_id"], df["tags.ragexp.ablation"]))
    name = names.get(winner) or labels.of_runs({winner: run}, ids=False)[winner]
    if "ragexp.confirm.test_run" not in run.data.tags:
        against = runner_up if runner_up and sweep_baseline(run) == winner else None
        if not run_confirm:
            given = f" --baseline {against}" if against else ""
            return [f"**Winner on dev and test**: `{name}` is not confirmed yet: run "
                    f"`ragexp confirm {winner}{given}` (or pass --confirm here)."]
        confirm(winner, against, measures)
        run = c.get_run(winner)
    base = c.get_run(run.data.tags["ragexp.confirm.baseline"])
    # a baseline not among the ablations (the champion) is named as beside the winner
    base_name = names.get(base.info.run_id) or labels.of_runs(
        {winner: run, base.info.run_id: base}, ids=False)[base.info.run_id]
    source = run.data.params.get("objective_source", HAND)
    dev = {r.info.run_id: {m: objective(r.data.metrics, m, source) for m in measures}
           for r in (run, base)}  # the objective_source questions', as confirm's test numbers
    rows = []
    for m in measures:
        key = measure_key(m)
        rows.append({"measure": m, f"{name} dev": f"{dev[run.info.run_id][m]:.3f}",
                     f"{name} test": f"{run.data.metrics[f'confirm.{key}']:.3f}",
                     f"{base_name} dev": f"{dev[base.info.run_id][m]:.3f}",
                     f"{base_name} test": f"{run.data.metrics[f'confirm.baseline.{key}']:.3f}",
                     "Δ dev": f"{dev[run.info.run_id][m] - dev[base.info.run_id][m]:+.3f}",
                     "Δ test [95% CI]": significance.format_interval(
                         *(run.data.metrics[f"confirm.vs_baseline.{key}.{f}"]
                           for f in ("delta", "ci_low", "ci_high"))),
                     "p (test)": significance.format_p(
                         run.data.metrics[f"confirm.vs_baseline.{key}.p"]),
                     "p_adj (test)": significance.format_p(
                         run.data.metrics[f"confirm.vs_baseline.{key}.p_adj"])})
    return [f"**Winner on dev and test** (`{name}` against `{base_name}`; recorded by "
            f"`ragexp confirm`)", "", compare.render(pd.DataFrame(rows)), "",
            "The dev numbers are optimistic: the winner was chosen as the best of many "
            "configurations on those same dev questions, so part of its lead is luck. The test "
            "questions took no part in the choice; their difference is the honest estimate. "
            + stats.correction_note("holm", "the measures x (all + each kind) on test")]


def build(df: pd.DataFrame, objective: str = "nDCG@10", run_confirm: bool = False,
          measures: tuple[str, ...] = significance.DEFAULT_MEASURES) -> list[str]:
    lines, ranked = tied_table(df, objective)
    if not ranked:
        return lines + ([] if df.empty else [no_winner(df)])
    return lines + [""] + winner_table(df, ranked[0], measures, run_confirm, ranked[1])
