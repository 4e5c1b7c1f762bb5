"""Do generated questions rank configurations as people's do? A pilot sweep on a corpus with
human-written questions, scored on them and on each generator's set side by side.

For a folder written by ``tools.corpora`` (``corpus/``, ``questions.jsonl``), each generator of
``--generators`` writes ``--n`` questions (seed 0) into ``pilot/<generator>.jsonl``, their
``source`` the generator's name (``questions generate ... source=NAME``), and each ``--set
NAME=GENERATOR:generator.KEY=VALUE,...`` a set of that generator with those settings into
``pilot/<NAME>.jsonl``, its source ``NAME``; one sweep (``python -m ragexp -m +ablation=...``,
as ``make sweep`` runs it) scores the ``--configs`` on every question of every source
(``split=all``). The table is the sweep's question-set certificate (``decide.sources``), as
``ragexp compare --parent`` reads it: the one recorded on the sweep's parent run
(``certificate.json``), else computed from its runs. Per source: its tau against the human
questions (nDCG@10 and RR@10) with its 95 % bootstrap interval over questions, its split-half
agreement, the runs tied with the best (the sweep's rule), the certificate's verdict, and its
flag: a generated set whose tau is below the human questions' own split-half agreement
disagrees beyond their noise and is never used to decide.

With ``--calibration SWEEP`` (a sweep that scored ``ragexp questions calibrate sets``' files
beside the human questions) it also reports what ``calibrate choose`` picks there: the tau of
the chosen settings on the half of the human questions that took no part in the choice.

``python -m tools.question_validity data/corpora/conditionalqa --name conditionalqa
[--generators known_item ...] [--set NAME=GENERATOR:OVERRIDE,...] [--unit document]
[--parent SWEEP] [--calibration SWEEP] [--readme docs/questions.md]``
"""

from __future__ import annotations

import argparse
import math
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


def parse_set(text: str) -> tuple[str, tuple[str, list[str]]]:
    """``NAME=GENERATOR[:OVERRIDE,OVERRIDE...]`` (``--set``) as ``(name, (generator,
    overrides))``: ``structure_ctx2=structure:generator.context=2`` is the ``structure``
    generator with ``generator.context=2``, its questions' source ``structure_ctx2``. Raises
    ``ValueError`` saying what is expected for another form or an override not under
    ``generator.``."""
    name, eq, rest = text.partition("=")
    generator, _, given = rest.partition(":")
    overrides = [o for o in given.split(",") if o]
    bad = [o for o in overrides if not o.startswith("generator.") or "=" not in o]
    if not eq or not name or not generator or bad:
        raise ValueError(f"--set {text!r}: expected NAME=GENERATOR[:generator.KEY=VALUE,...] "
                         f"(e.g. structure_ctx2=structure:generator.context=2)"
                         + (f"; not a generator.KEY=VALUE override: {', '.join(bad)}"
                            if bad else ""))
    return name, (generator, overrides)


def pilot_sets(folder: Path, sets: dict[str, tuple[str, list[str]]], n: int) -> Path:
    """``folder/pilot/<name>.jsonl`` for each set ``{name: (generator, overrides)}``, written by
    ``ragexp questions generate`` (seed 0, ``source=<name>``, ``max_words=80`` for situated
    questions, the ``generator.*`` overrides) when missing; a file already there is kept."""
    pilot = folder / "pilot"
    pilot.mkdir(exist_ok=True)
    for name, (gen, overrides) in sets.items():
        target = pilot / f"{name}.jsonl"
        if target.is_file():
            continue
        subprocess.run([sys.executable, "-m", "ragexp", "questions", "generate", "--generator",
                        gen, "--n", str(n), "--seed", "0", "--out", str(target), "dataset=markdown",
                        f"dataset.corpus_dir={folder / 'corpus'}", f"source={name}",
                        "max_words=80", "progress=false", *overrides], check=True)
    return pilot


