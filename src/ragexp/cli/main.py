"""``ragexp``: compare runs, promote one, and serve it (``python -m ragexp`` runs experiments)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from ragexp import __version__, handed_over
from ragexp.cli import process
from ragexp.errors import RagexpError
from ragexp.run.console import reader_left
from ragexp.session import Session
from ragexp.tracking import lifecycle


def _engine(args, pyfunc: bool = False):
    """The engine of ``--run`` (``recorded_run``), else of the registered model's champion:
    with ``pyfunc`` (``serve``) loaded as MLflow loads the model (``load_engine``), else from
    the record its files hold (``model.recorded_model``: what its ``load_context`` rebuilds,
    without running the model's code; ``search`` and ``ask``). The record is read from the
    MLflow store in a forked child (``forked.Beside``) while this process imports what
    building the engine needs, which it did after MLflow's imports and lookups; this process
    imports no mlflow (docs/benchmarks.md: ``ragexp search`` 0.95x, on the champion 0.84x)."""
    if pyfunc and not args.run:
        # defer heavy import
        from ragexp.serving.model import load_engine

        return load_engine(args.model)
    # defer heavy import
    from ragexp.run.forked import Beside
    from ragexp.tracking import store

    what = f"reading run {args.run}" if args.run else f"reading {args.model}'s champion"
    with Beside(lambda: _record(args.run, args.model), what, fork=not store.opened()) as reading:
        # defer heavy import
        from ragexp.serving.engine import Engine

        record, version = reading.result()
    engine = Engine.from_record(record)
    if version is not None:
        engine.model_version = version  # what its traces record (tracing.for_engine)
    return engine


def _record(run: str | None, model: str):
    """``(record, model version)`` of ``--run`` (version None) or of ``model``'s champion."""
    if run:
        # defer heavy import
        from ragexp.serving.recorded import recorded_run

        return recorded_run(run), None
    # defer heavy import
    from ragexp.serving.model import recorded_model

    return recorded_model(model)


def _full_id(ref: str | None) -> str | None:
    """A run id as typed (full, or a unique prefix such as compare's 8 characters) -> full."""
    # defer heavy import
    from ragexp.tracking.store import resolve_run_id

    return resolve_run_id(ref) if ref else ref


def cmd_compare(args) -> int:
    # defer heavy import
    from ragexp.decide import compare
    from ragexp.evaluation import significance
    from ragexp.tracking import store as tracking

    args.parent, args.baseline = _full_id(args.parent), _full_id(args.baseline)
    args.runs = [_full_id(r) for r in args.runs] if args.runs else args.runs
    if args.experiment is None:  # a sweep's runs live in its parent's experiment
        args.experiment = (tracking.experiment_name_of(args.parent) if args.parent
                           else tracking.default_experiment())

    df = compare.runs_frame(args.experiment, parent=args.parent, run_ids=args.runs)
    if args.baseline and args.baseline not in set(df["run_id"]):
        df = compare.stacked([compare.runs_frame(args.experiment, run_ids=[args.baseline]),
                              df])
    wide = args.wide or args.format == "csv"  # machine-readable output: every column
    measures = tuple(args.measure or significance.DEFAULT_MEASURES)
    results = None
    if wide:
        tab = compare.table(df, per_kind=tuple(args.per_kind))
        if args.baseline:
            tab, results = compare.with_baseline(df, tab, args.baseline, measures,
                                                 args.correction, args.source)
    else:
        if args.baseline:
            results = compare.baseline_tests(df, args.baseline, measures, args.correction,
                                             args.source)
        sweep = _sweep_of(df, args.parent)
        tab = compare.compact(df, args.source, sweep.data.tags if sweep else None,
                              (results, args.baseline, measures[0]) if results else None)
    print(compare.render(tab, args.format, None if wide else compare.WIDTH))
    if wide and args.format == "markdown" and (note := compare.wide_note(df)):
        print(f"\n{note}")
    if args.parent and args.format == "markdown":
        certificate = _certificate_lines(args.parent, df)
        if certificate:
            print("\n" + "\n".join(certificate))
    if results and args.format == "markdown":
        print(f"\nPaired tests per measure and question kind, on the questions of source "
              f"{args.source or compare.deciding_source(df)}:\n")
        print(compare.render(significance.long_table(results, compare.run_labels(df))))
        print(f"\n{significance.note(args.correction, results, measures)}")
    if args.parent and args.format == "markdown":
        lines = compare.cost_lines(tracking.client().get_run(args.parent).data.tags,
                                   compare.run_labels(df))
        if lines:
            print("\n" + "\n".join(lines))
    if args.parent:  # on stderr: the csv and json outputs stay the table alone
        # defer heavy import
        from ragexp.report import sweep_data

        note = sweep_data.incomplete(tracking.client().get_run(args.parent))
        if note:
            print(f"note: {note}", file=sys.stderr)
    return 0


def _sweep_of(df, parent: str | None):
    """The MLflow run of the sweep the runs of ``df`` belong to (``--parent``, else the one
    parent every run shares), for its best and tied runs; None when there is none."""
    # defer heavy import
    from ragexp.tracking import store as tracking

    parents = set(df.get("tags.mlflow.parentRunId", [None] * len(df)))
    shared = parents.pop() if len(parents) == 1 else None
    sweep = parent or (shared if isinstance(shared, str) and shared else None)
    return tracking.client().get_run(sweep) if sweep else None


def _certificate_lines(parent_id: str, df) -> list[str]:
    """The certificate of sweep ``parent_id``'s question sets (``decide.compare.certificate_of``):
    the one it recorded, else computed from its runs ``df``."""
    # defer heavy import
    from ragexp.decide import compare

    doc = compare.certificate_of(parent_id, df)
    return [] if doc is None else list(doc["lines"])


def _rule(args, promoting: bool, non_inferior: bool = False):
    # defer heavy import
    from ragexp.decide.gate import Rule

    min_effect = args.min_effect if args.min_effect is not None else (
        0.0 if promoting and not non_inferior else None)
    # InvalidValue for a bad threshold: main prints it, exit 2
    return Rule(measures=tuple(args.measure or ("nDCG@10",)), margin=args.margin,
                min_effect=min_effect, alpha=args.alpha, correction=args.correction,
                refusal_slack=args.refusal_slack, non_inferior=non_inferior)


def cmd_init(args) -> int:
    # defer heavy import
    from ragexp.cli import init as starter

    # RagexpError: main, exit 2
    written = starter.init(args.dir, example=args.example, name=args.name)
    print(f"wrote {len(written)} files under {args.dir}")
    note = starter.renamed(Path(args.dir), args.name)
    if note:
        print(note)
    print(starter.next_steps(args.dir, args.example, args.name))
    return 0


def cmd_promote(args) -> int:
    # defer heavy import
    from ragexp.serving.promote import GateRefused, PromotionRefused, promote

    if (args.run_id is None) == (args.cheapest_tied is None):
        print("error: name a run to promote, or --cheapest-tied SWEEP (not both)",
              file=sys.stderr)
        return 2
    run_id = _full_id(args.run_id) if args.run_id else _cheapest_tied(args.cheapest_tied)
    if run_id is None:
        return 2
    rule = None
    if args.gate:  # the cheapest tied is promoted for being no worse, not for a gain
        rule = _rule(args, promoting=True, non_inferior=args.cheapest_tied is not None)
    try:
        _, message = promote(run_id, args.model, rule=rule)
    except PromotionRefused as exc:  # the gate's "no" exits 1, as `ragexp gate`; else 2
        print(f"refused: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, GateRefused) else 2
    # defer heavy import
    from ragexp.serving.model import mlflow_serve_command

    print(message)
    print(f"serve it with `ragexp serve`, or: {mlflow_serve_command(args.model)}")
    return 0


def _cheapest_tied(sweep: str) -> str | None:
    """The run a sweep's parent names as the cheapest tied with the best
    (``ragexp.cheapest_tied``, ``decide.selection``); None, with a one-line error, when it
    names none."""
    # defer heavy import
    from ragexp.tracking import store as tracking

    parent = tracking.client().get_run(_full_id(sweep))
    chosen = parent.data.tags.get("ragexp.cheapest_tied")
    if not chosen:
        tracking.refuse_sweep_child(parent.info.run_id)  # one of a sweep's runs: name the sweep
        tags = parent.data.tags
        left_out = {e["run_id"]: f"{e['label']}: {e['why']}"
                    for e in json.loads(tags.get("ragexp.cost_left_out", "[]"))}
        tied = {e["run_id"] for e in json.loads(tags.get("ragexp.tied_with_best", "[]"))}
        why = (f"every run tied with the best replays rankings or vectors made for the "
               f"evaluation's questions, so none can serve ({'; '.join(left_out.values())})"
               if tied and tied <= set(left_out) else
               "it ended before this ragexp, or no tied run logged a cost")
        print(f"error: sweep {sweep} names no cheapest run tied with the best (tag "
              f"ragexp.cheapest_tied): {why}; promote a run by its id", file=sys.stderr)
        return None
    # defer heavy import
    from ragexp.report import sweep_data

    note = sweep_data.incomplete(parent)
    if note:
        print(f"error: {note}; rerun the sweep (its finished jobs are skipped) or promote a "
              f"run by its id", file=sys.stderr)
        return None
    print(f"cheapest tied with the best in sweep {parent.info.run_id[:8]}: "
          f"{parent.data.tags.get('ragexp.cheapest_tied_label', chosen)} ({chosen[:8]})")
    return chosen


def cmd_gate(args) -> int:
    # defer heavy import
    from ragexp.decide import gate
    from ragexp.serving.engine import ServingError, champion_run_id

    rule = _rule(args, promoting=False)
    label = "run"
    run_id, reference = _full_id(args.run_id), args.against
    # defer heavy import
    from ragexp.tracking import store as tracking

    tracking.refuse_unusable(tracking.client().get_run(run_id))  # before the champion's
    if reference == "champion":
        try:
            reference, label = champion_run_id(args.model), "champion"
        except ServingError as exc:
            raise ServingError(str(exc).replace("or pass --run RUN_ID",
                                                "or pass --against RUN_ID")) from None
    else:
        reference = _full_id(reference)
    verdict = gate.evaluate(run_id, reference, rule, label)
    print(verdict.render(rule))
    return 0 if verdict.passed else 1


def cmd_confirm(args) -> int:
    # defer heavy import
    from ragexp.decide import compare
    from ragexp.evaluation import significance, stats
    from ragexp.run.confirm import confirm, shown

    measures = tuple(args.measure or significance.DEFAULT_MEASURES)
    args.run_id, args.baseline = _full_id(args.run_id), _full_id(args.baseline)
    table, tests, baseline = confirm(args.run_id, args.baseline, measures, args.correction)
    print(f"run {args.run_id[:8]} against baseline {baseline[:8]}, chosen on dev, evaluated on "
          f"the held-out test questions:\n")
    print(compare.render(shown(table)))
    print("\nPer kind on test:\n")
    names = compare.run_labels(compare.runs_frame("", run_ids=[args.run_id, baseline]))
    print(compare.render(significance.long_table({args.run_id: tests}, names)))
    print(f"\n{stats.correction_note(args.correction, 'the measures x (all + each kind) on test')}"
          f" Logged on run {args.run_id} as confirm.* metrics.")
    return 0


def cmd_search(args) -> int:
    # defer heavy import
    from ragexp.serving.inputs import check_k, check_question

    query, k = check_question(args.query, "query"), check_k(args.k)
    engine = _engine(args)
    hits = engine.search(query, k)
    for hit in hits:
        heading = f"  ({hit.heading})" if hit.heading else ""  # a heading-less document's
        print(f"{hit.rank:>2}. {hit.score:.4f}  {hit.chunk_id}{heading}")
        if args.show_text:
            print("    " + " ".join(hit.text.split())[:300])
    if not hits:
        print(f"no passage matched the query: {engine.why_none(query)}")
    print(f"(run {engine.run_id})")
    return 0


def cmd_ask(args) -> int:
    # defer heavy import
    from ragexp.serving.inputs import check_question

    question = check_question(args.question)
    engine = _engine(args)
    ans = engine.answer(question)
    if args.json:

        print(json.dumps({**asdict(ans), "run_id": engine.run_id}, indent=2))
        return 0
    print(ans.text + (f" ({ans.reason})" if ans.refused else ""))
    if not ans.refused:
        print("\nSources:")
        for src in ans.sources:
            print(f"  [{src.n}] {src.doc_id}" + (f" — {src.heading}" if src.heading else ""))
    print(f"\n(run {engine.run_id}; confidence {ans.signal:.3f}, refusal threshold "
          f"{ans.threshold:.3f})")
    return 0


def cmd_serve(args) -> int:
    # defer heavy import
    import uvicorn

    # defer heavy import
    from ragexp.serving.access import api_key_for, is_loopback
    from ragexp.serving.api import create_app

    key = api_key_for(args.host, args.api_key_env, args.insecure)  # before the slow start-up
    if key is None and not is_loopback(args.host):
        print(f"warning: serving on {args.host} without access control (--insecure)",
              file=sys.stderr)
    engine = _engine(args, pyfunc=True)  # the model as mlflow models serve loads it
    engine.tracer = _tracer(engine, args.traces)
    uvicorn.run(create_app(engine, api_key=key), host=args.host, port=args.port,
                log_level="info")
    return 0


def _tracer(engine, flag: bool | None):
    """The tracer ``serve`` uses: ``--traces/--no-traces`` if given, else the run config's
    ``traces.enabled`` (default on), into ``traces.experiment`` (default ``ragexp-serving``)."""
    # defer heavy import
    from ragexp.serving import tracing

    enabled, experiment = tracing.settings(engine.cfg)
    enabled = enabled if flag is None else flag
    tracer = tracing.for_engine(engine, enabled, experiment)
    print(f"traces: {'on, into experiment ' + experiment if enabled else 'off'}",
          file=sys.stderr)
    return tracer


def cmd_report(args) -> int:
    # defer heavy import
    from ragexp.tracking.store import default_experiment

    args.experiment = args.experiment or default_experiment()
    if not (args.html or args.chart):  # the markdown result tables
        # defer heavy import
        from ragexp.cli.tables import print_tables

        return print_tables(args.experiment, args.confirm, tuple(args.overrides),
                            args.config_dir)
    # defer heavy import
    from ragexp.report import html as report_html
    from ragexp.report import sweep_data

    out = Path(args.html) if args.html else None
    chart = Path(args.chart) if args.chart else None
    report_html.check_outputs(out, chart)  # the arguments first, before any lookup
    parent = _full_id(args.parent) if args.parent else sweep_data.latest_sweep(args.experiment)
    print(report_html.write(parent, out, chart, upload=bool(args.html) and not args.no_upload))
    return 0


def cmd_embed(args) -> int:
    # defer heavy import
    from hydra.errors import HydraException

    # defer heavy import
    from ragexp.config import validation
    from ragexp.config.compose import compose
    from ragexp.run import embed

    shard = embed.Shard.parse(args.shard)
    try:
        cfg = compose("config", list(args.overrides), args.config_dir)
    except HydraException as exc:
        print(f"error: {validation.composition_error(exc)}", file=sys.stderr)
        return 2
    print(embed.embed_shard(cfg, shard).line())
    return 0


def cmd_ui(args) -> int:
    # defer heavy import
    from ragexp.cli.ui import ui

    return ui(host=args.host, port=args.port)


DESCRIPTION = ("ragexp's commands: compare runs, confirm, gate and promote one, serve it, and "
               "more (below). Experiments themselves run with python -m ragexp [-m] "
               "[GROUP=OPTION ...]; python -m ragexp --help lists the config groups.")


def parser() -> argparse.ArgumentParser:
    """The ``ragexp`` command line: one subcommand per verb, each family added by its own
    function below, in the order ``ragexp --help`` lists them."""
    # defer heavy import
    from ragexp.tracking.store import MODEL_NAME

    p = argparse.ArgumentParser(prog="ragexp", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"ragexp {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_compare(sub)
    _add_init(sub)
    _add_promote_and_gate(sub, MODEL_NAME)
    _add_confirm(sub)
    _add_serving(sub, MODEL_NAME)
    _add_report(sub)
    _add_embed(sub)
    _add_ui(sub)
    # defer heavy import
    from ragexp.cli.runs import add_parser as add_runs

    add_runs(sub)
    # defer heavy import
    from ragexp.cli.traces import add_parser as add_traces

    add_traces(sub)
    # defer heavy import
    from ragexp.cli.calibrate import add_parser as add_calibrate
    from ragexp.cli.questions import add_parser as add_questions

    add_calibrate(add_questions(sub))
    return p


def _add_compare(sub) -> None:
    c = sub.add_parser("compare", help="table of runs; paired tests with --baseline")
    c.add_argument("--experiment", help="experiment to list (default: the --parent run's, "
                   "else the one holding this store's latest run)")
    c.add_argument("--parent", help="only the child runs of this sweep (parent run id; as "
                   "everywhere, a unique prefix of it will do)")
    c.add_argument("--runs", nargs="+", help="exactly these run ids (or unique prefixes)")
    c.add_argument("--baseline", help="run id (or unique prefix) to test every run against")
    c.add_argument("--format", choices=("markdown", "csv"), default="markdown",
                   help="csv: every column, as --wide (default markdown)")
    c.add_argument("--wide", action="store_true",
                   help="every column: the differing config keys, the main measures over every "
                        "question, per source and per kind, refusal rates, every paired-test "
                        "column (default: a table that fits 100 columns)")
    c.add_argument("--source", metavar="SOURCE",
                   help="the question source whose figures the default table shows and the "
                        "paired tests use: a source name, or all for every question (default: "
                        "the runs' objective_source, the one that decides)")
    c.add_argument("--per-kind", nargs="*", default=["rr_at_10"], metavar="METRIC",
                   help="metrics to break down per question kind (default: rr_at_10)")
    c.add_argument("--measure", action="append", metavar="M",
                   help="measure to test against the baseline, repeatable (default: "
                        "nDCG@10 and RR@10)")
    c.add_argument("--correction", choices=("holm", "bh"), default="holm",
                   help="multiple-testing correction over all the table's tests (default holm)")
    c.set_defaults(fn=cmd_compare)


def _add_init(sub) -> None:
    i = sub.add_parser("init", help="a starter project: conf/, docs/, questions.jsonl")
    i.add_argument("dir", nargs="?", default=".")
    i.add_argument("--example", action="store_true",
                   help="also copy the Brindle handbook and its questions, to run at once")
    i.add_argument("--name", help="the project's name (its dataset and ablation options), "
                   "instead of the folder's; folded to lowercase ASCII letters, digits and _")
    i.set_defaults(fn=cmd_init)


def _add_promote_and_gate(sub, model_name: str) -> None:
    """``promote`` and ``gate``, which share the gate's test settings."""
    pr = sub.add_parser("promote", help="log and register a run's serving model, alias "
                                        "champion")
    pr.add_argument("run_id", nargs="?", help="a run id or a unique prefix of one")
    pr.add_argument("--cheapest-tied", metavar="SWEEP",
                    help="promote the cheapest run tied with the best of this sweep (its "
                         "parent run id or a prefix; latency only when measurably lower, then "
                         "index bytes, then answer cost; else the best itself)")
    pr.add_argument("--gate", action="store_true",
                    help="refuse unless it passes the gate against the champion and its gain "
                         "is significant and at least --min-effect (default 0); with "
                         "--cheapest-tied, unless it is no worse than the champion beyond "
                         "--margin (95%% CI low >= -margin)")
    pr.add_argument("--model", default=model_name)
    pr.set_defaults(fn=cmd_promote)

    g = sub.add_parser("gate", help="exit 0 if a run is no significant regression against "
                                    "the champion (or --against RUN_ID), else 1")
    g.add_argument("run_id")
    g.add_argument("--against", default="champion", metavar="champion|RUN_ID")
    g.add_argument("--model", default=model_name)
    g.set_defaults(fn=cmd_gate)
    for s in (pr, g):
        s.add_argument("--measure", action="append", metavar="M",
                       help="measure to test, repeatable; the first decides promotion "
                            "(default nDCG@10)")
        s.add_argument("--margin", type=float, default=0.01,
                       help="drops up to this much never fail (default 0.01)")
        s.add_argument("--min-effect", type=float, default=None,
                       help="promotion: the least significant gain on the first measure")
        s.add_argument("--alpha", type=float, default=0.05)
        s.add_argument("--correction", choices=("holm", "bh"), default="holm")
        s.add_argument("--refusal-slack", type=float, default=0.05,
                       help="cross-validated answerable refusals may exceed the budget by this")


def _add_confirm(sub) -> None:
    cf = sub.add_parser("confirm", help="re-evaluate a run and its baseline on the held-out "
                                        "test questions; log the difference on the run")
    cf.add_argument("run_id")
    cf.add_argument("--baseline", help="run id (default: the run's sweep baseline job, else the "
                                       "champion)")
    cf.add_argument("--measure", action="append", metavar="M",
                    help="measure to test, repeatable (default nDCG@10 and RR@10)")
    cf.add_argument("--correction", choices=("holm", "bh"), default="holm")
    cf.set_defaults(fn=cmd_confirm)


def _add_serving(sub, model_name: str) -> None:
    """``search``, ``ask`` and ``serve``: each its own arguments, then which run it serves."""
    s = sub.add_parser("search", help="ranked chunks for a query")
    s.add_argument("query")
    s.add_argument("-k", type=int, default=5)
    s.add_argument("--show-text", action="store_true")
    _add_served_run(s, model_name, cmd_search)

    a = sub.add_parser("ask", help="an extractive, cited answer or a refusal")
    a.add_argument("question")
    a.add_argument("--json", action="store_true")
    _add_served_run(a, model_name, cmd_ask)

    v = sub.add_parser("serve", help="HTTP API (loopback unless keyed)")
    v.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; a non-loopback one needs --api-key-env or "
                        "--insecure")
    v.add_argument("--port", type=int, default=8000)
    v.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the API key (at least 16 characters) "
                        "that every request must send as 'Authorization: Bearer <key>'")
    v.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without an API key")
    v.add_argument("--traces", action=argparse.BooleanOptionalAction, default=None,
                   help="write an MLflow trace per /answer and /search (default: the run "
                        "config's traces.enabled, which defaults to on)")
    _add_served_run(v, model_name, cmd_serve)


def _add_served_run(s, model_name: str, fn) -> None:
    s.add_argument("--run", help="serve this run (id or unique prefix) instead of the champion")
    s.add_argument("--model", default=model_name)
    s.set_defaults(fn=fn)


def _add_report(sub) -> None:
    r = sub.add_parser("report", help="the result tables (markdown, as in docs/results.md); "
                                      "with --html OUT one standalone page for a sweep")
    r.add_argument("--experiment", help="where the runs are (default: the experiment holding "
                   "this store's latest run, so this folder's own)")
    r.add_argument("--html", metavar="OUT", help="write the sweep's page here (and log it as "
                   "report.html on the sweep's parent run)")
    r.add_argument("--chart", metavar="SVG", help="write the wins-by-kind chart here (an SVG "
                   "document, the page's own drawing)")
    r.add_argument("--parent", help="the sweep's parent run id or a unique prefix (default: the "
                   "experiment's latest sweep whose parent run is FINISHED; a sweep with a "
                   "failed or killed job is FAILED or KILLED: name it here to render it)")
    r.add_argument("--no-upload", action="store_true",
                   help="do not log report.html on the sweep's parent run")
    r.add_argument("--confirm", action="store_true", help="markdown tables: confirm the dev "
                   "winner on test first if it is not yet (ragexp confirm)")
    r.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="markdown tables: overrides the sweep added to every ablation")
    r.add_argument("--config-dir", metavar="DIR", help="markdown tables: a project's own "
                   "config folder, whose ablation/*.yaml join the shipped ones (default: "
                   "conf/ here, when it has ablation/)")
    r.set_defaults(fn=cmd_report)


