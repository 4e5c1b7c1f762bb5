"""``ragexp init [DIR] [--example] [--name NAME]``: a starter project for evaluating your own
documents.

Writes, under DIR (never overwriting a file that exists):

- ``conf/dataset/<name>.yaml``: the markdown dataset pointing at ``docs/`` and ``questions.jsonl``;
- ``conf/ablation/<name>_baseline.yaml`` and ``<name>_hybrid.yaml``: two named experiments on it,
  each naming ``<name>_baseline`` as the sweep's ``baseline``, so the first sweep logs every
  other job's ``vs_baseline.*`` metrics;
- ``questions.jsonl``: a commented template of the question format (with ``--example``: the
  Brindle handbook's 108 questions, and its 22 documents in ``docs/``).

The project's name is ``--name``'s, else its folder's, folded to what a config option's name
holds (``fold``): accents folded to ASCII, lowercased, every run of characters outside
``[a-z0-9_]`` one ``_`` (``My Docs`` -> ``my_docs``, ``Über Docs`` -> ``uber_docs``);
``renamed`` says so when that differs from what was typed. ``check_name`` refuses a name with
no letter or digit left (``文档``), asking for ``--name``; one that Hydra or YAML reads as
something other than that string (``123``, ``true``, ``1e3``, ``null``, ``on``, ``inf``:
``dataset=123`` crashed Hydra); and one that meets a shipped option of a group the starter
writes into (``handbook``: Hydra reads the shipped folder first, so runs measured the shipped
handbook).

``conf/`` is an ordinary Hydra config directory: ``--config-dir conf`` adds it to the shipped
config groups, so a user's own datasets, ablations and stage options (``_target_`` to their own
classes) live in their repository.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import unicodedata
from pathlib import Path

from ragexp.data import shipped
from ragexp.errors import InvalidValue, WouldOverwrite

TEMPLATE = """\
// questions.jsonl: one JSON object per line. Lines starting with // are comments.
// id: any string; kind: any name (metrics are also reported per kind); "unanswerable" marks a
// question your documents do not answer (they measure refusals). Evidence, at three levels,
// mixable: a verbatim quote, a section (heading path, or its unambiguous tail), a whole document.
// Runs score the dev half of each kind (test is held out for `ragexp confirm`): write at least
// 2 questions of each kind, or run with split=all while the set is small.
// Delete these lines and the two examples below, then write your own.
{"id": "q1", "kind": "howto", "question": "How do I install it with Docker?", "answer": "Run docker compose up.", "evidence": [{"doc": "install.md", "section": "Install > Docker"}]}
{"id": "q2", "kind": "unanswerable", "question": "Is there a Windows installer?"}
"""

DATASET = """\
# Your documents and questions. Paths are relative to the folder you run ragexp from.
defaults:
  - markdown_schema
  - _self_

name: {name}
corpus_dir: docs
questions: questions.jsonl
"""

ABLATIONS = {
    # no embedder named: the config's default, which a sweep may override (embedder=hash);
    # ragexp report says which one each run used
    "baseline": ("Dense retrieval with the lexical reranker, on {name}.", ""),
    "hybrid": ("BM25 fused with dense retrieval by RRF, no reranker, on {name}.",
               "  - override /retriever: hybrid\n  - override /reranker: none\n"),
}
ABLATION = """\
# @package _global_
# {what}
defaults:
  - override /dataset: {name}
{extra}ablation: {name}_{key}
baseline: {name}_baseline  # a sweep tests every other job against this one
"""

NEXT = """\
Next, in {dir}:
  {docs}
  python -m ragexp --config-dir conf dataset={name}                       # one run
  python -m ragexp --config-dir conf -m '+ablation=glob({name}_*)'        # both ablations
  ragexp compare --experiment ragexp-{name}                               # the table"""


ACCEPTED = ("lowercase letters, digits and _, read by Hydra and YAML as that same text (not a "
            "number, true/false/yes/no/on/off, null, inf or nan)")


def fold(text: str) -> str:
    """``text`` as a config option's name: case folded, accents folded to ASCII (NFKD, then
    combining marks dropped: ``Café`` -> ``cafe``, ``Straße`` -> ``strasse``), every run of
    characters outside ``[a-z0-9_]`` one ``_``, no ``_`` at either end. Empty when no ASCII
    letter or digit is left (``文档``, ``★``)."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    ascii_ = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return re.sub(r"[^a-z0-9_]+", "_", ascii_).strip("_")


def typed(folder: Path, name: str | None = None) -> str:
    """What the user named the project: ``--name`` when given, else the folder's base name."""
    return folder.resolve().name if name is None else name


