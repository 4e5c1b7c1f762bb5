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

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from ragexp.data import shipped
from ragexp.errors import MissingInput


def project_dir(config_dir: str | Path | None) -> Path | None:
    """``config_dir`` as an absolute folder, or None for None. Raises ``MissingInput`` naming
    ``--config-dir`` when it is not a folder."""
    if config_dir is None:
        return None
    path = Path(config_dir).expanduser().resolve()
    if not path.is_dir():
        raise MissingInput(f"--config-dir {config_dir}: no such folder")
    return path


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
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        return hydra_compose(config_name, overrides=[*search, *overrides])
