"""The house by role: packages in the order data flows, no import cycle between modules, no
package importing one after it (``ragexp.LAYERS``), imports inside functions only to defer a
heavy import, and the wheel's package list matching the source tree. Read from the source with
``ast``: every import counts, those inside functions too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import ragexp

SRC = Path(ragexp.__file__).resolve().parent
ROOT = SRC.parents[1]
ROOT_MODULES = {"records", "errors", "settings", "legacy", "session"}  # shared by every package
DEFER_COMMENT = "# defer heavy import"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imported(node: ast.AST) -> list[str]:
    """The ragexp modules an import statement loads (``from ragexp.x import y`` -> ``ragexp.x.y``
    when that is a module, else ``ragexp.x``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "ragexp"]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
            node.module.split(".")[0] == "ragexp":
        out = []
        for a in node.names:
            sub = f"{node.module}.{a.name}"
            out.append(sub if sub in MODULES else node.module)
        return out
    return []


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            for target in imported(node):
                if target != name and target in MODULES:
                    graph[name].add(target)
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ROOT_MODULES:
        return -1
    if parts[1] == "__main__":  # ``python -m ragexp``: an entry point, above everything
        return len(ragexp.LAYERS)
    return ragexp.LAYERS.index(parts[1])


def test_every_package_is_a_declared_layer_and_few_modules_sit_at_the_top():
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert packages == set(ragexp.LAYERS)
    assert len(packages) >= 8
    top = sorted(p.name for p in SRC.glob("*.py"))
    # the package's own two, then only the shared modules every package may import
    assert top == sorted({"__init__.py", "__main__.py"} | {f"{m}.py" for m in ROOT_MODULES}), top
    for pkg in packages:
        doc = ast.get_docstring(ast.parse((SRC / pkg / "__init__.py").read_text()))
        assert doc and "import" in doc, f"ragexp.{pkg} says what it owns and may import"


def test_no_import_cycle_between_modules():
    graph = edges()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if n.startswith(m + ".") or m.startswith(n + "."):
                continue  # a package and its own modules
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_package_imports_one_after_it():
    wrong = [f"{m} imports {n}" for m, targets in edges().items() for n in sorted(targets)
             if layer(n) > layer(m)]
    assert not wrong, "\n".join(wrong)


def test_serving_imports_nothing_of_the_experiment_runner():
    """Serving ranks with ``stages.ranking`` and builds a run's stages with ``config.build``:
    no module of ``serving`` imports ``run`` (its pipeline, sweeps and pandas), although the
    layer rule would let it."""
    wrong = [f"{m} imports {n}" for m, targets in edges().items() if m.startswith("ragexp.serving")
             for n in sorted(targets) if n == "ragexp.run" or n.startswith("ragexp.run.")]
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow  # a fresh interpreter: what an import loads, with nothing loaded before
def test_importing_the_serving_engine_loads_no_pandas_and_no_runner():
    """What ``ragexp search``/``ask``/``serve`` import to build an engine, read in a fresh
    interpreter (``sys.modules``): neither pandas (1.3 s of the engine's import when it came
    with ``run.pipeline``) nor any module of ``ragexp.run``."""
    code = ("import sys\nimport ragexp.serving.engine\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'"
            " or m == 'ragexp.run' or m.startswith('ragexp.run.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_imports_inside_functions_only_defer_a_heavy_import():
    """Each import inside a function stands in a block of imports headed by the comment."""
    bare = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = [n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
            for node in body:
                above = node.lineno - 2  # index of the line above the statement
                while (prev := next((n for n in body if n.end_lineno - 1 == above), None)):
                    above = prev.lineno - 2
                if lines[above].strip() != DEFER_COMMENT:
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, f"imports inside functions without {DEFER_COMMENT!r}: {bare}"


def test_the_wheel_lists_every_package_and_no_tool():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    code_packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    data = {"ragexp.serving.static"} | {  # every folder of the shipped data, as a package
        "ragexp.shipped." + ".".join(d.relative_to(ROOT).parts)
        for top in ("conf", "corpus", "golden")
        for d in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]}
    assert set(config["packages"]) == code_packages | data
    assert {config["package-dir"][f"ragexp.shipped.{top}"] for top in
            ("conf", "corpus", "golden")} == {"conf", "corpus", "golden"}
    tools = {p.stem for p in (ROOT / "tools").glob("*.py")} - {"__init__"}
    assert tools and not tools & {p.stem for p in SRC.rglob("*.py")}
    from_tools = [m for m, p in MODULES.items() for node in ast.walk(ast.parse(p.read_text()))
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                      n.split(".")[0] == "tools" for n in
                      ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""]))]
    assert not from_tools, f"the product imports the tools: {from_tools}"


def test_every_error_ragexp_raises_derives_from_one_root():
    """``RagexpError`` is the root of every exception class ragexp defines (mixed into the
    builtin each derived from before), so ``ragexp`` catches one class for every verb; only
    ``Interrupted`` (SIGTERM, a ``BaseException`` like ``KeyboardInterrupt``) is no error."""
    import importlib
    import inspect

    from ragexp.errors import RagexpError

    outside = []
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for cls_name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and \
                    cls.__module__ == name and not issubclass(cls, RagexpError):
                outside.append(f"{name}.{cls_name}")
    assert outside == ["ragexp.tracking.lifecycle.Interrupted"]
    main = (SRC / "cli" / "main.py").read_text()
    assert "except RagexpError" in main