def run_sweep(folder: Path, name: str, configs: list[str], unit: str,
              sets: str = "pilot") -> float:
    """The pilot sweep over the human questions and the sets in ``folder/sets``, as one
    multirun (its folders under ``folder/multirun-<sets>``); returns its wall time in
    seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ragexp", "-m", f"+ablation={','.join(configs)}",
                    "dataset=markdown", f"dataset.name={name}",
                    f"dataset.corpus_dir={folder / 'corpus'}",
                    f"dataset.questions=[{folder / 'questions.jsonl'},{folder / sets}]",
                    "split=all", f"dataset.unit={unit}", "progress=false",
                    f"hydra.sweep.dir={folder / f'multirun-{sets}'}"], check=True,
                   stdout=sys.stderr)
    return time.perf_counter() - started


def calibration_sets(folder: Path, n: int) -> None:
    """``ragexp questions calibrate sets`` into ``folder/calib`` (the shipped grid, ``n``
    questions a set, seed 0), unless the folder is there; ``max_words=80`` lets a situated
    ``structure`` question (``generator.context``) through."""
    if (folder / "calib").is_dir():
        return
    subprocess.run([sys.executable, "-m", "ragexp", "questions", "calibrate", "sets", "--out",
                    str(folder / "calib"), "--n", str(n), "dataset=markdown",
                    f"dataset.corpus_dir={folder / 'corpus'}", "max_words=80",
                    "progress=false"], check=True)


def sweep_tables(parent: str) -> tuple[dict, dict[str, str]]:
    """The per-question table of each run of the sweep ``parent``, and the runs' labels."""
    # defer heavy import
    from ragexp.decide import compare
    from ragexp.tracking import store as tracking

    df = compare.runs_frame(tracking.experiment_name_of(parent), parent=parent)
    return {r: compare.per_question(r) for r in df["run_id"]}, compare.run_labels(df)


def sweep_certificate(parent: str) -> tuple[dict | None, int, bool]:
    """The question-set certificate of the sweep ``parent`` as ``ragexp compare --parent``
    shows it (``decide.compare.certificate_of``: ``certificate.json`` as recorded on its parent
    run, else computed from its runs), its number of runs, and whether it was recorded."""
    # defer heavy import
    from ragexp.decide import compare, sources
    from ragexp.tracking import store as tracking

    df = compare.runs_frame(tracking.experiment_name_of(parent), parent=parent)
    return compare.certificate_of(parent, df), len(df), sources.recorded(parent) is not None


def table(parent: str, name: str) -> str:
    """The markdown table of the sweep ``parent``'s certificate: one row per source, ``hand``
    (the human questions) first, with its tau against them per measure, its split-half
    agreement, best and tied runs, the certificate's verdict, and its flag (a source that
    disagrees with the human questions beyond their noise, not used to decide). Raises
    ``ValueError`` when no source is ranked by two runs."""
    # defer heavy import
    from ragexp.decide import sources
    from ragexp.evaluation import certificate as figures

    doc, runs, recorded = sweep_certificate(parent)
    if doc is None or "hand" not in doc["sources"]:
        raise ValueError(f"sweep {parent[:8]}: no certificate of its human (hand) questions "
                         f"(fewer than two runs scored them)")
    obj, measures, label = doc["objective"], doc["measures"], doc["labels"]

    def spread(d: dict | None, point: str, low: str, high: str) -> str:
        if d is None:
            return "n/a"
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        return sources.interval(figures.Spread(nan(d[point]), nan(d[low]), nan(d[high]),
                                               d["defined"], d["total"]))

    pairs = {p["b"]: p for p in doc["pairs"] if p["a"] == "hand"}
    names = lambda runs: ", ".join(sorted(label[r] for r in runs))  # noqa: E731
    rows = []
    for source, cert in doc["sources"].items():
        main = cert["measures"][obj]
        pair = pairs.get(source)
        taus = [("(itself)" if source == "hand" else
                 spread(None if pair is None else pair["measures"].get(m), "kendall_tau", "low",
                        "high")) for m in measures]
        flag = ("" if source == "hand" else
                "n/a (a tau is undefined)" if pair is None or pair["disagrees"] is None else
                "**disagrees with the human questions beyond their noise: not used to decide**"
                if pair["disagrees"] else "within the human questions' noise")
        rows.append(f"| {name} | {source} | {main['scored']} | {' | '.join(taus)} | "
                    f"{spread(main['split_half'], 'median', 'p05', 'p95')} | "
                    f"{label.get(main['best'], main['best'])} | {names(main['tied'])} | "
                    f"{cert['verdict']} ({cert['why']}) | {flag} |")
    settings = doc["settings"]
    origin = ("recorded on its parent run" if recorded else
              "computed from its runs, as the sweep recorded none")
    head = (f"Sweep `{parent[:8]}`: {runs} configurations, every question scored "
            f"(`split=all`); the question-set certificate {origin}: tau against the human "
            f"questions with its 95% bootstrap interval ({settings['resamples']} resamples of the questions), each set's split-half tau "
            f"(median [5th-95th percentile] of {settings['splits']} seeded splits), the runs "
            f"the sweep's rule ({doc['correction']}, alpha {doc['alpha']}) cannot tell from "
            f"the best on {obj}, the verdict, and the flag: a set whose tau is below the human "
            f"questions' split-half tau.\n\n"
            f"| corpus | questions | n | {' | '.join(f'tau {m}' for m in measures)} | "
            f"split-half tau | best | tied with best | verdict | flag |\n"
            f"|{'---|' * (8 + len(measures))}")
    return "\n".join([head, *rows])


