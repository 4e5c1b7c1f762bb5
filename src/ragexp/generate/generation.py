"""The generation loop: sample passages, ask a generator, filter, append, summarise.

A generator (``known_item``, ``structure``, ``llm_questions``) turns a batch of
:class:`~passages.Job` into, per job, a question record or the reason none came; this loop
labels every identical copy of its evidence in other documents and checks every record
(``filters``), gives it an id and its provenance, and appends it to the output file
(``outfile``) until ``n`` questions are in the file or every job has been asked.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Protocol, Sequence

from tqdm import tqdm

from ragexp.errors import InvalidValue, MissingInput, counted, listed
from ragexp.generate.filters import Filters
from ragexp.generate.outfile import QuestionFile
from ragexp.generate.passages import MIN_WORDS, Job, Passage, jobs, passages_of, repeated
from ragexp.data.golden import source_problem
from ragexp.records import HAND, OVERALL, Document

SOURCE = "generated"  # the default source of a generated question (``Settings.source``)


class Generator(Protocol):
    name: str
    kinds: tuple[str, ...]  # the kinds it can write
    model: str | None  # the model it calls, None for none
    prompt_sha256: str | None  # sha256 of its prompt templates, None without prompts

    def settings(self) -> dict: ...
    def prepare(self, docs: Sequence[Document], passages: Sequence[Passage]) -> None: ...
    def write(self, batch: Sequence[Job], seed: int) -> list[dict | str]: ...


@dataclass
class Summary:
    """What one invocation did: ``asked`` jobs, ``kept`` questions written, drops by reason,
    passages not sampled because the documents repeat them (``skipped``,
    ``passages.repeated``), how many questions the file holds at the end (``total``), and
    ``short``: why that is fewer than asked for (every job was asked), None when it is not."""

    skipped: int = 0
    asked: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    total: int = 0
    short: str | None = None

    def line(self) -> str:
        """``asked N, kept M, dropped K (reason: count, ...); S repeated passages not sampled``,
        reasons by count then name."""
        reasons = ", ".join(f"{r}: {c}" for r, c in sorted(self.dropped.items(),
                                                            key=lambda rc: (-rc[1], rc[0])))
        dropped = sum(self.dropped.values())
        return (f"asked {self.asked}, kept {self.kept}, dropped {dropped}"
                + (f" ({reasons})" if reasons else "")
                + f"; {self.skipped} repeated passages not sampled")


@dataclass(frozen=True)
class Settings:
    """How many questions (``n``, counted in the file), the seed of the sample order and of
    the generator's draws, the kinds asked for (cycled over the order), question length in
    words, passes over the passages (``draws``), jobs per batch, and the ``source`` each
    question names (``generated`` by default; a name per generator lets one sweep certify each
    set against the hand-written questions on its own)."""

    n: int
    seed: int = 0
    kinds: tuple[str, ...] = ()
    min_words: int = 2
    max_words: int = 40
    draws: int = 3
    batch: int = 16
    source: str = SOURCE


def check_settings(settings: Settings, generator: Generator) -> tuple[str, ...]:
    """The kinds to ask for (``settings.kinds``, or all the generator writes). Raises
    ``InvalidValue`` for ``n < 1``, a kind the generator cannot write, or a ``source`` that is
    not a source name (1-40 letters, digits, '_' or '-'; not ``hand``, which names the
    hand-written questions, nor ``all``, every source together)."""
    if settings.n < 1:
        raise InvalidValue(f"--n {settings.n}: ask for at least one question")
    if source_problem(settings.source) or settings.source.casefold() == HAND:
        raise InvalidValue(f"source={settings.source!r}: name the generated questions' source "
                           f"with 1-40 letters, digits, '_' or '-', other than {HAND!r} (the "
                           f"hand-written questions) and {OVERALL!r} (every source together)")
    kinds = tuple(settings.kinds) or generator.kinds
    unknown = [k for k in kinds if k not in generator.kinds]
    if unknown:
        raise InvalidValue(f"--kinds: {', '.join(unknown)} is not a kind the {generator.name} "
                           f"generator writes (it writes: {', '.join(generator.kinds)})")
    return kinds


def corpus_of(docs: Sequence[Document]) -> dict:
    """What a file records of the corpus it was written from: ``{"documents": n, "sha256": h}``,
    ``h`` the first 16 hex digits of the sha256 of every document's id and text, in id order."""
    h = hashlib.sha256()
    for doc in sorted(docs, key=lambda d: d.doc_id):
        h.update(f"{len(doc.doc_id)}:{doc.doc_id}{len(doc.text)}:{doc.text}".encode())
    return {"documents": len(docs), "sha256": h.hexdigest()[:16]}


