"""``make tables``: the golden set's counts and the ablations' result tables, regenerated from
the corpus and the MLflow store into a docs page's ``golden`` and ``results`` blocks.

    python -m tools.write_tables PAGE [--confirm] [--experiment NAME] [--overrides K=V ...]

Each block is checked before anything is measured, so a page without the markers fails at once.
"""

from __future__ import annotations

import argparse
import sys

from ragexp.cli.tables import build
from ragexp.data import shipped
from ragexp.data.golden import check_golden, counts_table, load_corpus
from tools.readme import check_block, replace_block


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.write_tables", description=__doc__)
    p.add_argument("page", help="the markdown page holding the golden and results blocks")
    p.add_argument("--experiment", default="ragexp-handbook")
    p.add_argument("--confirm", action="store_true",
                   help="confirm the dev winner on test first if it is not yet (ragexp confirm)")
    p.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                   help="the overrides the sweep added to every ablation (make sweep's)")
    args = p.parse_args(argv)
    for block in ("golden", "results"):
        check_block(args.page, block)
    docs = load_corpus(shipped.path("handbook/corpus"))
    queries, problems = check_golden([shipped.path("handbook/golden")], docs)
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return 1
    replace_block(args.page, "golden", "Printed by `make check-golden`:\n\n"
                  + counts_table(len(docs), queries))
    replace_block(args.page, "results", build(args.experiment, run_confirm=args.confirm,
                                              overrides=tuple(args.overrides)))
    print(f"wrote the golden and results blocks of {args.page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
