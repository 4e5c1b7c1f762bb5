"""Do generated questions rank configurations as people's do? A pilot sweep on a corpus with
human-written questions, scored on them and on each generator's set side by side.

For a folder written by ``tools.corpora`` (``corpus/``, ``questions.jsonl``), each generator of
``--generators`` writes ``--n`` questions (seed 0) into ``pilot/<generator>.jsonl``, their
``source`` the generator's name; one sweep (``python -m ragexp -m +ablation=...``, as
``make sweep`` runs it) scores the ``--configs`` on every question of every source
(``split=all``); then, per generator and for nDCG@10 and RR@10, Kendall's tau between the runs'
mean on the human questions and on the generator's, with a 95 % bootstrap interval over
questions, and the runs tied with the best on each source (``decide.sources``, the sweep's
rule). The human set's own split-half agreement is the bar: a generated set whose tau is below
it disagrees beyond the human set's noise (``decide.calibrate``; the question-set certificate
of #42 will state this verdict for every sweep).

With ``--calibration SWEEP`` (a sweep that scored ``ragexp questions calibrate sets``' files
beside the human questions) it also reports what ``calibrate choose`` picks there: the tau of
the chosen settings on the half of the human questions that took no part in the choice.

``python -m tools.question_validity data/corpora/conditionalqa --name conditionalqa
[--generators known_item ...] [--unit document] [--parent SWEEP] [--calibration SWEEP]
[--readme docs/questions.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tools import readme

# lexical, dense (MiniLM), hybrid fusions, reranker on/off, chunk sizes and splitters, headings,
# and the hash embedder: the ablations a first sweep on a new corpus tries
CONFIGS = ("default", "bm25", "no_reranker", "hybrid", "hybrid_no_reranker", "hybrid_combsum",
           "hybrid_convex", "hybrid_weighted_rrf", "chunks_small", "chunks_large",
           "chunks_sentences", "no_headings", "hash_dense", "hash_hybrid")
MEASURES = ("nDCG@10", "RR@10")


def pilot_sets(folder: Path, generators: list[str], n: int) -> Path:
    """``folder/pilot/<generator>.jsonl`` for each generator (written by ``ragexp questions
    generate`` when missing, then its questions' ``source`` set to the generator's name)."""
    pilot = folder / "pilot"
    pilot.mkdir(exist_ok=True)
    for gen in generators:
        target = pilot / f"{gen}.jsonl"
        if target.is_file():
            continue
        raw = folder / "generated" / f"{gen}.jsonl"
        raw.parent.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "ragexp", "questions", "generate", "--generator",
                        gen, "--n", str(n), "--seed", "0", "--out", str(raw), "dataset=markdown",
                        f"dataset.corpus_dir={folder / 'corpus'}", "progress=false"], check=True)
        rows = [json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines()]
        target.write_text("".join(json.dumps({**r, "source": gen}, ensure_ascii=False) + "\n"
                                  for r in rows), encoding="utf-8")
    return pilot


def run_sweep(folder: Path, name: str, configs: list[str], unit: str) -> float:
    """The pilot sweep, as one multirun; returns its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ragexp", "-m", f"+ablation={','.join(configs)}",
                    "dataset=markdown", f"dataset.name={name}",
                    f"dataset.corpus_dir={folder / 'corpus'}",
                    f"dataset.questions=[{folder / 'questions.jsonl'},{folder / 'pilot'}]",
                    "split=all", f"dataset.unit={unit}", "progress=false",
                    f"hydra.sweep.dir={folder / 'multirun'}"], check=True, stdout=sys.stderr)
    return time.perf_counter() - started


def sweep_tables(parent: str) -> tuple[dict, dict[str, str]]:
    """The per-question table of each run of the sweep ``parent``, and the runs' labels."""
    # defer heavy import
    from ragexp.decide import compare
    from ragexp.tracking import store as tracking

    df = compare.runs_frame(tracking.experiment_name_of(parent), parent=parent)
    return {r: compare.per_question(r) for r in df["run_id"]}, compare.run_labels(df)


