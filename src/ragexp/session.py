"""What one ragexp process holds while it works, in one object: the store clients, the stage
memory, the loaded models, the runs it must end and the jobs of the sweep it runs.

Before, each of these was a module global of the package that used it (19 of them), so a test
had to know every one to start clean (``forget_memory()``, ``beir._LAST_CORPUS.clear()``, ...),
and a sweep told its jobs its parent run through ``os.environ`` (now each job's config holds it,
``sweep.parent``: ``run.sweep.jobs_under``). Now the entry points (``python
-m ragexp``, the ``ragexp`` script, ``python -m ragexp.cli.main``) ``start`` a session, each
test gets a fresh one (``tests/conftest.py``), and the code reaches it through
``Session.current()``: the chains from an entry point to a stage memory or a model are Hydra's
``instantiate`` and MLflow's callbacks, which take no extra argument. Where a chain is short the
session's part is passed down instead (``StageStore.memory``). ``tests/unit/test_session.py`` holds
that no module keeps mutable state of its own. This module is shared by every package
(``ragexp.LAYERS``) and imports none of them: the fields name their users' types loosely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar


@dataclass(eq=False)
class Session:
    """The state of one ragexp process (or test): every field starts empty, and only the
    module named beside it reads or changes it."""

    # tracking.store: tracking URI -> its MlflowClient, the store made ready once
    clients: dict[str, Any] = field(default_factory=dict)
    # tracking.store: (tracking URI, run id) -> the run's artifact root
    artifact_roots: dict[tuple[str, str], str] = field(default_factory=dict)
    # tracking.lifecycle: run id -> ``close(status, reason)``, the runs this session must end
    open_runs: dict[str, Callable[[str, str], None]] = field(default_factory=dict)
    # tracking.lifecycle: every run registered (``opened``), in order; those ended KILLED
    opened_runs: list[str] = field(default_factory=list)
    killed_runs: list[str] = field(default_factory=list)
    # tracking.lifecycle: the stop signals received; handlers and exit hook set; work done
    signals: list[int] = field(default_factory=list)
    handlers_installed: bool = False
    finishing: bool = False
    # index.stagestore: the latest value of each stage name, {stage: (key, value)}
    stages: dict[str, tuple[str, Any]] = field(default_factory=dict)
    # index.embedders: loaded fastembed models by what they were loaded from, oldest first
    models: dict[tuple, Any] = field(default_factory=dict)
    # data.datasets: the last markdown dataset read, {key: (documents, questions)}
    datasets: dict[tuple, tuple[dict, list]] = field(default_factory=dict)
    # data.beir: the last BEIR corpus read, {path: (sha256 of its bytes, documents)}
    corpora: dict[str, tuple[str, list]] = field(default_factory=dict)
    # data.golden: the warnings already said (a file's warning once, however often it is read)
    said: set[tuple] = field(default_factory=set)
    # run.run_folder: (a single run's folder, the topmost folder of its path it creates)
    run_folder: tuple[Path, Path] | None = None
    # run.sweep: the overrides of the jobs the sweep in progress composed and validated
    validated: set[tuple[str, ...]] = field(default_factory=set)
    # run.sweep: the sweep in progress (its SweepCallback), from its parent run's creation to
    # its end, for the entry point to end it when its sweeper stops (``run.app.entry``); its
    # jobs read their parent run from their own config (``sweep.parent``), not from here
    sweep: Any = None

    _current: ClassVar[Session | None] = None

    @classmethod
    def current(cls) -> Session:
        """The session this process works in: the one an entry point (or a test) started, else
        one made now (a process that entered ragexp otherwise: a joblib worker, a library
        user, a notebook)."""
        if cls._current is None:
            cls._current = cls()
        return cls._current

    @classmethod
    def start(cls) -> Session:
        """A fresh session, made the current one: what an entry point calls first, and a
        test's fixture before each test. The one it replaces is left to its holders (an exit
        hook still ends the runs it registered)."""
        cls._current = cls()
        return cls._current
