"""The folder Hydra makes for a single run (``hydra.run.dir``, ``outputs/<date>/<time>/``), taken
away again when the run is refused before any work.

Hydra creates that folder, with ``.hydra/`` and the job's log file in it, before the task
starts, so every refused ``python -m ragexp k=0`` left one more folder with nothing of a run
in it. ``ThisRunsFolder`` (in ``hydra.callbacks``) notes, as the run starts and before Hydra
creates anything, whether the folder exists and which of its parents do not;
``remove_if_refused`` removes what this run created, only where the folder still holds nothing
but Hydra's own files. A sweep refused before its jobs launch leaves no folder to remove:
Hydra's launcher creates ``hydra.sweep.dir`` only as it launches the first job.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from ragexp.session import Session

# What Hydra writes into a run's folder before its task starts (``hydra.output_subdir``).
HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}


class ThisRunsFolder(Callback):
    """Notes the folder a single run will create, before Hydra creates it: the session's
    ``run_folder``, (the run's folder, the topmost folder of its path that this run creates),
    None when it creates none."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        session = Session.current()
        session.run_folder = None
        try:  # what Hydra's run_job makes its output folder: os.path.abspath(hydra.run.dir)
            folder = Path(os.path.abspath(str(config.hydra.run.dir)))
        except OmegaConfBaseException:  # hydra.run.dir=${nosuch}: refused as Hydra resolves it
            return
        if folder.exists():
            return
        top = folder
        while not top.parent.exists():
            top = top.parent
        session.run_folder = (folder, top)


def hydras_own(folder: Path, output_subdir: str | None, log_file: str) -> bool:
    """Whether ``folder`` holds nothing but what Hydra writes before a task starts: its
    ``output_subdir`` (``.hydra``, none when null) with ``HYDRA_FILES`` only, and the job's log
    file ``log_file`` (the refusal logged there was printed too)."""
    own = {log_file} | ({output_subdir} if output_subdir else set())
    for entry in folder.iterdir():
        if entry.name not in own or entry.is_symlink():
            return False
        if entry.name == output_subdir and not (
                entry.is_dir() and {e.name for e in entry.iterdir()} <= HYDRA_FILES):
            return False
    return True


def remove_if_refused() -> None:
    """For a single run refused before any work: remove the folder Hydra created for it, and
    the parents this run created that are then empty (``outputs/<date>/``), when it is this
    run's output folder, was created by it (``ThisRunsFolder``) and holds nothing but Hydra's
    own files (``hydras_own``). A folder that existed before, or holds anything of ragexp's (a
    status file, a run's record), stays. An ``OSError`` while removing leaves what is left,
    unreported: the refusal is what the user needs to read."""
    created = Session.current().run_folder
    if created is None or not HydraConfig.initialized():
        return
    folder, top = created
    hc = HydraConfig.get()
    if Path(hc.runtime.output_dir) != folder or not folder.is_dir() or \
            not hydras_own(folder, hc.output_subdir, f"{hc.job.name}.log"):
        return
    try:
        shutil.rmtree(folder)
        while folder != top:
            folder = folder.parent
            folder.rmdir()  # OSError when not empty: another run's folder is there
    except OSError:
        pass
    Session.current().run_folder = None
