"""``ragexp init [DIR] [--example]``: a starter project for evaluating your own documents.

Writes, under DIR (never overwriting a file that exists):

- ``conf/dataset/<name>.yaml``: the markdown dataset pointing at ``docs/`` and ``questions.jsonl``;
- ``conf/ablation/<name>_baseline.yaml`` and ``<name>_hybrid.yaml``: two named experiments on it,
  each naming ``<name>_baseline`` as the sweep's ``baseline``, so the first sweep logs every
  other job's ``vs_baseline.*`` metrics;
- ``questions.jsonl``: a commented template of the question format (with ``--example``: the
  Brindle handbook's 108 questions, and its 22 documents in ``docs/``).

``conf/`` is an ordinary Hydra config directory: ``--config-dir conf`` adds it to the shipped
config groups, so a user's own datasets, ablations and stage options (``_target_`` to their own
classes) live in their repository.
"""

from __future__ import annotations

import re
import shutil
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
    "baseline": ("Dense retrieval (MiniLM) with the lexical reranker, on {name}.", ""),
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


def _name(folder: Path) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", folder.resolve().name.lower()).strip("_")
    return name or "mydocs"


def plan(folder: Path, example: bool) -> dict[Path, str | Path]:
    """``{target path: text to write, or a file to copy}`` for a starter in ``folder``."""
    name = _name(folder)
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


def init(folder: str | Path, example: bool = False) -> list[Path]:
    """Write the starter into ``folder`` and return the files written.

    Raises ``InvalidValue`` when ``folder`` (or a parent) is a file or a file cannot be written
    there, ``WouldOverwrite`` (a ``FileExistsError``) listing every file that already exists;
    nothing is written then."""
    folder = Path(folder)
    check_folder(folder)
    files = plan(folder, example)
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


def next_steps(folder: str | Path, example: bool) -> str:
    """What to run next, for the CLI to print."""
    docs = ("(docs/ and questions.jsonl hold the Brindle handbook example)" if example else
            "put your markdown files in docs/ and your questions in questions.jsonl, then:")
    return NEXT.format(dir=folder, docs=docs, name=_name(Path(folder)))