def generate(docs: Sequence[Document], generator: Generator, settings: Settings,
             out: str | Path, progress: bool = True, corpus: str = "this corpus") -> Summary:
    """Append questions to ``out`` until it holds ``settings.n`` (or every job was asked, said
    in ``Summary.short``) and return the summary. ``corpus`` names ``docs`` in a refusal
    (``dataset 'handbook'``). Raises ``InvalidValue`` (bad settings, an ``--out`` that cannot
    be written or was written from another corpus or with other settings) and ``MissingInput``
    (no passage in ``docs``) before anything is written."""
    kinds = check_settings(settings, generator)
    passages = passages_of(docs)
    skipped = repeated(passages, docs)
    sampled = [p for p in passages if p.pid not in skipped]
    if not sampled:
        repeats = f", {len(skipped)} of them repeated across documents" if skipped else ""
        raise MissingInput(f"the corpus has no passage of {MIN_WORDS}+ words to write questions "
                           f"from ({counted(len(docs), 'document')}, "
                           f"{counted(len(passages), 'passage')}{repeats})")
    file = QuestionFile(out)
    by_id, here = {d.doc_id: d for d in docs}, corpus_of(docs)
    _check_same_corpus(file, by_id, here, corpus)
    _check_same_run(file, generator, settings.seed, settings.source)
    filters = Filters(by_id, kinds, settings.min_words, settings.max_words,
                      check_leak=generator.name != "known_item")
    for rec in file.records:
        filters.remember(rec)
    done = {_job_key(rec["passage"]) for rec in file.records}
    summary = Summary(skipped=len(skipped), total=len(file.records))
    if summary.total >= settings.n:
        return summary
    generator.prepare(docs, passages)
    todo = (j for j in jobs(sampled, settings.seed, kinds, settings.draws) if j.key not in done)
    stem = Path(out).stem
    bar = tqdm(total=settings.n, initial=summary.total, desc=f"questions ({generator.name})",
               disable=not progress)
    try:
        while summary.total < settings.n:
            batch = list(islice(todo, min(settings.batch, 2 * (settings.n - summary.total))))
            if not batch:
                break
            for job, outcome in zip(batch, generator.write(batch, settings.seed)):
                if summary.total >= settings.n:
                    break
                summary.asked += 1
                if isinstance(outcome, dict):
                    outcome = filters.copies(outcome)
                reason = outcome if isinstance(outcome, str) else filters.problem(outcome)
                if reason:
                    summary.dropped[reason] += 1
                    continue
                file.append(_record(outcome, f"{stem}-{summary.total + 1:05d}", generator,
                                    settings.seed, job, here, settings.source))
                summary.kept += 1
                summary.total += 1
                bar.update(1)
    finally:
        bar.close()
        file.close()
    if summary.total < settings.n:  # the loop ends early only when no job is left
        summary.short = (f"fewer than --n {settings.n}: every job was asked ({len(sampled)} "
                         f"passages of {MIN_WORDS}+ words x draws={settings.draws}); add "
                         f"documents, raise draws or ask for fewer")
    return summary


def _job_key(passage: dict) -> str:
    return f"{passage.get('doc')}#{passage.get('start')}-{passage.get('end')}@" \
           f"{passage.get('draw', 0)}"


def _check_same_corpus(file: QuestionFile, docs: dict[str, Document], here: dict,
                       name: str) -> None:
    """A file is continued only from the corpus it was written from (``corpus_of``, recorded
    in each line; a file written before that was recorded: every document its passages name is
    in ``docs``), as it is only with its seed: questions on two corpora in one file would
    score documents that one of them lacks."""
    if not file.records:
        return
    quoted = sorted({str(r["passage"].get("doc")) for r in file.records})
    written = file.records[0].get("corpus")
    lacking = [d for d in quoted if d not in docs]
    if (written is None or written == here) and not lacking:
        return
    was = (f"{written['documents']} documents, sha256 {written['sha256']}; " if written
           else "")
    gone = f"; {name} lacks {listed(lacking, 3)}" if lacking else ""
    raise InvalidValue(f"--out {file.path} was written from another corpus ({was}its questions "
                       f"quote {listed(quoted, 3)}) than {name} ({here['documents']} documents, "
                       f"sha256 {here['sha256']}){gone}: continue it with the dataset it was "
                       f"written from, its documents unchanged, or give another --out")


def _check_same_run(file: QuestionFile, generator: Generator, seed: int,
                    source: str = SOURCE) -> None:
    """A file is continued only with the generator settings, seed and source it was written
    with."""
    if not file.records:
        return
    first = file.records[0]
    if first.get("source", SOURCE) != source:
        raise InvalidValue(f"--out {file.path} holds questions of source "
                           f"{first.get('source', SOURCE)!r}, not {source!r}: rerun with "
                           f"source={first.get('source', SOURCE)} to continue it, or give "
                           f"another --out")
    if first.get("generator") != generator.settings() or first.get("seed") != seed:
        raise InvalidValue(f"--out {file.path} holds questions written with other settings "
                           f"(generator {first.get('generator')}, seed {first.get('seed')}); "
                           f"rerun with those to continue it, or give another --out")


def _record(rec: dict, qid: str, generator: Generator, seed: int, job: Job,
            corpus: dict, source: str = SOURCE) -> dict:
    """The line written: the golden fields, then provenance, in a fixed key order."""
    p = job.passage
    return {"id": qid, "kind": rec["kind"], "question": rec["question"],
            "answer": rec["answer"], "evidence": rec["evidence"], "source": source,
            "generator": generator.settings(), "model": generator.model,
            "prompt_sha256": generator.prompt_sha256, "seed": seed, "corpus": corpus,
            "passage": {"doc": p.doc_id, "section": p.section, "start": p.start, "end": p.end,
                        "draw": job.draw}}