def _name(folder: Path, name: str | None = None) -> str:
    return fold(typed(folder, name))


def renamed(folder: Path, name: str | None = None) -> str | None:
    """A line saying how the project's name came from what the user typed, for the CLI to
    print, when folding did more than lowercase it and join words with ``_`` (``My Docs`` ->
    ``my_docs``, the documented rule, needs no word): an accent folded (``café`` -> ``cafe``)
    or another character made ``_``. None otherwise."""
    given = typed(folder, name)
    if re.fullmatch(r"[A-Za-z0-9_. -]*", given):
        return None
    source = "--name" if name is not None else "the folder's name"
    return (f"project name: {_name(folder, name)} (from {source} {given!r}: an option name "
            f"holds lowercase ASCII letters, digits and _, so accents are folded and other "
            f"characters become _; give another with --name NAME)")


def shipped_options(group: str) -> set[str]:
    """The option names ragexp ships in config ``group``: the stems of its yaml files in the
    shipped config folder (Hydra reads them before a project's ``--config-dir``) and its
    structured schemas (``markdown_schema``: a project's file of that name would replace it)."""
    # defer heavy import
    from ragexp.config.schema import GENERATORS, SCHEMAS

    schemas = GENERATORS if group == "generator" else SCHEMAS.get(group, {})
    folder = Path(shipped.conf_dir()) / group
    return {p.stem for p in folder.glob("*.yaml")} | {f"{n}_schema" for n in schemas}


def written_options(name: str) -> dict[str, list[str]]:
    """``{config group: [option names]}`` the starter for ``name`` writes (``plan``)."""
    return {"dataset": [name], "ablation": [f"{name}_{key}" for key in ABLATIONS]}


def misread(text: str) -> str | None:
    """What Hydra or YAML reads ``text`` as when it is not that same string, or None when both
    keep it: as a Hydra override's value (``dataset=123`` is the int 123, ``inf`` a float) and
    as a YAML value in a config file (OmegaConf's loader: ``on`` is True, ``0x1f`` the int 31).
    ``"the int 123 in a command-line override"``."""
    # defer heavy import
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    def seen(value) -> str:
        return "null" if value is None else f"the {type(value).__name__} {value!r}"

    try:
        value = OverridesParser.create().parse_override(f"dataset={text}").value()
    except Exception as exc:  # Hydra's grammar refuses it: no option name either
        return f"no value Hydra's override grammar accepts ({str(exc).splitlines()[0]})"
    if value != text or not isinstance(value, str):
        return f"{seen(value)} in a command-line override"
    loaded = OmegaConf.create(f"k: {text}").k
    if loaded != text or not isinstance(loaded, str):
        return f"{seen(loaded)} in a YAML config file"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a starter's options, as a message's tail, or None when it can:
    characters outside ``[a-z0-9_]``, a name (or one of its ablations) that Hydra or YAML reads
    as something else (``misread``), an option the starter writes that ragexp ships in that
    group, or an ablation glob ``<name>_*`` (the sweep ``next_steps`` prints) that also matches
    shipped ablations."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        return f"{name!r} has characters other than {ACCEPTED.split(',')[0]}"
    for group, options in written_options(name).items():
        for option in options:
            wrong = misread(option)
            if wrong:
                return f"{option} reads as {wrong}, not as a name"
            if option in shipped_options(group):
                where = Path(shipped.conf_dir()) / group / f"{option}.yaml"
                if not where.is_file():  # a schema: the project's file would replace it
                    return (f"{group}/{option} is the structured schema ragexp's {group} "
                            f"files build on, which the project's conf/{group}/{option}.yaml "
                            f"would replace")
                return (f"ragexp ships the {group} option {option} ({where}), which Hydra "
                        f"reads first, so the project's conf/{group}/{option}.yaml would "
                        f"never be used")
    glob = f"{name}_*"
    caught = sorted(fnmatch.filter(shipped_options("ablation"), glob))
    if caught:
        return (f"the starter's sweep +ablation=glob({glob}) would also run the shipped "
                f"ablations {', '.join(caught)}")
    return None


def free_name(name: str) -> str:
    """A name close to ``name`` (a project's name as ``_name`` makes it) that ``name_problem``
    accepts: ``<name>_docs``, ``my_<name>`` or ``docs_<name>``, the first that is free
    (``mydocs`` when none is)."""
    for candidate in (f"{name}_docs", f"my_{name}", f"docs_{name}", "mydocs"):
        if name_problem(candidate) is None:
            return candidate
    return "mydocs"


