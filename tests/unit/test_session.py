"""No process-global mutable state outside the session object (``ragexp.session.Session``): read
from the source with ``ast``, no module (or class body) of ``src/ragexp`` binds a name to a
mutable container that any code changes, no container held under a lower-case name (state by
its name: ``_said = set()``), and no function declares ``global``. A container bound once and
only read (``EXAMPLES = {...}``, a translation table) is a constant, not state. The check is by
name, across modules, and counts an alias as a change (``known = _TERMS``: the alias may be
written), so it errs towards failing."""

from __future__ import annotations

import ast
from pathlib import Path

import ragexp
from ragexp.session import Session

SRC = Path(ragexp.__file__).resolve().parent
SESSION = SRC / "session.py"
CONTAINERS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
            "remove", "discard", "clear", "appendleft", "extendleft", "sort", "reverse",
            "__setitem__", "__delitem__"}
# Declarations filled once while their module is imported, and never changed after: what they
# hold is code (every import fills them the same way), not what a process did.
ALLOWED = {
    # measure families, each registered by ``register`` in the same module as it is declared
    ("ragexp.evaluation.measures", "FAMILIES"),
    # cross-field rules, each registered by the ``cross_field_rule`` decorator at import
    ("ragexp.settings", "RULES"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def mutable(value: ast.AST | None) -> bool:
    """Whether ``value`` makes a new mutable container: a display, a comprehension, or a call
    of a container type (``dict.fromkeys`` too)."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return func.value.id in CONTAINERS  # dict.fromkeys(...), collections.deque(...)
        return isinstance(func, ast.Name) and func.id in CONTAINERS
    return False


def bindings(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of each name a module's body, or a class body in it, binds to a new
    mutable container."""
    bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    out = []
    for body in bodies:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and mutable(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out += [(t.id, node.lineno) for t in targets if isinstance(t, ast.Name)]
    return out


def named(node: ast.AST) -> str | None:
    """The name ``node`` refers to: ``NAME`` or ``module.NAME``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def changed_names(tree: ast.Module) -> set[str]:
    """Names a module changes in place, re-binds with ``global``, or aliases."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            out |= set(node.names)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(named(node.value))
        elif isinstance(node, ast.AugAssign):
            out.add(named(node.target.value if isinstance(node.target, ast.Subscript)
                          else node.target))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in MUTATORS:
            out.add(named(node.func.value))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            out |= {named(v) for v in values}  # an alias: it may be written through
    return out - {None}


def problems(sources: dict[str, str]) -> list[str]:
    """Each module-level mutable binding that is state, and each ``global`` statement, of the
    modules ``{name: source}``: ``module:line: why``."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    changed = set().union(*(changed_names(t) for t in trees.values()))
    found = []
    for module, tree in trees.items():
        for name, line in bindings(tree):
            if (module, name) in ALLOWED:
                continue
            if name in changed:
                found.append(f"{module}:{line}: {name} is changed after import")
            elif not name.lstrip("_").isupper():
                found.append(f"{module}:{line}: {name} is a container under a variable's name")
        found += [f"{module}:{node.lineno}: global {', '.join(node.names)}"
                  for node in ast.walk(tree) if isinstance(node, ast.Global)]
    return found


def test_no_module_keeps_mutable_state_outside_the_session():
    sources = {module_name(p): p.read_text() for p in sorted(SRC.rglob("*.py")) if p != SESSION}
    assert len(sources) > 100
    assert problems(sources) == [], "keep it in ragexp.session.Session"


def test_the_allowed_registries_are_still_declared_where_listed():
    sources = {module_name(p): p.read_text() for p in sorted(SRC.rglob("*.py"))}
    declared = {(m, name) for m, text in sources.items() for name, _ in bindings(ast.parse(text))}
    assert ALLOWED <= declared


def test_the_check_finds_each_kind_of_state():
    sources = {
        "pkg.cache": "_SEEN = {}\n\ndef see(k):\n    _SEEN[k] = 1\n",
        "pkg.flags": "_flags = []\n",
        "pkg.alias": "_MEMO = {}\n\ndef f(w):\n    known = _MEMO\n    return known.get(w)\n",
        "pkg.other": "from pkg import queue\n\ndef push(x):\n    queue.ITEMS.append(x)\n",
        "pkg.queue": "ITEMS = list()\n",
        "pkg.counter": "COUNT = 0\n\ndef bump():\n    global COUNT\n    COUNT += 1\n",
        "pkg.const": "KINDS = {'a': 1}\nTABLE = dict.fromkeys('ab')\n\ndef kind(k):\n"
                     "    return KINDS[k], TABLE.get(k)\n",
        "pkg.klass": "class C:\n    SEEN = set()\n\n    def f(self, x):\n        self.SEEN.add(x)\n",
    }
    found = problems(sources)
    assert [f.split(":")[0] for f in found] == [
        "pkg.cache", "pkg.flags", "pkg.alias", "pkg.queue", "pkg.counter", "pkg.klass"]
    assert "global COUNT" in found[-2]


def test_each_test_starts_with_a_fresh_session():
    session = Session.current()
    assert session.stages == {} and session.open_runs == {} and session.validated == set()
    session.stages["chunks"] = ("key", ["a chunk"])
    assert Session.current() is session
    assert Session.start() is Session.current() is not session
    assert Session.current().stages == {}


def test_a_sweep_job_reads_its_parent_run_from_its_own_config():
    """Once the sweep's parent run exists, every job config the launcher's loader composes
    holds ``sweep.parent`` (``jobs_under``), and the job reads it there (``parent_run``): in a
    joblib or submitit worker too, which composes each job from the loader it was given
    pickled (cloudpickle), not from state a callback carried or ``os.environ``."""
    import pickle

    import cloudpickle  # what joblib's loky and submitit pickle a launcher's context with
    from omegaconf import OmegaConf

    from ragexp.run.sweep import jobs_under, parent_run

    class Loader:
        def load_sweep_config(self, master_config, sweep_overrides):
            cfg = OmegaConf.create({"k": 10, "overrides": list(sweep_overrides)})
            OmegaConf.set_struct(cfg, True)  # as Hydra composes it
            return cfg

    loader = Loader()
    assert parent_run(loader.load_sweep_config(None, ["k=5"])) is None  # a single run's
    jobs_under(loader, "p" * 32)
    cfg = loader.load_sweep_config(None, ["k=5"])
    assert parent_run(cfg) == "p" * 32 and cfg.overrides == ["k=5"] and cfg.k == 10
    Session.start()  # the worker's own session: nothing in it
    worker = pickle.loads(cloudpickle.dumps(loader))
    assert parent_run(worker.load_sweep_config(None, ["k=7"])) == "p" * 32


def test_job_outcomes_come_from_the_store_and_status_files_fill_in(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from ragexp.run import sweep
    from ragexp.tracking import store as tracking

    def run(run_id, status, **tags):
        return SimpleNamespace(info=SimpleNamespace(run_id=run_id, status=status,
                                                    experiment_id="1"),
                               data=SimpleNamespace(tags=tags))

    children = [run("a", "FINISHED"), run("b", "KILLED"), run("c", "FAILED"),
                run("d", "FAILED", **{"ragexp.overrides": "k=4", "ragexp.error": "killed"})]
    client = SimpleNamespace(get_run=lambda rid: run(rid, "RUNNING"),
                             search_runs=lambda exps, query, max_results: children)
    monkeypatch.setattr(tracking, "client", lambda: client)
    files = [dict(status="FINISHED", run_id="a", overrides="k=0"),
             dict(status="RUNNING", run_id="b", overrides="k=1"),  # its worker was killed
             dict(status="PENDING_SYNC", run_id="c", overrides="k=2"),  # results only on disk
             dict(status="SKIPPED", run_id="old", overrides="k=3"),
             dict(status="FAILED", run_id=None, overrides="k=5", error="refused")]
    for i, status in enumerate(files):
        (tmp_path / str(i)).mkdir()
        tracking.write_status(tmp_path / str(i), **status)
    got = sweep.job_outcomes("parent", tmp_path)
    assert [(s["run_id"], s["status"], s["overrides"]) for s in got] == [
        ("a", "FINISHED", "k=0"), ("b", "KILLED", "k=1"), ("c", "PENDING_SYNC", "k=2"),
        ("old", "SKIPPED", "k=3"), (None, "FAILED", "k=5"), ("d", "FAILED", "k=4")]
    assert sweep.job_counts("parent", tmp_path) == {
        "finished": 1, "killed": 1, "pending_sync": 1, "skipped": 1, "failed": 2}
