"""``ragexp questions generate``: golden-format questions written from a dataset's documents
(``ragexp.generate``; ``docs/questions.md``)."""

from __future__ import annotations

import argparse

from ragexp.errors import RagexpError

GENERATORS = ("known_item", "llm")


def documents(dataset_cfg) -> list:
    """The documents of a composed ``dataset`` config: a markdown folder is read alone (no
    question file is needed to write questions for it); any other dataset is instantiated."""
    # defer heavy import
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    # defer heavy import
    from ragexp.data.golden import load_corpus

    corpus_dir = OmegaConf.select(dataset_cfg, "corpus_dir", default=None)
    if corpus_dir is not None:
        return list(load_corpus(corpus_dir).values())
    return instantiate(dataset_cfg).documents()


def compose(generator: str, overrides: list[str]):
    """``conf/questions.yaml`` with ``generator=<generator>`` and the overrides, its ranges
    checked (``run.validation.check_ranges``). Raises ``RagexpError`` on a bad override."""
    # defer heavy import
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    # defer heavy import
    from ragexp.run import schema, validation
    from ragexp.run.app import CONF_DIR

    schema.register()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra_compose("questions", overrides=[f"generator={generator}", *overrides])
    except (HydraException, OmegaConfBaseException) as exc:
        raise validation.ConfigRangeError(f"config: {' '.join(str(exc).split())}") from None
    problems = validation.check_ranges(cfg)
    if problems:
        raise validation.ConfigRangeError("invalid config: " + "; ".join(problems))
    return cfg


def cmd_generate(args) -> int:
    # defer heavy import
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    # defer heavy import
    from ragexp.generate.generation import Settings, check_settings, generate
    from ragexp.generate.outfile import QuestionFile

    # --kinds takes every word after it; an override (KEY=VALUE) there is one, never a kind
    kinds = [k for k in args.kinds or () if "=" not in k]
    cfg = compose(args.generator, [*args.overrides, *(k for k in args.kinds or () if "=" in k)])
    try:
        generator = instantiate(cfg.generator)  # an LLM generator checks its key here
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RagexpError):
            raise cause from None
        raise
    settings = Settings(n=args.n, seed=args.seed, kinds=tuple(kinds),
                        min_words=cfg.min_words, max_words=cfg.max_words, draws=cfg.draws,
                        batch=cfg.batch)
    check_settings(settings, generator)
    QuestionFile(args.out)  # a folder that cannot be written fails before the corpus is read
    docs = documents(cfg.dataset)
    summary = generate(docs, generator, settings, args.out, progress=cfg.progress)
    usage = getattr(generator, "usage", None)
    cost = generator.cost_usd() if usage else None
    calls = (f"; {usage['calls']} calls, {usage['tokens_in']} tokens in, {usage['tokens_out']} "
             f"out, {usage['retries']} retries" + (f", ${cost:.4f}" if cost is not None else "")
             if usage else "")
    print(f"{summary.line()}; {args.out} holds {summary.total} questions{calls}")
    return 0


def add_parser(sub) -> None:
    """The ``questions`` command group, added to ``ragexp``'s subcommands."""
    q = sub.add_parser("questions", help="generate golden-format questions from the corpus")
    qsub = q.add_subparsers(dest="questions_cmd", required=True)
    g = qsub.add_parser("generate", help="write questions from sampled passages into --out "
                        "(a rerun continues the file)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g.add_argument("--generator", choices=GENERATORS, default="known_item",
                   help="known_item: simulated known-item queries, offline; llm: an "
                        "OpenAI-compatible model (llm.* settings)")
    g.add_argument("--n", type=int, default=100, help="questions the file should hold")
    g.add_argument("--seed", type=int, default=0, help="seed of the passage sample and draws")
    g.add_argument("--kinds", nargs="+", metavar="KIND",
                   help="kinds to ask for, in turn (default: every kind the generator writes)")
    g.add_argument("--out", required=True, help="the .jsonl file written (continued if there)")
    g.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides of conf/questions.yaml, e.g. dataset=markdown "
                        "dataset.corpus_dir=DIR llm.model=NAME")
    g.set_defaults(fn=cmd_generate)
