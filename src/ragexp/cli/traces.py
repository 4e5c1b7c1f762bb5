"""``ragexp traces mine`` and ``ragexp traces accept``: served traces -> failure modes ->
candidate golden questions -> accepted golden questions (validated as the golden set is).

``mine`` reads the traces of the serving experiment (``mining.py``), embeds the flagged
questions with the embedder of the run that served them and places their chunks with that
run's chunker (both rebuilt from the run's ``config.yaml``, as serving does), prints one row per
failure mode and writes the candidates. ``accept`` appends the chosen candidates to a golden
file only if the golden set with them added passes ``golden.check_golden``; otherwise it prints
every problem, naming the candidate file and line, and changes nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from ragexp.cli import helptext
from ragexp.data import shipped
from ragexp.errors import NotFound, RagexpError
from ragexp.serving import mining, tracing

DEFAULT_OUT = "mined/candidates.jsonl"


def run_context(run_id: str):
    """``(embed, chunk_places)`` of a served run: its query embedder as a function texts ->
    array, and chunk id -> (document, heading) of its chunks. Raises ``ServingError`` when the
    run or its data cannot be found."""
    # defer heavy import
    from hydra.utils import instantiate

    # defer heavy import
    from ragexp.config import build as stages
    from ragexp.serving.engine import ServingError
    from ragexp.tracking import store as tracking

    try:
        run = tracking.client().get_run(tracking.resolve_run_id(run_id))
        cfg = OmegaConf.load(tracking.artifact_path(run.info.run_id, "config.yaml"))
    except Exception as exc:
        raise ServingError(f"cannot read run {run_id} that served the traces: {exc}") from exc
    cfg = stages.with_locations(cfg, run.data.tags)
    embedder = instantiate(cfg.embedder)
    chunks = instantiate(cfg.chunking).chunk(instantiate(cfg.dataset).documents())
    return (lambda texts: embedder.embed(texts, "query"),
            {c.chunk_id: (c.doc_id, c.heading) for c in chunks})


def cmd_mine(args) -> int:
    if args.run:  # a run that served, never a sweep's parent (which serves nothing)
        # defer heavy import
        from ragexp.tracking import store as tracking

        args.run = tracking.resolve_run_id(args.run)
        tracking.refuse_sweep_parent(tracking.client().get_run(args.run))
    served = mining.read(args.experiment, args.run, args.max_traces)
    flagged = [(s, why) for s in served if (why := mining.flags(s, args.min_overlap))]
    if not flagged:
        print(mining.table([], len(served), 0))
        print("nothing flagged: no candidates written")
        return 0
    run_id = args.run or Counter(s.run_id for s, _ in flagged).most_common(1)[0][0]
    embed, places = run_context(run_id)
    found = mining.modes(flagged, embed, args.distance)
    records = mining.candidates(found, places)
    mining.write_candidates(args.out, records)
    print(mining.table(found, len(served), len(flagged)))
    print(f"\nwrote {len(records)} candidate golden questions to {args.out}; check them, then "
          f"`ragexp traces accept {args.out} --into GOLDEN_FILE`")
    return 0


def accept(candidates: str | Path, into: str | Path, ids: list[str] | None, corpus: str,
           golden: list[str]) -> list[dict]:
    """Append the candidates named by ``ids`` (all when None) to ``into`` if the golden set
    ``golden`` plus ``into`` plus them passes ``golden.check_golden`` against ``corpus``.
    Returns the records added. Raises ``golden.GoldenError`` (problems named by the candidate
    file's lines) and ``KeyError`` for an id not in ``candidates``; writes nothing then."""
    # defer heavy import
    from ragexp.data import readers
    from ragexp.data.golden import GoldenError, Problem, check_golden, golden_files, load_corpus

    chosen, lines = [], []
    for lineno, raw in readers.lines(candidates):
        if raw.lstrip().startswith("//"):
            continue
        rec = readers.parse_json(raw, candidates, lineno)
        if ids is None or (isinstance(rec, dict) and rec.get("id") in ids):
            chosen.append(rec)
            lines.append(lineno)
    missing = sorted(set(ids or ()) - {r.get("id") for r in chosen if isinstance(r, dict)})
    if missing:
        raise NotFound(f"no candidate {', '.join(missing)} in {candidates}")
    into = Path(into)
    files = [f for f in golden_files(golden) if f.resolve() != into.resolve()]
    if into.exists():
        files.append(into)
    with tempfile.TemporaryDirectory(prefix="ragexp-accept-") as tmp:
        staged = Path(tmp) / "accepted.jsonl"
        staged.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chosen),
                          encoding="utf-8")
        _, problems = check_golden([*files, staged], load_corpus(corpus))
        mapped = [Problem(str(candidates), lines[p.line - 1], p.message)
                  if Path(p.file) == staged and 0 < p.line <= len(lines) else p
                  for p in problems]
    if mapped:
        raise GoldenError(mapped)
    into.parent.mkdir(parents=True, exist_ok=True)
    with open(into, "a", encoding="utf-8") as fh:
        for rec in chosen:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return chosen


def cmd_accept(args) -> int:
    try:
        added = accept(args.candidates, args.into, args.id, args.corpus, args.golden)
    except (RagexpError, FileNotFoundError) as exc:  # nothing accepted: exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"accepted {len(added)} question(s) into {args.into}: "
          f"{', '.join(r['id'] for r in added)}")
    return 0


def add_parser(sub) -> None:
    """The ``traces`` command group, added to ``ragexp``'s subcommands."""
    t = sub.add_parser("traces", help="mine served traces into candidate golden questions")
    tsub = t.add_subparsers(dest="traces_cmd", required=True)
    m = tsub.add_parser("mine", help="flag traces that look wrong, group them into failure "
                        "modes, write candidate golden questions",
                        formatter_class=helptext.Defaults)
    m.add_argument("--experiment", default=tracing.EXPERIMENT, help="where the traces are")
    m.add_argument("--run", help="only traces of this served run (id or unique prefix)")
    m.add_argument("--out", default=DEFAULT_OUT, help="candidate file (JSON lines)")
    m.add_argument("--min-overlap", type=float, default=mining.MIN_OVERLAP,
                   help="an answer holding less of the question's terms is flagged")
    m.add_argument("--distance", type=float, default=mining.DISTANCE,
                   help="cosine distance at which question clusters are cut")
    m.add_argument("--max-traces", type=int, default=None, help="newest traces read")
    m.set_defaults(fn=cmd_mine)
    a = tsub.add_parser("accept", help="add checked candidates to a golden file, validated "
                        "like the whole golden set", formatter_class=helptext.Defaults)
    a.add_argument("candidates", help="the file `traces mine` wrote (after your corrections)")
    a.add_argument("--into", required=True, help="golden file to append to (JSON lines)")
    a.add_argument("--id", action="append", help="accept only this candidate, repeatable")
    a.add_argument("--corpus", default=shipped.path("handbook/corpus"))
    a.add_argument("--golden", nargs="+", default=[shipped.path("handbook/golden")],
                   help="the golden set the accepted questions join (checked for duplicates)")
    a.set_defaults(fn=cmd_accept)