def check_name(folder: Path, name: str | None = None) -> str:
    """The starter's name for ``folder``: ``name`` (``--name``) or else its base name, folded
    (``_name``). Raises ``InvalidValue`` naming the folder and what was typed when no ASCII
    letter or digit is left (``文档``), asking for ``--name``; and naming why the name cannot be
    used (``name_problem``), the names accepted and a free one, when the starter's runs would
    crash (``dataset=123``) or silently measure a shipped option instead (``handbook``)."""
    made = _name(folder, name)
    source = "--name" if name is not None else "the folder's name"
    if not made:
        raise InvalidValue(f"ragexp init {folder}: {source} {typed(folder, name)!r} has no "
                           f"letter or digit that folds to ASCII, so it cannot name the "
                           f"project's config options (dataset=NAME, +ablation=NAME_baseline); "
                           f"give a name made of {ACCEPTED} with --name, e.g. ragexp init "
                           f"{shlex.quote(str(folder))} --name my_docs")
    problem = name_problem(made)
    if problem:
        instead = (f"{shlex.quote(str(folder))} --name {free_name(made)}" if name is not None
                   else shlex.quote(str(folder.parent / free_name(made))))
        raise InvalidValue(f"ragexp init {folder}: cannot name the project {made!r} (from "
                           f"{source}): {problem}. A name is accepted when it is made of "
                           f"{ACCEPTED}, and names none of ragexp's shipped dataset or ablation "
                           f"options; try ragexp init {instead}")
    return made


def plan(folder: Path, example: bool, name: str) -> dict[Path, str | Path]:
    """``{target path: text to write, or a file to copy}`` for a starter named ``name`` (as
    ``check_name`` returns it) in ``folder``."""
    files: dict[Path, str | Path] = {
        folder / "conf" / "dataset" / f"{name}.yaml": DATASET.format(name=name)}
    for key, (what, extra) in ABLATIONS.items():
        files[folder / "conf" / "ablation" / f"{name}_{key}.yaml"] = ABLATION.format(
            what=what.format(name=name), name=name, extra=extra, key=key)
    if example:
        corpus = Path(shipped.path("handbook/corpus"))
        for src in sorted(corpus.rglob("*.md")):
            files[folder / "docs" / src.relative_to(corpus)] = src
        golden = sorted(Path(shipped.path("handbook/golden")).glob("*.jsonl"))
        files[folder / "questions.jsonl"] = "".join(p.read_text(encoding="utf-8") for p in golden)
    else:
        files[folder / "questions.jsonl"] = TEMPLATE
    return files


def check_folder(folder: Path) -> None:
    """Raise ``InvalidValue`` unless ``folder`` is a folder or can become one: it, or the
    nearest of its parents that exists, must be a folder (``ragexp init notes.txt`` names the
    file)."""
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                raise InvalidValue(f"ragexp init {folder}: {path} is a file, not a folder; give "
                                   f"a new or empty folder")
            return


def init(folder: str | Path, example: bool = False, name: str | None = None) -> list[Path]:
    """Write the starter into ``folder`` and return the files written; ``name`` (``--name``)
    names the project instead of the folder's name.

    Raises ``InvalidValue`` when ``folder`` (or a parent) is a file, the name cannot name the
    project (``check_name``) or a file cannot be written there, ``WouldOverwrite`` (a
    ``FileExistsError``) listing every file that already exists; nothing is written then."""
    folder = Path(folder)
    check_folder(folder)
    files = plan(folder, example, check_name(folder, name))
    clash = [p for p in files if p.exists()]
    if clash:
        raise WouldOverwrite("ragexp init would overwrite " + ", ".join(map(str, clash[:5]))
                             + (f" and {len(clash) - 5} more" if len(clash) > 5 else "")
                             + "; choose an empty folder or remove them")
    for target, content in files.items():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            else:
                target.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise InvalidValue(f"ragexp init {folder}: cannot write {target} "
                               f"({exc.strerror or exc})") from exc
    (folder / "docs").mkdir(exist_ok=True)
    return list(files)


def next_steps(folder: str | Path, example: bool, name: str | None = None) -> str:
    """What to run next, for the CLI to print (``name``: ``--name``, as given to ``init``)."""
    docs = ("(docs/ and questions.jsonl hold the Brindle handbook example)" if example else
            "put your markdown files in docs/ and your questions in questions.jsonl, then:")
    return NEXT.format(dir=shlex.quote(str(folder)), docs=docs, name=_name(Path(folder), name))
