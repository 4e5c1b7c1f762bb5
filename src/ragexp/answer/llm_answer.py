"""``answer=llm``: an OpenAI-compatible chat model answers from the retrieved chunks only.

The model sees the top ``n_chunks`` chunks numbered ``[1]..[n]`` and is told to answer only
from them, end every sentence with the ``[n]`` of its passage, and reply ``NOT IN PASSAGES``
when they do not answer the question. Its reply then goes through the same refusal rule and
citation checker as the extractive answerer (:mod:`ragexp.answer.base`): a sentence without a
citation, citing a number that was not given (``[9]`` of three passages) or whose words are
not in the cited passage is dropped; an answer left with no sentence is a refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ragexp import settings
from ragexp.answer.base import (REFUSAL, Answer, AnswerInput, Coverage, body, finish,
                                refuse_early, sources_for)
from ragexp.answer.llm import MAX_TOKENS, ChatClient, Endpoint, LLMError, Messages
from ragexp.text.analysis import split_sentences

NO_ANSWER = "NOT IN PASSAGES"
SYSTEM = f"""You answer questions about a set of documents, using only the numbered passages \
you are given.
Rules:
1. Use only what the passages state. No outside knowledge, no guesses.
2. End every sentence with the number of the passage that supports it in square brackets, \
for example: "Dead-lettered jobs are kept for 14 days [2]." Cite only the numbers you were given.
3. Answer in at most {{max_sentences}} short sentences.
4. If the passages do not answer the question, reply with exactly: {NO_ANSWER}"""
# A citation written after the full stop ("... days. [2]") moves before it ("... days [2].")
# so that sentence splitting keeps it with its sentence.
_AFTER_STOP = re.compile(r"([.!?])((?:\s*\[\d+(?:\s*,\s*\d+)*\])+)")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def prompt(question: str, passages: Sequence, max_sentences: int) -> Messages:
    """The chat messages for one question; ``passages`` are chunks, shown as ``[n] doc >
    heading`` then the chunk text."""
    shown = "\n\n".join(f"[{i}] {c.doc_id}" + (f" > {c.heading}" if c.heading else "")
                        + f"\n{body(c)}" for i, c in enumerate(passages, start=1))
    return [{"role": "system", "content": SYSTEM.format(max_sentences=max_sentences)},
            {"role": "user", "content": f"Passages:\n\n{shown}\n\nQuestion: {question}"}]


def reply_sentences(reply: str) -> list[str]:
    """The reply split into sentences, bullets stripped, each keeping its citations."""
    out = []
    for line in _AFTER_STOP.sub(lambda m: f"{m.group(2)}{m.group(1)}", reply).splitlines():
        line = _BULLET.sub("", line).strip()
        out.extend(split_sentences(line) if line else [])
    return out


@dataclass(eq=False)
class LLMAnswerer:
    """``answer=llm``. ``llm`` is the endpoint it calls (``answer.llm``, by default the
    config's ``llm``), asked for at most ``max_tokens`` tokens a reply; ``n_chunks`` passages
    are shown, ``max_sentences`` asked for, ``min_support`` is the citation checker's, and more
    than ``llm.max_error_rate`` of the calls failing at the endpoint raises LLMError (the run
    would otherwise measure the endpoint's failures). Its fields declare what they accept
    (``settings``): ``config.schema.LLMAnswerConf`` is generated from them.

    Raises LLMError when built on a value out of range, or if the key's environment variable
    is missing or empty.
    """

    llm: Endpoint
    max_tokens: int = field(default=400, metadata=MAX_TOKENS)
    n_chunks: int = field(default=3, metadata={"ge": 1})  # passages shown, best first
    max_sentences: int = field(default=2, metadata={"ge": 1})  # asked of the model
    min_support: float = field(default=0.6, metadata={"ge": 0, "le": 1})  # citation checker's
    name: str = "llm"

    def __post_init__(self) -> None:
        settings.check(self, "answer", error=LLMError)
        self.endpoint = self.llm.at("answer.llm")
        self.client = ChatClient(self.endpoint, self.max_tokens)
        self.max_error_rate = self.endpoint.max_error_rate

    def answer(self, inputs: Sequence[AnswerInput], coverage: Coverage,
               progress: bool = False) -> list[Answer]:
        sources = [sources_for(inp, self.n_chunks) for inp in inputs]
        out: list[Answer | None] = [refuse_early(inp, src) for inp, src in zip(inputs, sources)]
        todo = [i for i, a in enumerate(out) if a is None]
        replies = self.client.complete_all(
            [prompt(inputs[i].question, inputs[i].retrieved[:self.n_chunks], self.max_sentences)
             for i in todo], progress, desc="answering (llm)")
        for i, reply in zip(todo, replies):
            out[i] = self._read(inputs[i], sources[i], reply, coverage)
        failed = [out[i].error for i in todo if out[i].error]
        if todo and len(failed) > self.max_error_rate * len(todo):
            raise LLMError(f"answer: {len(failed)} of {len(todo)} calls to "
                           f"{self.endpoint.base_url} failed (first: {failed[0]}); more than "
                           f"answer.llm.max_error_rate={self.max_error_rate}")
        return out

    def _read(self, inp: AnswerInput, sources, reply, coverage: Coverage) -> Answer:
        usage = {"tokens_in": reply.tokens_in, "tokens_out": reply.tokens_out,
                 "retries": reply.retries,
                 "cost_usd": self.endpoint.cost_usd(reply.tokens_in, reply.tokens_out)}
        if reply.text is None:
            return Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold, sources=sources,
                          reason="the answer endpoint failed", error=reply.error, **usage)
        if reply.text.strip().strip(".").upper().startswith(NO_ANSWER):
            return Answer(inp.question, REFUSAL, True, inp.signal, inp.threshold, sources=sources,
                          reason="the model found no answer in the passages", **usage)
        return finish(inp, reply_sentences(reply.text), sources, coverage, self.min_support,
                      "no sentence of the model's reply kept a valid, supported citation",
                      **usage)