def calibration(parent: str, seed: int, resamples: int) -> str:
    """What ``ragexp questions calibrate choose`` finds in the sweep ``parent`` (one that scored
    the shipped grid's sets beside the human questions), as markdown: each point's tau on the
    tuning half, and the chosen point's tau on the check half with its interval."""
    # defer heavy import
    from ragexp.cli.calibrate import load_grid, source_name
    from ragexp.decide import calibrate, sources

    tables, _ = sweep_tables(parent)
    names = [source_name(p) for p in load_grid(None)]
    rows, found = [], {}
    for measure in MEASURES:
        found[measure] = got = calibrate.calibrate(tables, names, measure, seed=seed,
                                                   resamples=resamples)
        rows.append(f"| {measure} | {got.chosen} | {got.n_tune} | {got.tuning[got.chosen]:+.2f} "
                    f"| {got.n_check} | {sources.interval(got.check)} |")
    points = "\n".join(f"| {p} | " + " | ".join(f"{found[m].tuning[p]:+.2f}" for m in MEASURES)
                       + " |" for p in names)
    return (f"Calibration sweep `{parent[:8]}`: {len(tables)} configurations, the human "
            f"questions and the {len(names)} sets of `conf/calibrate.yaml` (200 questions "
            f"each); the human questions split (seed {seed}) into a tuning and a check half.\n\n"
            "| measure | chosen | tuning n | tau, tuning | check n | tau, check (95% CI) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"| set | {' | '.join(f'tau {m}, tuning' for m in MEASURES)} |\n"
            f"|---|{'---|' * len(MEASURES)}\n" + points)


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's docstring); exit 2 when ``--readme`` lacks the block."""
    parser = argparse.ArgumentParser(prog="python -m tools.question_validity",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a folder tools.corpora wrote")
    parser.add_argument("--name", required=True, help="dataset.name (the MLflow experiment)")
    parser.add_argument("--generators", nargs="+", default=["known_item"], help="generators "
                        "whose sets (each its own source, named after it) are measured")
    parser.add_argument("--set", action="append", default=[], dest="sets",
                        metavar="NAME=GENERATOR[:OVERRIDE,...]", help="also a set of GENERATOR "
                        "with generator.* overrides, its source NAME (repeatable), e.g. "
                        "structure_ctx2=structure:generator.context=2")
    parser.add_argument("--n", type=int, default=300, help="questions per set")
    parser.add_argument("--unit", default="chunk", help="dataset.unit (document for a corpus "
                        "labelled by whole documents)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="ablations")
    parser.add_argument("--parent", help="an existing sweep to read (no sweep is run)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of "
                        "--calibration's check tau (the certificate's are its own: 1000)")
    parser.add_argument("--readme", help="markdown page whose question-validity-NAME block "
                        "gets the table")
    parser.add_argument("--calibration", metavar="SWEEP", help="also the calibration found in "
                        "this sweep (the grid's sets beside the human questions), into the "
                        "question-validity-NAME-calibrated block")
    parser.add_argument("--calibrate", action="store_true", help="also write the grid's sets "
                        "(calibrate sets, 200 a set, into FOLDER/calib), sweep them beside the "
                        "human questions and report that sweep as --calibration does")
    args = parser.parse_args(argv)
    sets = {g: (g, []) for g in args.generators}
    try:
        sets.update(parse_set(text) for text in args.sets)
    except ValueError as exc:
        parser.error(str(exc))
    block = f"question-validity-{args.name}"
    if not readme.has_block(args.readme, block) or (
            (args.calibration or args.calibrate)
            and not readme.has_block(args.readme, f"{block}-calibrated")):
        return 2
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parent = args.parent
    if parent is not None:
        # defer heavy import
        from ragexp.tracking import store as tracking
        parent = tracking.resolve_run_id(parent)
    else:
        pilot_sets(args.folder, sets, args.n)
        seconds = run_sweep(args.folder, args.name, args.configs, args.unit)
        print(f"pilot sweep: {seconds:.0f} s", file=sys.stderr)
        # defer heavy import
        from ragexp.report.sweep_data import latest_sweep
        parent = latest_sweep(f"ragexp-{args.name}")
    text = table(parent, args.name)
    print(text)
    if args.readme:
        readme.replace_block(args.readme, block, text)
    if args.calibrate:
        calibration_sets(args.folder, 200)
        seconds = run_sweep(args.folder, args.name, args.configs, args.unit, sets="calib")
        print(f"calibration sweep: {seconds:.0f} s", file=sys.stderr)
        # defer heavy import
        from ragexp.report.sweep_data import latest_sweep
        args.calibration = latest_sweep(f"ragexp-{args.name}")
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
