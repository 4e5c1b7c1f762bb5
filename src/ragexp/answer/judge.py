"""The judge stage: ``judge=none`` (default) or ``judge=llm``, which grades every answered
question on an OpenAI-compatible endpoint for

- **groundedness**: every claim is supported by the passage(s) it cites;
- **correctness**: it gives the golden reference answer's key fact(s) (``Query.answer``);

from an explicit rubric with a worked example, and returns a verdict and a one-line reason per
question (``per_question.csv``) and rates overall and per kind. Refused questions are not
graded; correctness is graded only where there is a reference answer (answerable questions).
The judge's agreement with hand-labelled answers (``judge.labels``) is measured on every run
(:mod:`ragexp.answer.agreement`), and a run whose Cohen's kappa is below ``judge.kappa_floor`` is marked.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from ragexp import settings
from ragexp.answer.agreement import GradeItem, Verdict, agreement_metrics, load_labels
from ragexp.answer.base import Answer, body
from ragexp.answer.judge_metrics import judge_columns, judge_metrics, usage_metrics
from ragexp.answer.llm import (MAX_TOKENS, ChatClient, Completion, Endpoint, LLMError,
                               Messages)
from ragexp.data import shipped
from ragexp.records import Chunk, Query

LABELS = "handbook/golden/judge/labels.jsonl"  # shipped example (data.shipped)
RUBRIC = """You grade answers written by a question-answering system over a set of documents.
You get the question, the numbered passages the system was shown, its answer (every sentence \
ends with the [n] of the passage it relies on) and, when there is one, a reference answer \
written by a person who read the documents. Give two verdicts.

groundedness: is every claim of the answer supported by the passage(s) it cites?
- "yes": every fact in every sentence (numbers, names, settings, steps, conditions) is stated \
by the passage(s) that sentence cites, possibly in other words.
- "no": some sentence says something its cited passages do not say, contradicts them, or cites \
a passage about something else. A true fact cited to the wrong passage is "no".

correctness: does the answer give what the reference answer gives?
- "yes": it states the reference's key fact(s), the value, name, step or condition the question \
asks for, and contradicts none of it. Extra correct detail is fine; wording may differ.
- "no": the key fact is missing, different or contradicted, or the answer is about something \
else. A grounded answer can still be "no".
- "n/a": only when no reference answer is given.

Judge groundedness only against the passages and correctness only against the reference; \
do not use your own knowledge. Reply with one JSON object and nothing else:
{"grounded": "yes" or "no", "correct": "yes", "no" or "n/a", "reason": "<one line naming the \
claim or fact that decided it>"}

Worked example.
Question: How long are dead-lettered jobs kept before they are deleted?
Passages:
[1] operations/monitoring.md > Monitoring > Key metrics
`brindle_dead_letter_depth` falls on its own as old dead-lettered jobs are purged; how long they \
are kept is described in Retries and dead letters.
[2] concepts/retries-and-dead-letters.md > Retries and dead letters > The dead-letter queue > \
How long dead letters are kept
Dead-lettered jobs are kept for **14 days** and then purged permanently.
Answer: Old dead-lettered jobs are purged, so the dead-letter depth falls on its own [1].
Reference answer: 14 days, counted from when the job was dead-lettered.
Verdict: {"grounded": "yes", "correct": "no", "reason": "the claim is in [1], but the answer \
never gives the 14-day period the reference asks for"}"""


@dataclass
class JudgeResult:
    metrics: dict[str, float] = field(default_factory=dict)
    columns: dict[str, list] = field(default_factory=dict)  # per question, in query order
    tags: dict[str, str] = field(default_factory=dict)


class Judge(Protocol):
    """The judge stage: grades a run's answers; returns metrics, per-question columns, tags."""

    name: str

    def assess(self, queries: Sequence[Query], answers: Sequence[Answer],
               chunks: Mapping[str, Chunk], progress: bool = False) -> JudgeResult: ...


@dataclass(eq=False)
class NoJudge:
    """``judge=none``: grades nothing, logs nothing."""

    name: str = "none"

    def __post_init__(self) -> None:
        self.name = "none"  # fixed, as before settings were fields

    def assess(self, queries, answers, chunks, progress=False) -> JudgeResult:
        return JudgeResult()


def judge_prompt(item: GradeItem) -> Messages:
    shown = "\n".join(f"[{n}] {text}" for n, text in item.passages)
    return [{"role": "system", "content": RUBRIC},
            {"role": "user", "content": f"Question: {item.question}\nPassages:\n{shown}\n"
                                        f"Answer: {item.answer}\nReference answer: "
                                        f"{item.reference or '(none)'}\nVerdict:"}]


