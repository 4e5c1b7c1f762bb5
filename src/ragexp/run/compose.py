"""Compose the runner's config outside its Hydra app, as ``python -m ragexp [--config-dir DIR]
OVERRIDES`` composes it: for the commands that read a run's config without running it
(``ragexp embed``, ``ragexp questions generate``, the markdown tables of ``ragexp report``).

Hydra's ``--config-dir DIR`` adds a project's folder to the search path *after* the app's own
config folder (before the structured schemas: ``hydra._internal.utils.run_and_report``'s
``add_conf_dir``), so a shipped file wins over a project's file of the same name: a project
adds options (``dataset/mine.yaml``), it does not replace shipped ones. ``hydra.searchpath``
puts the folder in that same place, so these commands compose exactly what the runner runs
(``tests/test_config_dir.py`` compares them with the runner's ``--cfg job``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.data import shipped
from ragexp.errors import MissingInput, path_problem

log = logging.getLogger("ragexp")


def task_overrides(hydra_node: DictConfig) -> list[str]:
    """The command's overrides as typed (``hydra.overrides.task`` of a composed config, or
    ``HydraConfig.get()``), unresolved: Hydra keeps ``k=${nosuch}`` as text, and reading the
    list through OmegaConf resolved each as an interpolation, so a sweep stopped on "Interpolation
    key 'nosuch' not found" naming neither the key nor the job."""
    return [str(o) for o in OmegaConf.to_container(hydra_node.overrides.task, resolve=False)]


@lru_cache(maxsize=8)
def warn_shadowed(sources: tuple[tuple[str, str, str], ...]) -> list[str]:
    """Warn, once per process, of each yaml of a folder added to the search path (``--config-dir
    DIR``: Hydra's ``command-line`` provider, or ``hydra.searchpath``) that has the same path
    as a shipped one: Hydra reads the shipped folder first, so that file of the project is
    never used (a trial: a project's ``ablation/bm25.yaml`` ran as the shipped BM25, silently).
    ``sources``: Hydra's ``runtime.config_sources`` as ``(provider, schema, path)``. Returns the
    warnings."""
    shipped_root = Path(shipped.conf_dir()).resolve()
    out = []
    for provider, scheme, path in sources:
        root = Path(path).resolve()
        if provider == "main" or scheme != "file" or root == shipped_root or not root.is_dir():
            continue
        for f in sorted(root.rglob("*.yaml")):
            rel = f.relative_to(root)
            if (shipped_root / rel).is_file():
                out.append(f"{f} is not used: the shipped {rel.as_posix()} has that name and "
                           f"Hydra reads the shipped config folder first; give yours a name of "
                           f"its own")
    for line in out:
        log.warning("%s", line)
    return out


def project_dir(config_dir: str | Path | None) -> Path | None:
    """``config_dir`` as an absolute folder, or None for None. Raises ``MissingInput`` naming
    ``--config-dir`` when it is not a folder."""
    if config_dir is None:
        return None
    problem = path_problem(config_dir, "dir")
    if problem:
        raise MissingInput(f"--config-dir {config_dir}: {problem}")
    return Path(config_dir).expanduser().resolve()


def compose(config_name: str, overrides: Sequence[str],
            config_dir: str | Path | None = None) -> DictConfig:
    """The config ``config_name`` (``config``, ``questions``) with ``overrides``, from the
    shipped config groups and, when given, the project's ``config_dir`` after them (module
    docstring). Raises ``MissingInput`` for a ``config_dir`` that is no folder, and Hydra's
    ``HydraException`` (or OmegaConf's errors) for an override it refuses, as the runner
    does."""
    # defer heavy import
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    project = project_dir(config_dir)
    search = [f"hydra.searchpath=[{project.as_uri()}]"] if project is not None else []
    if project is not None:
        warn_shadowed((("command-line", "file", str(project)),))
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        return hydra_compose(config_name, overrides=[*search, *overrides])
