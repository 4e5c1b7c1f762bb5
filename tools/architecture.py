"""``make architecture``: ``docs/architecture.md``, written from the source so it cannot go stale.

    python -m tools.architecture [--out docs/architecture.md]

For each package of ``ragexp.LAYERS``, in that order: its ``__init__`` docstring, its modules with
the first sentence of each one's docstring, and the packages it imports. Imports are read with
``ast``, never by importing: every ``import`` and ``from ... import`` of a ragexp module counts,
those inside functions too. Then the repository around the package (``tools/``, ``conf/``,
``corpus/``, ``golden/``, ``tests/``), listed from the files themselves. Without ``--out`` the
page goes to stdout; ``tests/unit/test_docs.py`` checks that the committed page is what ``render``
returns.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ragexp"
ROOT_MODULES = ("records", "errors", "settings", "legacy", "session")  # shared by every package
COMMAND = "make architecture"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _md(text: str) -> str:
    """reST inline markup of a docstring as markdown: ``x`` -> `x`, :func:`x` -> `x`."""
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", text.replace("``", "`"))


def docstring(path: Path) -> str:
    """A module's whole docstring, paragraphs unwrapped, as markdown ('' when it has none)."""
    doc = ast.get_docstring(_tree(path)) or ""
    paragraphs = [p for p in doc.split("\n\n") if p.strip()]
    out = []
    for p in paragraphs:
        lines = p.splitlines()
        if lines[0].startswith("- "):  # a list: one item per line, continuation lines joined
            items: list[str] = []
            for ln in lines:
                if ln.startswith("- ") or not items:
                    items.append(ln.strip())
                else:
                    items[-1] += " " + ln.strip()
            out.append("\n".join(items))
        elif all(ln.startswith("    ") for ln in lines):  # an example command
            out.append("```\n" + "\n".join(ln[4:] for ln in lines) + "\n```")
        else:
            out.append(" ".join(ln.strip() for ln in lines))
    return _md("\n\n".join(out))