_OBJECT = re.compile(r"\{.*\}", re.S)
_YES = {"yes": True, "no": False, True: True, False: False}


def parse_verdict(reply: Completion, graded_correct: bool) -> Verdict:
    """The judge's JSON reply as a Verdict; an unreadable reply is a Verdict with ``error``."""
    if reply.text is None:
        return Verdict(None, None, "", f"judge endpoint failed: {reply.error}")
    found = _OBJECT.search(reply.text)
    try:
        data = json.loads(found.group()) if found else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Verdict(None, None, "", f"unreadable judge reply: {reply.text[:120]!r}")
    grounded = _YES.get(_lower(data.get("grounded")))
    correct = _YES.get(_lower(data.get("correct"))) if graded_correct else None
    if grounded is None or (graded_correct and correct is None):
        return Verdict(None, None, "", f"judge reply without a yes/no verdict: "
                                       f"{reply.text[:120]!r}")
    reason = " ".join(str(data.get("reason", "")).split())[:300]
    return Verdict(grounded, correct, reason)


def _lower(value):
    return value.strip().lower() if isinstance(value, str) else value


def grade_item(query: Query, answer: Answer, chunks: dict[str, Chunk]) -> GradeItem:
    passages = tuple((s.n, f"{s.doc_id} > {s.heading}\n{body(chunks[s.chunk_id])}")
                     for s in answer.sources)
    return GradeItem(query.text, answer.text, passages, query.answer if query.answerable else "")


@dataclass(eq=False)
class LLMJudge:
    """``judge=llm``: ``llm`` is the endpoint it calls (``judge.llm``, by default the config's
    ``llm``), asked for at most ``max_tokens`` tokens a grading; ``labels`` is the
    hand-labelled file for agreement (empty or None: the shipped handbook labels),
    ``kappa_floor`` the agreement below which the run is marked; more than
    ``llm.max_error_rate`` of the gradings failed or unreadable fails the run. Its fields
    declare what they accept (``settings``): ``config.schema.LLMJudgeConf`` is generated from
    them.

    Raises LLMError when built on a value out of range, or if the key's environment variable
    is missing or empty, and ValueError (file:line) on a bad labels file.
    """

    llm: Endpoint
    max_tokens: int = field(default=200, metadata=MAX_TOKENS)
    # hand-labelled answers for the judge's agreement (kappa); the config's default is the
    # shipped handbook labels
    labels: str = field(default="", metadata={
        "path": "file", "interpolate": f"${{ragexp.example:{LABELS}}}"})
    # agreement below this marks the run
    kappa_floor: float = field(default=0.6, metadata={"ge": -1, "le": 1})
    name: str = "llm"

    def __post_init__(self) -> None:
        settings.check(self, "judge", error=LLMError)
        labels = self.labels or shipped.path(LABELS)
        self.endpoint = self.llm.at("judge.llm")
        self.client = ChatClient(self.endpoint, self.max_tokens)
        self.hand_labels = load_labels(labels)  # ``labels`` stays the path it was given
        self.labels_sha256 = hashlib.sha256(Path(labels).read_bytes()).hexdigest()[:16]
        self.max_error_rate = self.endpoint.max_error_rate

    def grade(self, items: Sequence[GradeItem], progress: bool = False,
              desc: str = "judging") -> tuple[list[Verdict], list[Completion]]:
        replies = self.client.complete_all([judge_prompt(it) for it in items], progress, desc)
        return [parse_verdict(r, bool(it.reference)) for it, r in zip(items, replies)], replies

    def assess(self, queries, answers, chunks, progress=False) -> JudgeResult:
        todo = [i for i, a in enumerate(answers) if not a.refused]
        verdicts, replies = self.grade([grade_item(queries[i], answers[i], chunks)
                                        for i in todo], progress)
        failed = [v.error for v in verdicts if v.error]
        if todo and len(failed) > self.max_error_rate * len(todo):
            raise LLMError(f"judge: {len(failed)} of {len(todo)} gradings failed or were "
                           f"unreadable (first: {failed[0]}); more than "
                           f"judge.llm.max_error_rate={self.max_error_rate}")
        by_q: list[Verdict | None] = [None] * len(queries)
        for i, v in zip(todo, verdicts):
            by_q[i] = v
        label_verdicts, label_replies = self.grade([lab.item for lab in self.hand_labels],
                                                   progress, "judging the hand labels")
        metrics = {**judge_metrics(queries, answers, by_q),
                   **usage_metrics(replies + label_replies, self.endpoint)}
        agreement, tags = agreement_metrics(self.hand_labels, label_verdicts, self.kappa_floor)
        tags["ragexp.judge_labels_sha256"] = self.labels_sha256
        return JudgeResult({**metrics, **agreement}, judge_columns(by_q), tags)