def _add_embed(sub) -> None:
    e = sub.add_parser("embed", help="embed the dataset's passages and questions into the "
                                     "shared cache, one shard of N (docs/embedding.md)")
    e.add_argument("--shard", default="0/1", metavar="I/N",
                   help="shard I (from 0) of N, split by a stable hash of each text "
                        "(default 0/1: all)")
    e.add_argument("--config-dir", metavar="DIR", help="a project's own config folder, after "
                   "the shipped one (its options add to the shipped groups; one named as a "
                   "shipped option is not read), as python -m ragexp --config-dir DIR puts it "
                   "(pass the runs' own, so they find what this embeds)")
    e.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides, as for python -m ragexp (dataset=..., chunking=..., "
                        "embedder=...)")
    e.set_defaults(fn=cmd_embed)


def _add_ui(sub) -> None:
    u = sub.add_parser("ui", help="MLflow UI for the store runs go to (or the server's URL)")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=5000)
    u.set_defaults(fn=cmd_ui)


@lru_cache(maxsize=1)
def _commands() -> tuple[str, ...]:
    """The subcommand names, read once per process (building the parser takes 0.3 s, and
    ``python -m ragexp WORD`` asks ``is_command`` and ``near_command``)."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return tuple(sub.choices)


def near_command(word: str) -> str | None:
    """The command a bare lower-case ``word`` that is none (``compar``) most likely meant, or
    None (``difflib``'s closest match at its default cutoff): ``python -m ragexp compar`` says
    so in one line instead of Hydra's "Error parsing override"."""
    if word.startswith("-") or not word.replace("-", "").isalpha() or not word.islower():
        return None  # an option (--config-dir) is Hydra's
    # defer heavy import
    import difflib

    found = difflib.get_close_matches(word, _commands(), n=1)
    return found[0] if found and found[0] != word else None


def is_command(word: str) -> bool:
    """Whether ``word`` names one of ``ragexp``'s commands (``embed``, ``compare``, ...), so
    ``python -m ragexp WORD ...`` runs it (``ragexp.__main__``) rather than Hydra reading it
    as an override. Only a bare lower-case word builds the parser to ask: an override
    (``key=value``, ``-m``) never does."""
    if not word.replace("-", "").isalpha() or not word.islower():
        return False
    return word in _commands()


def main(argv: list[str] | None = None) -> int:
    """The ``ragexp`` command line (``argv``: its arguments, default ``sys.argv[1:]``); returns
    the exit code: 0, 1 (a check said no, or the output's reader left), 2 (refused input),
    128 + the signal when stopped. In a command's own process (``ragexp.handed_over``) a stop
    is recorded as it raises (``lifecycle.install_signal_handlers``; SIGTERM too, which ended
    the process by the signal without a word), so one that a library swallowed ("Exception
    ignored in ...", the command then ran on to exit 0) or wrapped (a ``RuntimeError`` from a
    class body's ``__set_name__``) still ends the command as a stop."""
    try:
        if handed_over():  # a stop from here is this function's (Ctrl-C: exit 130)
            lifecycle.install_signal_handlers()
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        args = parser().parse_args(argv)
        code = args.fn(args)
        sys.stdout.flush()  # a closed pipe raises here, inside the try
        if lifecycle.signal_received() is not None:  # swallowed on the way
            return _stopped(None)
        return code
    except BrokenPipeError:  # `ragexp compare --format csv | head -1`: the reader left
        reader_left()
        return 1
    except (KeyboardInterrupt, lifecycle.Interrupted) as exc:  # Ctrl-C; SIGTERM
        return _stopped(exc)  # a run it started is ended KILLED on the way (tracking.runs)
    except RagexpError as exc:  # every verb's user-facing errors: one line, exit 2
        if lifecycle.signal_received() is not None:
            return _stopped(exc)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if lifecycle.signal_received() is not None:  # a stop another error stands for
            return _stopped(exc)
        refusal = _refusal(exc)
        if refusal is None:
            raise
        print(f"error: {refusal}", file=sys.stderr)
        return 2


def _stopped(exc: BaseException | None) -> int:
    """The one line of a stopped command and its exit code, 128 + the signal (the one
    recorded, else the exception's, else SIGINT)."""
    sig = lifecycle.signal_received() or getattr(exc, "signum", signal.SIGINT)
    print(f"\nragexp: stopped by {signal.Signals(sig).name}", file=sys.stderr)
    return 128 + sig


def _refusal(exc: BaseException) -> RagexpError | None:
    """The ``RagexpError`` under Hydra's ``InstantiationException`` wrappers (a dataset or an
    embedder that ``instantiate`` built refused its input: ``ragexp embed`` on a question file
    with a quote not in its document, a precomputed folder with a NaN row), else None."""
    # defer heavy import
    from ragexp.tracking.failures import unwrapped

    root = unwrapped(exc)
    return root if isinstance(root, RagexpError) else None


def program() -> int:
    """The ``ragexp`` console script: ``main`` in a process it owns (``process.own``) and a
    session of its own (``Session.start``); once it returns, a stop changes nothing
    (``lifecycle.finishing``)."""
    process.own()
    Session.start()
    code = main()
    lifecycle.finishing()
    return code


if __name__ == "__main__":
    sys.exit(program())