def summary(path: Path) -> str:
    """The first sentence of a module's docstring (its first paragraph, unwrapped)."""
    paragraphs = (ast.get_docstring(_tree(path)) or "").split("\n\n")
    first = " ".join(paragraphs[0].split())
    if not first:
        return "(no docstring)"
    if first[-1] not in ".!?:" and len(paragraphs) > 1 and paragraphs[1].startswith("- "):
        # a sentence that goes on into a list: "... graded for" + "- **groundedness**: ..."
        items = [i.strip() for i in " ".join(paragraphs[1].split()).split("- ") if i.strip()]
        first = f"{first} {' '.join(items).rstrip(';,')}."
    return _md(re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", first, maxsplit=1)[0])


def layers() -> tuple[str, ...]:
    """``ragexp.LAYERS``, read from ``src/ragexp/__init__.py`` without importing it."""
    for node in _tree(SRC / "__init__.py").body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS"
                                                for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError(f"{SRC / '__init__.py'}: no LAYERS")


def _owner(dotted: str) -> str | None:
    """The package (or shared root module) a ragexp module path belongs to."""
    parts = dotted.split(".")
    if parts[0] != "ragexp":
        return None
    if len(parts) == 1:
        return "ragexp"
    return parts[1]


def imports_of(path: Path) -> set[str]:
    """The packages and shared root modules that one file imports (every import statement)."""
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {o for a in node.names if (o := _owner(a.name))}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "ragexp":  # from ragexp import legacy / __version__
                out |= {a.name if a.name in ROOT_MODULES else "ragexp" for a in node.names}
            elif (o := _owner(node.module)):
                out.add(o)
    return out


def graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """``{package: packages and root modules it imports}``, itself left out."""
    return {pkg: set().union(*(imports_of(p) for p in sorted((SRC / pkg).rglob("*.py"))))
            - {pkg} for pkg in packages}


def _names(items, order: list[str]) -> str:
    ranked = sorted(items, key=lambda n: (order.index(n) if n in order else len(order), n))
    return ", ".join(f"`{n}`" for n in ranked) or "nothing"


def _modules(folder: Path, prefix: str, deep: bool = True) -> list[str]:
    """One line per module of ``folder`` and, ``deep``, of its subpackages
    (``stages/fusion/rank.py``; a subpackage's ``__init__`` too): a link from ``docs/`` and its
    docstring's summary."""
    found = folder.rglob("*.py") if deep else folder.glob("*.py")
    return [f"- [`{prefix}{p.relative_to(folder).as_posix()}`](../{p.relative_to(ROOT).as_posix()})"
            f": {summary(p)}" for p in sorted(found) if p != folder / "__init__.py"]


def _options(group: Path) -> str:
    names = sorted(p.relative_to(group).with_suffix("").as_posix() for p in group.rglob("*.yaml"))
    return ", ".join(f"`{n}`" for n in names)


def _jsonl_records(path: Path) -> int:
    return sum(1 for ln in path.read_text(encoding="utf-8").splitlines()
               if ln.strip() and not ln.lstrip().startswith("//"))


def render() -> str:
    """The whole page, as ``make architecture`` writes it."""
    order = layers()
    deps = graph(order)
    shared = ["ragexp", *ROOT_MODULES]
    rank = [*shared, *order]
    used_by = {pkg: {p for p, d in deps.items() if pkg in d} for pkg in rank}
    out = [
        "# Architecture",
        "",
        f"Generated by `{COMMAND}` (`python -m tools.architecture --out docs/architecture.md`) "
        "from the source: each package's `__init__` docstring, its modules with the first "
        "sentence of each one's docstring, and the imports between packages read with `ast` "
        "(every import statement counts, those inside functions too). "
        "`tests/unit/test_docs.py` fails when this page differs from what the command writes.",
        "",
        "## The package",
        "",
        docstring(SRC / "__init__.py"),
        "",
        "Shared by every package, at the top of `src/ragexp/`:",
        "",
        *_modules(SRC, "", deep=False),
        "",
        "## Imports between packages",
        "",
        "In the order data flows (`ragexp.LAYERS`, bottom first); `ragexp` is the package's own "
        "`__init__` (its version). `tests/unit/test_architecture.py` holds that no package imports "
        "one after it and that no import cycle joins two modules.",
        "",
        "| package | imports | imported by |",
        "|---|---|---|",
    ]
    out += [f"| `{pkg}` | {_names(deps[pkg], rank)} | {_names(used_by[pkg], rank)} |"
            for pkg in order]
    for m in shared:
        own = imports_of(SRC / ("__init__.py" if m == "ragexp" else f"{m}.py")) - {m}
        out.append(f"| `{m}` (shared) | {_names(own, rank)} | {_names(used_by[m], rank)} |")
    for i, pkg in enumerate(order, 1):
        out += ["", f"## {i}. `ragexp.{pkg}`", "", docstring(SRC / pkg / "__init__.py"), "",
                f"Imports: {_names(deps[pkg], rank)}.", "", *_modules(SRC / pkg, f"{pkg}/")]
    conf = ROOT / "conf"
    groups = sorted(p for p in conf.iterdir() if p.is_dir())
    corpus = sorted(p for p in (ROOT / "corpus").iterdir() if not p.name.startswith("."))
    golden = sorted((ROOT / "golden").rglob("*.jsonl"))
    tests = ROOT / "tests"
    out += [
        "", "## Around the package", "",
        "The repository root is itself a ragexp workspace: config groups, a corpus and its "
        "golden set beside the code, and `mlruns/` (git-ignored) where runs go.", "",
        "### `tools/`", "",
        "Not the product: benchmarks, synthetic data, the writers of the docs' regenerated "
        "blocks, screenshots. Not in the wheel; run from the repository root as "
        "`python -m tools.NAME` or through the `make` targets.", "",
        *_modules(ROOT / "tools", "tools/", deep=False),
        "", "### `conf/`", "",
        "Hydra's config groups, one folder per stage, and the primary config `config.yaml` "
        "(the wheel carries them as `ragexp/shipped/conf`; see [config groups](config.md)):", "",
        *[f"- `{g.name}/`: {_options(g)}" for g in groups],
        "", "### `corpus/` and `golden/`", "",
        "The example handbook of Brindle, a fictional job queue: markdown documents under "
        "`corpus/`, its golden set under `golden/` (the wheel carries both, as "
        "`ragexp/shipped/corpus` and `ragexp/shipped/golden`; see [input files](inputs.md), and the counts per kind in "
        "[results](results.md)).", "",
        "- `corpus/`: " + ", ".join(f"`{p.name}{'/' if p.is_dir() else ''}`" for p in corpus),
        "- `golden/`: " + ", ".join(f"`{p.relative_to(ROOT / 'golden').as_posix()}`"
                                   for p in golden),
        "", "### `tests/`", "",
        "One `test_*.py` module per subject, in tiers by folder: `unit/` (in the test's "
        "process), `contract/` (one contract per protocol, which every implementation "
        "inherits), `e2e/` (child processes, servers, browsers: all marked `slow`, which "
        "`make test-fast` leaves out); `fixtures/`, and the shared helpers:", "",
        *[f"- `tests/{p.name}`: {summary(p)}" for p in sorted(tests.glob("*.py"))
          if not p.name.startswith("test_")],
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.architecture",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the page here (default: stdout)")
    args = p.parse_args(argv)
    page = render()
    if args.out:
        Path(args.out).write_text(page, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
