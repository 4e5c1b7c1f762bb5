"""``ragexp questions generate``: golden-format questions written from a dataset's documents
(``ragexp.generate``); ``ragexp questions plan``: how many a pilot sweep says are needed
(``decide.plan``); ``ragexp questions calibrate`` (``cli.calibrate``). ``docs/questions.md``."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

from ragexp.cli import helptext
from ragexp.errors import InvalidValue, RagexpError, counted, path_problem

GENERATORS = ("known_item", "structure", "llm")


def documents(dataset_cfg) -> list:
    """The documents of a composed ``dataset`` config, read alone: a markdown folder without
    its question files, a BEIR folder's ``corpus.jsonl`` without its queries and qrels (writing
    questions needs none of them: a BEIR folder without qrels was refused, "qrels file not
    found"); any other dataset is instantiated. Raises what the readers raise on bad input
    (``DataError``, ``BeirFormatError``: file and line)."""
    # defer heavy import
    from hydra.utils import get_class, instantiate
    from omegaconf import OmegaConf

    # defer heavy import
    from ragexp.data.beir import BeirFormatError, read_corpus
    from ragexp.data.datasets import BeirDataset
    from ragexp.data.golden import load_corpus

    corpus_dir = OmegaConf.select(dataset_cfg, "corpus_dir", default=None)
    if corpus_dir is not None:
        return list(load_corpus(corpus_dir).values())
    if issubclass(get_class(dataset_cfg._target_), BeirDataset):
        corpus = Path(dataset_cfg.path).expanduser() / "corpus.jsonl"
        if problem := path_problem(corpus, "file"):
            raise BeirFormatError(corpus, None, f"{problem}: questions are written from a BEIR "
                                  f"folder's corpus.jsonl (its queries and qrels are not read)")
        return read_corpus(corpus)
    return instantiate(dataset_cfg).documents()


def unread_keys(cfg) -> list[str]:
    """A top-level key of the composed ``conf/questions.yaml`` that is no setting of it
    (``+min_word=3``): refused, with the setting it is one slip from (``validation.typo_of``,
    the runner's rule for top-level keys) or the settings there are. Unlike a run, which logs
    a key of the user's own with its params, ``questions generate`` logs nothing: nothing would
    read it."""
    # defer heavy import
    from ragexp.config import schema, validation

    fields = [f.name for f in dataclasses.fields(schema.QuestionsConfig)]
    problems = []
    for key in cfg:
        if key in fields or key == "hydra":
            continue
        near = [f for f in fields if validation.typo_of(str(key), f)][:1]
        hint = f"did you mean {near[0]}?" if near else f"it takes {', '.join(fields)}"
        problems.append(f"{key} is not a setting of questions generate ({hint}): nothing would "
                        f"read it")
    return problems


def compose(generator: str, overrides: list[str], config_dir: str | None = None):
    """``conf/questions.yaml`` with ``generator=<generator>`` and the overrides, from the
    shipped config groups and the project's ``config_dir`` ahead of them
    (``config.compose``), its ranges checked (``config.validation.check_fields``, and
    ``min_words <= max_words``) and every key read: one appended at the top (``unread_keys``),
    in a stage with a ``_target_`` (``validation.targets_take_their_keys``:
    ``+generator.lamb``) or in a typed node (``validation.schemas_take_their_keys``:
    ``+llm.modle``), with the runner's "did you mean". Raises ``RagexpError`` on a bad override
    or a ``config_dir`` that is no folder."""
    # defer heavy import
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    # defer heavy import
    from ragexp import settings
    from ragexp.config import compose as composing
    from ragexp.config import schema, validation

    schema.register()
    try:
        cfg = composing.compose("questions", [f"generator={generator}", *overrides], config_dir)
    except (HydraException, OmegaConfBaseException) as exc:
        raise validation.ConfigRangeError(validation.composition_error(exc)) from None
    # a question shorter than min_words or longer than max_words is dropped: min_words=10
    # max_words=3 dropped every one, "add documents, raise draws or ask for fewer"
    problems = validation.check_fields(cfg) + settings.ordered(
        "min_words", cfg.min_words, "max_words", cfg.max_words, strict=False)
    problems += unread_keys(cfg) + validation.targets_take_their_keys(cfg)
    for key, node in validation.config_children(cfg):
        problems += validation.schemas_take_their_keys(node, f"{key}.")
    if problems:
        raise validation.ConfigRangeError("invalid config: " + "; ".join(problems))
    return cfg


def cmd_generate(args) -> int:
    # defer heavy import
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    # defer heavy import
    from ragexp.generate import circularity
    from ragexp.generate.generation import Settings, check_settings, generate
    from ragexp.generate.outfile import QuestionFile

    # --kinds takes every word after it; an override (KEY=VALUE) there is one, never a kind
    kinds = [k for k in args.kinds or () if "=" not in k]
    if args.settings and args.generator:
        raise InvalidValue(f"--settings {args.settings} names its generator: give --settings "
                           f"or --generator {args.generator}, not both")
    name, chosen, mix = (settings_overrides(args.settings) if args.settings
                         else (args.generator or "known_item", [], []))
    kinds = kinds or mix  # --kinds on the command line wins over the file's mix
    cfg = compose(name, [*chosen, *args.overrides, *(k for k in args.kinds or () if "=" in k)],
                  args.config_dir)
    try:
        generator = instantiate(cfg.generator)  # an LLM generator checks its key here
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RagexpError):
            raise cause from None
        raise
    settings = Settings(n=args.n, seed=args.seed, kinds=tuple(kinds),
                        min_words=cfg.min_words, max_words=cfg.max_words, draws=cfg.draws,
                        batch=cfg.batch, source=cfg.source)
    check_settings(settings, generator)
    QuestionFile(args.out)  # a folder that cannot be written fails before the corpus is read
    docs = documents(cfg.dataset)
    name = OmegaConf.select(cfg.dataset, "name", default=None)
    summary = generate(docs, generator, settings, args.out, progress=cfg.progress,
                       corpus=f"dataset {name!r}" if name else "this dataset")
    usage = getattr(generator, "usage", None)
    cost = generator.cost_usd() if usage else None
    calls = (f"; {usage['calls']} calls, {usage['tokens_in']} tokens in, {usage['tokens_out']} "
             f"out, {usage['retries']} retries" + (f", ${cost:.4f}" if cost is not None else "")
             if usage else "")
    print(f"{summary.line()}; {args.out} holds {counted(summary.total, 'question')}{calls}")
    if summary.short:
        print(f"warning: {args.out} holds {summary.short}", file=sys.stderr)
    if circular := circularity.generator_warning(generator.model, cfg.llm.model):
        print(f"warning: {circular}", file=sys.stderr)
    return 0


def cmd_plan(args) -> int:
    # defer heavy import
    import pandas as pd

    # defer heavy import
    from ragexp.decide import compare, plan, sources
    from ragexp.decide.selection import aligned_scores
    from ragexp.report.sweep_data import latest_sweep
    from ragexp.tracking import store as tracking

    parent = tracking.resolve_run_id(args.parent) if args.parent else latest_sweep(
        args.experiment or tracking.default_experiment())
    df = compare.runs_frame(tracking.experiment_name_of(parent), parent=parent)
    first = df.iloc[0]
    objective = str(first.get("params.objective") or "nDCG@10")
    source = compare.deciding_source(df)
    tables = {r: sources.deciding(compare.per_question(r), source) for r in df["run_id"]}
    scores, _ = aligned_scores(tables, objective)
    names = compare.run_labels(df)
    needs = plan.pair_needs(scores, args.top)
    have = len(next(iter(scores.values())))
    print(f"pilot sweep {parent[:8]}: {counted(len(scores), 'run')}, {counted(have, 'question')} "
          f"(objective_source={source}), {objective}; the top {min(args.top, len(scores))} by "
          f"mean, every pair, closest first:\n")
    rows = [{"better": names[p.a], "worse": names[p.b], f"Δ {objective}": f"{p.delta:+.3f}",
             "questions for 80% power": "never (no difference)" if math.isinf(p.needed)
             else "n/a (the same difference on every question)" if math.isnan(p.needed)
             else f"{p.needed:.0f}"} for p in needs]
    print(compare.render(pd.DataFrame(rows)))
    print(f"\n{plan.summary(needs, have)} (paired t-test power, alpha 0.05, the pilot's effect "
          f"sizes)")
    return 0


def settings_overrides(path: str) -> tuple[str, list[str], list[str]]:
    """``(generator, overrides, kinds)`` of a file ``calibrate choose`` wrote (``kinds`` its
    kinds mix, ``[]`` for every kind); raises ``InvalidValue`` naming the file when it is not
    one."""
    # defer heavy import
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidValue(f"--settings {path}: cannot read it ({exc})") from None
    if not (isinstance(data, dict) and isinstance(data.get("generator"), str)
            and isinstance(data.get("overrides"), list)
            and isinstance(data.get("kinds", []), list)):
        raise InvalidValue(f"--settings {path}: expected generator: NAME, overrides: [...] and "
                           f"optionally kinds: [...], as ragexp questions calibrate choose "
                           f"writes them")
    return (data["generator"], [str(o) for o in data["overrides"]],
            [str(k) for k in data.get("kinds", [])])


def cmd_check(args) -> int:
    """``ragexp questions check``: ``python -m ragexp.data.golden check`` under the command the
    docs name (exit 0, 1 naming each problem's file and line, 2 for an unreadable input)."""
    # defer heavy import
    from ragexp.data import golden

    argv = ["check", *(["--corpus", args.corpus] if args.corpus else []),
            *(["--golden", *args.golden] if args.golden else [])]
    return golden.main(argv)


def add_parser(sub):
    """The ``questions`` command group, added to ``ragexp``'s subcommands; returns its own
    subcommands (``cli.calibrate`` adds ``calibrate`` there)."""
    q = sub.add_parser("questions", help="check, generate and plan golden-format questions")
    qsub = q.add_subparsers(dest="questions_cmd", required=True)
    c = qsub.add_parser("check", help="validate question files against their corpus and print "
                        "the questions per kind (exit 1 naming each problem's file and line)")
    c.add_argument("--corpus", help="markdown folder (default: the shipped Brindle handbook)")
    c.add_argument("--golden", nargs="+", metavar="FILE_OR_DIR",
                   help="question files or folders (default: the handbook's golden set)")
    c.set_defaults(fn=cmd_check)
    g = qsub.add_parser("generate", help="write questions from sampled passages into --out "
                        "(a rerun continues the file)",
                        formatter_class=helptext.Defaults)
    g.add_argument("--generator", choices=GENERATORS, default=None,
                   help="known_item: simulated known-item queries, offline; structure: "
                        "questions from a markdown corpus's headings, definitions, tables, "
                        "steps and FAQ, offline; llm: an OpenAI-compatible model (llm.* "
                        "settings); known_item when neither it nor --settings is given")
    g.add_argument("--n", type=int, default=100, help="questions the file should hold")
    g.add_argument("--seed", type=int, default=0, help="seed of the passage sample and draws")
    g.add_argument("--kinds", nargs="+", metavar="KIND",
                   help="kinds to ask for, in turn (default: every kind the generator writes)")
    g.add_argument("--out", required=True, help="the .jsonl file written (continued if there)")
    g.add_argument("--settings", metavar="FILE", help="the generator and settings ragexp "
                   "questions calibrate choose wrote (instead of --generator)")
    g.add_argument("--config-dir", metavar="DIR", help="a project's own config folder (its "
                   "dataset/*.yaml, say), after the shipped one (one named as a shipped option "
                   "is not read), as python -m ragexp --config-dir DIR puts it")
    g.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides of conf/questions.yaml, e.g. dataset=markdown "
                        "dataset.corpus_dir=DIR llm.model=NAME")
    g.set_defaults(fn=cmd_generate)
    p = qsub.add_parser("plan", help="from a pilot sweep, the questions a paired test needs to "
                        "tell its top configurations apart (so how many to generate)",
                        formatter_class=helptext.Defaults)
    p.add_argument("--parent", help="the pilot sweep's parent run id or a unique prefix "
                   "(default: the experiment's latest sweep whose parent run is FINISHED)")
    p.add_argument("--experiment", help="where the latest sweep is looked for without "
                   "--parent (default: the experiment holding this store's latest run)")
    p.add_argument("--top", type=int, default=5, help="configurations compared, best first")
    p.set_defaults(fn=cmd_plan)
    return qsub
