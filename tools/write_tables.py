"""``make tables``: the golden set's counts and the ablations' result tables, regenerated from
the corpus and the MLflow store into a docs page's ``golden`` and ``results`` blocks.

    python -m tools.write_tables PAGE [--confirm] [--experiment NAME] [--overrides K=V ...]
        [--readme README.md]

``--readme`` also writes the README's ``sources`` block: the certificate of the question sets in
short (each source's verdict, the tau between sources with its interval, a source not used and
why; the whole certificate is in the results block).

Each block is checked before anything is measured, so a page without the markers fails at once.
"""

from __future__ import annotations

import argparse
import sys

from ragexp.cli.decisions import certificate
from ragexp.cli.tables import ablation_runs, build
from ragexp.data import shipped
from ragexp.data.golden import check_golden, counts_table, load_corpus
from ragexp.decide import sources
from tools.readme import check_block, replace_block


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.write_tables", description=__doc__)
    p.add_argument("page", help="the markdown page holding the golden and results blocks")
    p.add_argument("--experiment", default="ragexp-handbook")
    p.add_argument("--confirm", action="store_true",
                   help="confirm the dev winner on test first if it is not yet (ragexp confirm)")
    p.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="the overrides the sweep added to every ablation (make sweep's)")
    p.add_argument("--readme", help="a page holding the sources block (the README)")
    args = p.parse_args(argv)
    for block in ("golden", "results"):
        check_block(args.page, block)
    if args.readme:
        check_block(args.readme, "sources")
    docs = load_corpus(shipped.path("handbook/corpus"))
    queries, problems = check_golden([shipped.path("handbook/golden")], docs)
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return 1
    replace_block(args.page, "golden", "Printed by `make check-golden`:\n\n"
                  + counts_table(len(docs), queries))
    replace_block(args.page, "results", build(args.experiment, run_confirm=args.confirm,
                                              overrides=tuple(args.overrides),
                                              command="make tables"))
    print(f"wrote the golden and results blocks of {args.page}", file=sys.stderr)
    if args.readme:
        df = ablation_runs(args.experiment, tuple(args.overrides))
        objective = str(df["params.objective"].iloc[0]) if "params.objective" in df else "nDCG@10"
        cert = certificate(df, objective)
        lines = ["- " + line for line in sources.summary(cert)] if cert else [
            "No question set is ranked by two ablations."]
        replace_block(args.readme, "sources", f"Printed by `make tables` (the certificate of "
                      f"the dev questions, {len(df)} ablations; the whole of it: "
                      f"[docs/results.md](docs/results.md)):\n\n" + "\n".join(lines))
        print(f"wrote the sources block of {args.readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