def table(parent: str, name: str, resamples: int) -> str:
    """The markdown table of the sweep ``parent``: one row for the human questions, one per
    generated source."""
    # defer heavy import
    from ragexp.decide import calibrate, sources

    tables, label = sweep_tables(parent)
    chosen = sources.choices(tables, MEASURES[0])
    hand = {m: calibrate.score_matrix(tables, "hand", m)[2] for m in MEASURES}
    bar = calibrate.split_half(hand[MEASURES[0]])
    names = lambda runs: ", ".join(sorted(label[r] for r in runs))  # noqa: E731
    rows = [f"| {name} | hand | {hand[MEASURES[0]].shape[1]} | (itself) | (itself) | "
            f"{label[chosen['hand'].best]} | {names(chosen['hand'].tied)} | split-half tau "
            f"{bar} |"]
    for source in [s for s in chosen if s != "hand"]:
        taus = {m: calibrate.tau_interval(hand[m], calibrate.score_matrix(tables, source, m)[2],
                                          resamples) for m in MEASURES}
        t = taus[MEASURES[0]].value
        verdict = ("below the human split-half agreement: do not decide on it"
                   if t < bar.value else "within the human set's own agreement")
        c = chosen[source]
        rows.append(f"| {name} | {source} | {c.n} | {taus['nDCG@10']} | {taus['RR@10']} | "
                    f"{label[c.best]} | {names(c.tied)} | {verdict} |")
    head = (f"Sweep `{parent[:8]}`: {len(tables)} configurations, every question scored "
            f"(`split=all`); tau against the human questions with its 95% bootstrap interval "
            f"({resamples} resamples of the questions); tied: the runs the sweep's rule (paired "
            f"tests against the best, Holm) cannot tell from the best on nDCG@10.\n\n"
            "| corpus | questions | n | tau nDCG@10 | tau RR@10 | best | tied with best | "
            "verdict |\n|---|---|---|---|---|---|---|---|")
    return "\n".join([head, *rows])


def calibration(parent: str, seed: int, resamples: int) -> str:
    """What ``ragexp questions calibrate choose`` finds in the sweep ``parent`` (one that scored
    the shipped grid's sets beside the human questions), as markdown: each point's tau on the
    tuning half, and the chosen point's tau on the check half with its interval."""
    # defer heavy import
    from ragexp.cli.calibrate import load_grid, source_name
    from ragexp.decide import calibrate

    tables, _ = sweep_tables(parent)
    names = [source_name(p) for p in load_grid(None)]
    rows = []
    for measure in MEASURES:
        got = calibrate.calibrate(tables, names, measure, seed=seed, resamples=resamples)
        rows.append(f"| {measure} | {got.chosen} | {got.n_tune} | {got.tuning[got.chosen]:+.2f} "
                    f"| {got.n_check} | {got.check} |")
    return (f"Calibration sweep `{parent[:8]}`: {len(tables)} configurations, the human "
            f"questions and the {len(names)} sets of `conf/calibrate.yaml` (200 questions "
            f"each); the human questions split (seed {seed}) into a tuning and a check half.\n\n"
            "| measure | chosen | tuning n | tau, tuning | check n | tau, check (95% CI) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's docstring); exit 2 when ``--readme`` lacks the block."""
    parser = argparse.ArgumentParser(prog="python -m tools.question_validity",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a folder tools.corpora wrote")
    parser.add_argument("--name", required=True, help="dataset.name (the MLflow experiment)")
    parser.add_argument("--generators", nargs="+", default=["known_item"])
    parser.add_argument("--n", type=int, default=300, help="questions per generator")
    parser.add_argument("--unit", default="chunk", help="dataset.unit (document for a corpus "
                        "labelled by whole documents)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="ablations")
    parser.add_argument("--parent", help="an existing sweep to read (no sweep is run)")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--readme", help="markdown page whose question-validity-NAME block "
                        "gets the table")
    parser.add_argument("--calibration", metavar="SWEEP", help="also the calibration found in "
                        "this sweep (the grid's sets beside the human questions), into the "
                        "question-validity-NAME-calibrated block")
    args = parser.parse_args(argv)
    block = f"question-validity-{args.name}"
    if not readme.has_block(args.readme, block) or (
            args.calibration and not readme.has_block(args.readme, f"{block}-calibrated")):
        return 2
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parent = args.parent
    if parent is not None:
        # defer heavy import
        from ragexp.tracking import store as tracking
        parent = tracking.resolve_run_id(parent)
    else:
        pilot_sets(args.folder, args.generators, args.n)
        seconds = run_sweep(args.folder, args.name, args.configs, args.unit)
        print(f"pilot sweep: {seconds:.0f} s", file=sys.stderr)
        # defer heavy import
        from ragexp.report.sweep_data import latest_sweep
        parent = latest_sweep(f"ragexp-{args.name}")
    text = table(parent, args.name, args.resamples)
    print(text)
    if args.readme:
        readme.replace_block(args.readme, block, text)
    if args.calibration:
        # defer heavy import
        from ragexp.tracking import store as tracking

        found = calibration(tracking.resolve_run_id(args.calibration), 0, args.resamples)
        print(found)
        if args.readme:
            readme.replace_block(args.readme, f"{block}-calibrated", found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
