"""``ragexp questions calibrate``: generator settings chosen by how well their questions rank a
pilot sweep's configurations against the user's own (``decide.calibrate``).

``calibrate sets --out DIR``: one question file per point of the grid (``conf/calibrate.yaml``,
or ``--grid FILE``), each question's ``source`` the point's name, so that one pilot sweep with
``dataset.questions=[HAND, DIR]`` scores every configuration on every set, the stored per-question
tables holding all that calibration reads (no retrieval is run again). ``calibrate choose``:
from that sweep, the point that agrees best with a tuning half of the hand questions, its tau on
the other half with a 95 % bootstrap interval, and the settings written to a file that
``ragexp questions generate --settings FILE`` reads."""

from __future__ import annotations

import math
from pathlib import Path

from ragexp.cli.questions import compose, documents
from ragexp.errors import InvalidValue, counted

def load_grid(path: str | None):
    """The grid points of ``path`` (default: the shipped ``conf/calibrate.yaml``); raises
    ``InvalidValue`` naming the file for one that is not ``{generator: {key: [values]}}``."""
    # defer heavy import
    import yaml

    # defer heavy import
    from ragexp.data import shipped
    from ragexp.decide import calibrate

    file = Path(path) if path else Path(shipped.conf_dir()) / "calibrate.yaml"
    try:
        declared = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidValue(f"{file}: cannot read the calibration grid ({exc})") from None
    if not isinstance(declared, dict) or not all(
            isinstance(keys, dict) and all(isinstance(v, list) for v in keys.values())
            for keys in declared.values()):
        raise InvalidValue(f"{file}: a calibration grid is {{generator: {{key: [values]}}}}, "
                           f"e.g. known_item: {{lam: [0.0, 0.1]}}")
    return calibrate.grid(declared)


def _shown(value) -> str:
    """A grid value in a source name: ``.`` as ``p``; a kinds mix its kinds joined by ``_``
    (``all`` for every kind)."""
    if isinstance(value, tuple):
        return "_".join(value) or "all"
    return str(value).replace(".", "p")


def source_name(point) -> str:
    """The point's name as a question source (1-40 of ``[A-Za-z0-9_-]``: ``.`` becomes ``p``,
    ``known_item-popular-3-0p1``; a kinds mix ``factual_procedural``); raises ``InvalidValue``
    when it cannot be one."""
    # defer heavy import
    from ragexp.data.golden import source_problem

    name = "-".join([point.generator, *(_shown(v) for _, v in point.settings)])
    if source_problem(name):
        raise InvalidValue(f"calibration point {point.name}: {name!r} cannot name a question "
                           f"source (1-40 letters, digits, '_' or '-'); use shorter values")
    return name


def cmd_sets(args) -> int:
    """``calibrate sets``: each grid point's questions into ``--out/<source name>.jsonl``, each
    question's ``source`` that name, its kinds mix asked for in turn."""
    # defer heavy import
    from hydra.utils import instantiate

    # defer heavy import
    from ragexp.generate.generation import Settings, generate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = None
    for point in load_grid(args.grid):
        name = source_name(point)
        cfg = compose(point.generator, [*args.overrides, *point.overrides], args.config_dir)
        docs = docs if docs is not None else documents(cfg.dataset)
        summary = generate(docs, instantiate(cfg.generator),
                           Settings(n=args.n, seed=args.seed, kinds=point.kinds,
                                    min_words=cfg.min_words, max_words=cfg.max_words,
                                    draws=cfg.draws, batch=cfg.batch, source=name),
                           out / f"{name}.jsonl", progress=False)
        print(f"{name}: {summary.line()}")
    print(f"next: a pilot sweep scoring them beside your questions, e.g. python -m ragexp -m "
          f"'+ablation=default,bm25,hybrid,no_reranker' 'dataset.questions=[HAND,{out}]' "
          f"split=all; then ragexp questions calibrate choose")
    return 0


