"""``generator=llm``: questions written by any OpenAI-compatible chat model from one passage.

One call per sampled passage asks for one JSON object ``{"question", "answer", "quote",
"kind"}``, with instructions per kind (``KIND_PROMPTS``). A reply that is not such an object is
asked again once, with the parse error; a second failure drops the passage (``not_json`` or
``missing_field``). An ``unanswerable`` question (a near-miss: on the corpus's topic, answered
nowhere in it) is kept only when the model, shown the top ``CHECK_DEPTH`` BM25 passages of the
whole corpus for it, says none of them answers it (``answered_in_corpus`` otherwise).

The round trip (``round_trip``, on by default; after Promptagator's round-trip consistency,
Dai et al. 2022, and doc2query--, Gospodinov et al. 2023): an answerable question is kept only
when a retriever that is not under test finds its evidence: among the top ``round_trip_k``
passages (``passages``: the generator's own, not the run's chunks) that a BM25 of fixed
parameters (``index.bm25.BM25Params()``: lucene, k1 1.5, b 0.75, not the run's ``bm25.*``)
ranks for the question, one overlaps an evidence span (``round_trip`` otherwise). Ties count
in, so the rule does not hang on the order of equal scores:

    keep(q)  <=>  exists p, s in evidence(q):  p.doc == s.doc, p.start < s.end, s.start < p.end,
                  BM25(q, p) > 0  and  |{p' : BM25(q, p') > BM25(q, p)}| < round_trip_k

(a lucene BM25 scores a passage above 0 exactly when it holds a term of the question).

The endpoint, key, retries, concurrency and prices are ``llm.*`` (``answer.llm.Endpoint``);
tokens and cost are summed in :attr:`LLMGenerator.usage`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from ragexp import settings
from ragexp.answer.llm import (MAX_TOKENS, ChatClient, Completion, Endpoint, LLMError,
                               Messages)
from ragexp.data.golden import resolve_evidence
from ragexp.generate.passages import Job, Passage
from ragexp.index.bm25 import BM25Index
from ragexp.records import UNANSWERABLE, Document

CHECK_DEPTH = 5
FIELDS = ("question", "answer", "quote", "kind")
SYSTEM = """You write test questions for a search system over a set of documents. You are \
shown one passage. Write one question of the kind asked, as a user of the documents would ask \
it, and reply with exactly one JSON object and nothing else:
{"question": "...", "answer": "...", "quote": "...", "kind": "..."}
"quote" is copied verbatim from the passage (one or two sentences that answer the question); \
"answer" is a short reference answer; "kind" is the kind asked."""
KIND_PROMPTS = {
    "factual": "factual: a question about one fact the passage states (a value, a default, a "
               "limit, a behaviour). Do not put the answer in the question.",
    "procedural": "procedural: a how-to question whose answer is the steps or the command the "
                  "passage gives.",
    "identifier": "identifier: a question that needs an exact code, key, command or name the "
                  "passage gives (an error code, a config key, a flag), asked for by what it "
                  "does, not by the name itself.",
    "semantic": "semantic: a paraphrase question that shares at most one content word with the "
                "quote: describe the situation in other words.",
    UNANSWERABLE: "unanswerable: a near-miss question on the same topic that these documents do "
                  "not answer anywhere (a plausible feature, limit or setting they never "
                  "mention). Give \"answer\": \"\" and \"quote\": \"\".",
}
USER = "Document: {doc}\nSection: {section}\nPassage:\n{text}\n\nKind asked: {instruction}"
CHECK_SYSTEM = """You check whether a question is answered by any of the numbered passages. \
Reply with exactly one JSON object: {"answered": true} if some passage answers it, \
{"answered": false} if none does."""
RETRY = "Your reply could not be used ({error}). Reply with only the JSON object {fields}."
_FENCED = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def prompt_sha256() -> str:
    """sha256 of every template the generator sends (system, kinds, user, check, retry)."""
    text = json.dumps([SYSTEM, KIND_PROMPTS, USER, CHECK_SYSTEM, RETRY], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def messages(passage: Passage, kind: str) -> Messages:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER.format(doc=passage.doc_id,
                                                    section=passage.section or "(none)",
                                                    text=passage.text,
                                                    instruction=KIND_PROMPTS[kind])}]


def parse_reply(text: str, required: Sequence[str] = FIELDS) -> tuple[dict | None, str]:
    """``(object, "")`` for a reply that is one JSON object with a string in each required
    field (a ```json fence around it is allowed), else ``(None, reason)`` where reason starts
    with ``not_json`` or ``missing_field``."""
    m = _FENCED.match(text)
    try:
        value = json.loads(m.group(1) if m else text)
    except json.JSONDecodeError as exc:
        return None, f"not_json: {exc.msg} at column {exc.colno}"
    if not isinstance(value, dict):
        return None, "not_json: the reply is not a JSON object"
    missing = [f for f in required if not isinstance(value.get(f), str)]
    if missing:
        return None, f"missing_field: no string field {', '.join(missing)}"
    return value, ""


@dataclass(eq=False)
class LLMGenerator:
    """Questions from an OpenAI-compatible endpoint (the module's procedure): ``llm`` is the
    endpoint (``generator.llm``, by default the config's ``llm``), asked for at most
    ``max_tokens`` tokens a reply; ``round_trip`` keeps only questions whose evidence a BM25
    of the corpus's passages ranks within ``round_trip_k`` (the module's rule). Raises
    ``LLMError`` when built if a value is out of range or the key's environment variable is
    unset, and from :meth:`write` when the endpoint cannot be reached at all (every call of a
    batch failing to connect)."""

    llm: Endpoint
    max_tokens: int = field(default=400, metadata=MAX_TOKENS)
    # keep a question only when an independent BM25 finds its evidence (the module's rule)
    round_trip: bool = True
    round_trip_k: int = field(default=20, metadata={"ge": 1})  # passages the round trip reads
    name: ClassVar[str] = "llm"
    kinds: ClassVar[tuple[str, ...]] = tuple(KIND_PROMPTS)
    model: str = field(init=False)
    prompt_sha256: str = field(init=False)
    usage: dict = field(init=False)

    def __post_init__(self) -> None:
        settings.check(self, "generator", error=LLMError)
        self.endpoint = self.llm.at("generator.llm")
        self.client = ChatClient(self.endpoint, self.max_tokens)
        self.model = self.llm.model
        self.prompt_sha256 = prompt_sha256()
        self.usage = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "retries": 0}
        self._bm25: BM25Index | None = None
        self._passages: list[Passage] = []
        self._docs: dict[str, Document] = {}
        self._of_doc: dict[str, list[int]] = {}  # a document's passages, by index

    def settings(self) -> dict:
        """What the questions depend on besides the model and prompts, for provenance."""
        return {"name": self.name, "temperature": self.endpoint.temperature,
                "max_tokens": self.max_tokens, "round_trip": self.round_trip,
                "round_trip_k": self.round_trip_k}

    def cost_usd(self) -> float | None:
        return self.endpoint.cost_usd(self.usage["tokens_in"], self.usage["tokens_out"])

    def prepare(self, docs: Sequence[Document], passages: Sequence[Passage]) -> None:
        """BM25 over every passage, for the near-miss check of unanswerable questions and the
        round trip."""
        self._docs = {d.doc_id: d for d in docs}
        self._passages = list(passages)
        self._of_doc = {}
        for i, p in enumerate(self._passages):
            self._of_doc.setdefault(p.doc_id, []).append(i)
        self._bm25 = BM25Index().fit([p.text for p in passages])

    def _complete(self, conversations: list[Messages]) -> list[Completion]:
        replies = self.client.complete_all(conversations)
        for r in replies:
            self.usage["calls"] += 1
            self.usage["tokens_in"] += r.tokens_in
            self.usage["tokens_out"] += r.tokens_out
            self.usage["retries"] += r.retries
        if replies and all(r.text is None and r.error.startswith("APIConnectionError")
                           for r in replies):
            raise LLMError(f"generator: cannot reach {self.endpoint.base_url} "
                           f"({replies[0].error}); check llm.base_url and that the server runs")
        return replies

    def write(self, batch: Sequence[Job], seed: int) -> list[dict | str]:
        """Per job a record (``question``, ``kind``, ``answer``, ``evidence``) or a drop reason:
        ``call_failed``, ``not_json``, ``missing_field``, ``answered_in_corpus``,
        ``check_failed``, ``round_trip``."""
        convs = [messages(j.passage, j.kind) for j in batch]
        out: list[dict | str] = [""] * len(batch)
        parsed: list[dict | None] = [None] * len(batch)
        retry: list[int] = []
        for i, reply in enumerate(self._complete(convs)):
            if reply.text is None:
                out[i] = "call_failed"
                continue
            parsed[i], why = parse_reply(reply.text)
            if parsed[i] is None:
                convs[i] = convs[i] + [{"role": "assistant", "content": reply.text},
                                       {"role": "user", "content": RETRY.format(
                                           error=why, fields=json.dumps(list(FIELDS)))}]
                retry.append(i)
        for i, reply in zip(retry, self._complete([convs[i] for i in retry])):
            if reply.text is None:
                out[i] = "call_failed"
                continue
            parsed[i], why = parse_reply(reply.text)
            if parsed[i] is None:
                out[i] = why.split(":")[0]
        for i, job in enumerate(batch):
            if parsed[i] is not None:
                out[i] = self._record(parsed[i], job)
        near = [i for i, o in enumerate(out) if isinstance(o, dict) and o["kind"] == UNANSWERABLE]
        for i, verdict in zip(near, self._check([out[i]["question"] for i in near])):
            if verdict != "unanswered":
                out[i] = verdict
        if self.round_trip:
            found = [i for i, o in enumerate(out) if isinstance(o, dict) and o["evidence"]]
            for i, kept in zip(found, self.found_again([out[i] for i in found])):
                if kept is False:
                    out[i] = "round_trip"
        return out

    def found_again(self, records: Sequence[dict]) -> list[bool | None]:
        """Per record whether the round trip finds its evidence (the module's rule: a passage
        overlapping an evidence span ranks within ``round_trip_k``, ties counted in); None for
        a record whose evidence ``questions check`` refuses (the filters drop it, by its
        reason). Call :meth:`prepare` first."""
        out: list[bool | None] = []
        for rec in records:
            spans = [resolve_evidence(ev, self._docs).span for ev in rec["evidence"]]
            if None in spans:
                out.append(None)
                continue
            scores = self._bm25.score([rec["question"]])[0]
            held = scores[scores > 0]
            k = self.round_trip_k
            kth = np.partition(held, len(held) - k)[len(held) - k] if len(held) >= k else 0.0
            out.append(any(scores[i] > 0 and scores[i] >= kth
                           for s in spans for i in self._of_doc.get(s.doc_id, ())
                           if self._passages[i].start < s.end and s.start < self._passages[i].end))
        return out

    @staticmethod
    def _record(reply: dict, job: Job) -> dict:
        kind = reply["kind"].strip()
        evidence = [] if kind == UNANSWERABLE or not reply["quote"].strip() else \
            [{"doc": job.passage.doc_id, "quote": reply["quote"]}]
        return {"question": " ".join(reply["question"].split()), "kind": kind,
                "answer": reply["answer"].strip(), "evidence": evidence}

    def _check(self, questions: list[str]) -> list[str]:
        """Per near-miss question ``unanswered`` (keep it), ``answered_in_corpus`` or
        ``check_failed``: the model judges it against its top ``CHECK_DEPTH`` BM25 passages."""
        if not questions:
            return []
        top = self._bm25.top_k(questions, CHECK_DEPTH).indices
        convs = []
        for q, row in zip(questions, top):
            shown = "\n\n".join(f"[{n}] {self._passages[i].text}"
                                for n, i in enumerate((i for i in row if i >= 0), start=1))
            convs.append([{"role": "system", "content": CHECK_SYSTEM},
                          {"role": "user", "content": f"Passages:\n\n{shown}\n\n"
                                                      f"Question to check: {q}"}])
        verdicts = []
        for reply in self._complete(convs):
            value, _ = parse_reply(reply.text or "", required=())
            answered = value.get("answered") if value else None
            verdicts.append("check_failed" if not isinstance(answered, bool)
                            else "answered_in_corpus" if answered else "unanswered")
        return verdicts
