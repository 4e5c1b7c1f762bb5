"""Compose the runner's config outside its Hydra app, as ``python -m ragexp [--config-dir DIR]
OVERRIDES`` composes it: for the commands that read a run's config without running it
(``ragexp embed``, ``ragexp questions generate``, the markdown tables of ``ragexp report``).

Hydra's ``--config-dir DIR`` adds a project's folder to the search path *after* the app's own
config folder (before the structured schemas: ``hydra._internal.utils.run_and_report``'s
``add_conf_dir``), so a shipped file wins over a project's file of the same name: a project
adds options (``dataset/mine.yaml``), it does not replace shipped ones. ``hydra.searchpath``
puts the folder in that same place, so these commands compose exactly what the runner runs
(``tests/unit/test_config_dir.py`` compares them with the runner's ``--cfg job``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.data import shipped
from ragexp.errors import InvalidValue, MissingInput, path_problem

log = logging.getLogger("ragexp")


def task_overrides(hydra_node: DictConfig) -> list[str]:
    """The command's overrides as typed (``hydra.overrides.task`` of a composed config, or
    ``HydraConfig.get()``), unresolved: Hydra keeps ``k=${nosuch}`` as text, and reading the
    list through OmegaConf resolved each as an interpolation, so a sweep stopped on "Interpolation
    key 'nosuch' not found" naming neither the key nor the job."""
    return [str(o) for o in OmegaConf.to_container(hydra_node.overrides.task, resolve=False)]


def shadowed_files(sources: Sequence[tuple[str, str, str]]) -> list[tuple[Path, Path]]:
    """``(project file, its shipped namesake)`` for each yaml of a folder added to the search
    path (``--config-dir DIR``: Hydra's ``command-line`` provider, or ``hydra.searchpath``)
    that has the same path as a shipped one: Hydra reads the shipped folder first, so that file
    of the project is never read. ``sources``: Hydra's ``runtime.config_sources`` as
    ``(provider, schema, path)``."""
    shipped_root = Path(shipped.conf_dir()).resolve()
    out = []
    for provider, scheme, path in sources:
        root = Path(path).resolve()
        if provider == "main" or scheme != "file" or root == shipped_root or not root.is_dir():
            continue
        for f in sorted(root.rglob("*.yaml")):
            namesake = shipped_root / f.relative_to(root)
            if namesake.is_file():
                out.append((f, namesake))
    return out


@lru_cache(maxsize=8)
def warn_shadowed(sources: tuple[tuple[str, str, str], ...]) -> list[str]:
    """Warn, once per process, of each project file a shipped one hides (``shadowed_files``:
    a trial: a project's ``ablation/bm25.yaml`` ran as the shipped BM25, silently); one the
    run selects is refused before it (``shadowed_choices``). Returns the warnings."""
    out = [f"{f} is not used: the shipped {namesake.relative_to(shipped.conf_dir()).as_posix()} "
           f"has that name and Hydra reads the shipped config folder first; give yours a name "
           f"of its own" for f, namesake in shadowed_files(sources)]
    for line in out:
        log.warning("%s", line)
    return out


def same_yaml(a: Path, b: Path) -> bool:
    """Whether two config files hold the same YAML (comments, line ends, spacing and key order
    aside: a copy checked out with CRLF composes as the shipped file does). A file that does
    not parse is not the same."""
    # defer heavy import
    import yaml

    if a.read_bytes() == b.read_bytes():
        return True
    try:
        return yaml.safe_load(a.read_text()) == yaml.safe_load(b.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        return False


def shadowed_choices(sources: Sequence[tuple[str, str, str]],
                     choices: dict[str, str | None]) -> list[str]:
    """One refusal for each project file a shipped one hides (``shadowed_files``) that this
    config selects (Hydra's ``runtime.choices``: ``dataset=handbook``, ``+ablation=bm25``) and
    whose YAML differs from the shipped one's (``same_yaml``): the run would measure the
    shipped option while its user meant theirs (``ragexp init handbook``'s project ran on the
    shipped handbook, 22 documents and 53 questions, exit 0, one warning among the log
    lines)."""
    root = Path(shipped.conf_dir()).resolve()
    out = []
    for f, namesake in shadowed_files(sources):
        rel = namesake.relative_to(root).with_suffix("")
        group, option = rel.parent.as_posix(), rel.name
        if group != "." and choices.get(group) == option and not same_yaml(f, namesake):
            out.append(f"{group}={option}: {f} is never read: ragexp ships an option "
                       f"{option!r} in its {group} group and Hydra reads the shipped config "
                       f"folder first, so this run would measure the shipped one; rename "
                       f"yours (e.g. {group}/my_{option}.yaml) and select it "
                       f"({group}=my_{option})")
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
    docstring). Raises ``MissingInput`` for a ``config_dir`` that is no folder, ``InvalidValue``
    for a project option a shipped one hides that the overrides select (``shadowed_choices``),
    and Hydra's ``HydraException`` (or OmegaConf's errors) for an override it refuses, as the
    runner does."""
    # defer heavy import
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    project = project_dir(config_dir)
    search = [f"hydra.searchpath=[{project.as_uri()}]"] if project is not None else []
    sources = (("command-line", "file", str(project)),) if project is not None else ()
    if sources:
        warn_shadowed(sources)
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        if sources and shadowed_files(sources):  # which options it selects: Hydra's choices
            choices = hydra_compose(config_name, overrides=[*search, *overrides],
                                    return_hydra_config=True).hydra.runtime.choices
            problems = shadowed_choices(sources, OmegaConf.to_container(choices))
            if problems:
                raise InvalidValue("invalid config:\n  " + "\n  ".join(problems))
        return hydra_compose(config_name, overrides=[*search, *overrides])