def cmd_choose(args) -> int:
    """``calibrate choose``: the grid point chosen on the sweep's tables, printed and written
    to ``--write``; ``InvalidValue`` when the sweep scored none of the grid's sets."""
    # defer heavy import
    import yaml

    # defer heavy import
    from ragexp.decide import calibrate, compare, sources
    from ragexp.report.sweep_data import latest_sweep
    from ragexp.tracking import store as tracking

    parent = tracking.resolve_run_id(args.parent) if args.parent else latest_sweep(
        args.experiment or tracking.default_experiment())
    df = compare.runs_frame(tracking.experiment_name_of(parent), parent=parent)
    tables = {r: compare.per_question(r) for r in df["run_id"]}
    have = set(sources.sources_of(next(iter(tables.values()))))
    points = {source_name(p): p for p in load_grid(args.grid)}
    scored = [name for name in points if name in have]
    if not scored:
        raise InvalidValue(f"sweep {parent[:8]} scored none of the grid's sets (its sources: "
                           f"{', '.join(sorted(have))}): write them with ragexp questions "
                           f"calibrate sets --out DIR and sweep with dataset.questions=[HAND,DIR]")
    result = calibrate.calibrate(tables, scored, args.measure, args.hand, args.seed)
    print(f"pilot sweep {parent[:8]}: {counted(len(tables), 'run')}; {args.hand} questions split "
          f"(seed {args.seed}) into {result.n_tune} to tune and {result.n_check} to check; "
          f"{args.measure}\n\n| set | tau on the tuning half |\n|---|---|")
    for name in scored:
        mark = " (chosen)" if name == result.chosen else ""
        tau = result.tuning[name]
        print(f"| {name}{mark} | {'n/a' if math.isnan(tau) else f'{tau:+.2f}'} |")
    check = sources.interval(result.check)
    print(f"\nchosen: {result.chosen}; on the check half, Kendall's tau {check} (95% "
          f"bootstrap over questions, {result.check.defined} resamples defined)")
    point = points[result.chosen]
    Path(args.write).write_text(
        f"# ragexp questions calibrate choose: sweep {parent}, {args.measure}, tau on the "
        f"check half {check}\n"
        + yaml.safe_dump({"generator": point.generator, "overrides": point.overrides,
                          **({"kinds": list(point.kinds)} if point.kinds else {})},
                         sort_keys=False), encoding="utf-8")
    print(f"wrote {args.write}: ragexp questions generate --settings {args.write} ... writes "
          f"with these settings")
    return 0


def add_parser(qsub) -> None:
    """``questions calibrate sets|choose``, added to the ``questions`` subcommands."""
    # defer heavy import
    from ragexp.cli import helptext

    c = qsub.add_parser("calibrate", help="choose generator settings whose questions rank a "
                        "pilot sweep's configurations as your own questions do")
    csub = c.add_subparsers(dest="calibrate_cmd", required=True)
    s = csub.add_parser("sets", help="write one question set per grid point into --out",
                        formatter_class=helptext.Defaults)
    s.add_argument("--out", required=True, help="folder of the sets (one .jsonl per point)")
    s.add_argument("--n", type=int, default=200, help="questions per set")
    s.add_argument("--seed", type=int, default=0, help="seed of each set's passages and draws")
    s.add_argument("--grid", help="the grid (default: the shipped conf/calibrate.yaml)")
    s.add_argument("--config-dir", metavar="DIR", help="a project's own config folder")
    s.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides of conf/questions.yaml: dataset=markdown "
                        "dataset.corpus_dir=DIR")
    s.set_defaults(fn=cmd_sets)
    h = csub.add_parser("choose", help="from a pilot sweep that scored the sets, the point "
                        "agreeing best with a tuning half of your questions",
                        formatter_class=helptext.Defaults)
    h.add_argument("--parent", help="the pilot sweep's parent run id or a unique prefix "
                   "(default: the experiment's latest finished sweep)")
    h.add_argument("--experiment", help="where the latest sweep is looked for")
    h.add_argument("--hand", default="hand", help="the source of your own questions")
    h.add_argument("--measure", default="nDCG@10", help="the measure ranking the runs")
    h.add_argument("--seed", type=int, default=0, help="seed of the tuning/check split")
    h.add_argument("--grid", help="the grid the sets were written from")
    h.add_argument("--write", default="calibrated.yaml", help="file of the chosen settings")
    h.set_defaults(fn=cmd_choose)

