"""A fake OpenAI-compatible chat endpoint on loopback, for tests without a network.

Replies are deterministic and chosen by the request's content: the role (the judge's system
prompt starts "You grade"), the question, and a ``rule(role, question) -> mode`` that tests can
replace. The default rule buckets questions by a hash so a whole sweep meets every mode:

answer modes: ``ok`` (the best-matching passage sentence, cited), ``invented`` (cites [9]),
``uncited`` (no citation), ``decline`` (NOT IN PASSAGES), ``malformed`` (a 200 whose body is
not JSON), and ``429`` / ``500`` / ``timeout`` / ``slow`` (the first attempt answers 429 with
Retry-After, 500, or sleeps past the client's timeout; ``slow`` always takes ``slow_s``);
judge modes: ``ok`` (a verdict from :func:`fake_verdict`), ``garbled`` (content that is not
JSON), ``429``.

Every request is logged (``log``: role, question, mode, status, tokens, time, the client's
retry-count header), so tests check retries, Retry-After and token counts from the server's
side, independently of the client.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORD = re.compile(r"[a-z0-9]+")
STOP = set("the a an of to and or is are be for in on at by with what how does do which when "
           "can i my it its this that from as if not".split())
ANSWER_BUCKETS = {0: "invented", 1: "uncited", 2: "429", 3: "timeout", 4: "500",
                  5: "malformed", 6: "decline"}
JUDGE_BUCKETS = {0: "garbled", 1: "429"}


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP and len(w) > 2}


def bucket(text: str, salt: str = "") -> int:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) % 20


def default_rule(role: str, question: str) -> str:
    if role == "judge":
        return JUDGE_BUCKETS.get(bucket(question, "judge"), "ok")
    return ANSWER_BUCKETS.get(bucket(question), "ok")


def passages_of(prompt: str) -> dict[int, str]:
    """``[n] header\\nbody`` blocks of a prompt, up to the Question/Answer line."""
    head = re.split(r"\n(?:Question|Answer): ", prompt)[0] if prompt.startswith("Passages") \
        else prompt.split("\nAnswer: ")[0]
    blocks = re.split(r"(?m)^\[(\d+)\] ", head)
    return {int(blocks[i]): blocks[i + 1] for i in range(1, len(blocks) - 1, 2)}


def fake_answer(prompt: str, mode: str) -> str:
    question = re.search(r"Question: (.*)", prompt).group(1)
    passages = passages_of(prompt)
    best = (-1, 1, "")
    for n, text in passages.items():
        for line in text.split("\n")[1:]:
            for sentence in re.split(r"(?<=[.!?])\s+", line.strip()):
                score = len(words(sentence) & words(question))
                if len(sentence.split()) >= 4 and score > best[0]:
                    best = (score, n, sentence.rstrip("."))
    if mode == "decline" or best[0] <= 0:
        return "NOT IN PASSAGES"
    if mode == "invented":
        return f"{best[2]} [9]."
    if mode == "uncited":
        return f"{best[2]}."
    return f"According to the handbook, {best[2][0].lower()}{best[2][1:]} [{best[1]}]."


def fake_verdict(prompt: str) -> dict:
    """The fake judge's rubric: grounded when every sentence cites given passages holding at
    least 70 % of its words; correct when the answer holds at least half the reference's."""
    passages = passages_of(prompt.split("Question: ", 1)[1])
    answer = re.search(r"\nAnswer: (.*)", prompt).group(1)
    reference = re.search(r"\nReference answer: (.*)", prompt).group(1)
    grounded = True
    for sentence in re.split(r"(?<=[.!?\]])\s+(?=[A-Z`])", answer):
        cited = [int(n) for n in re.findall(r"\[(\d+)\]", sentence)]
        claim = words(re.sub(r"\[\d+\]", "", sentence))
        known = set().union(*(words(passages.get(n, "")) for n in cited)) if cited else set()
        if not cited or any(n not in passages for n in cited) or (
                claim and len(claim & known) < 0.7 * len(claim)):
            grounded = False
    ref = words(reference) if reference != "(none)" else set()
    correct = "n/a" if not ref else ("yes" if len(ref & words(answer)) >= 0.5 * len(ref)
                                     else "no")
    return {"grounded": "yes" if grounded else "no", "correct": correct,
            "reason": f"fake judge: grounded={grounded}"}


class FakeLLM:
    """Start with :meth:`start`; ``url`` is the base URL (``.../v1``)."""

    def __init__(self, rule=default_rule, slow_s: float = 2.0, retry_after: str = "1"):
        self.rule, self.slow_s, self.retry_after = rule, slow_s, retry_after
        self.log: list[dict] = []
        self.attempts: dict[tuple, int] = {}
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> "FakeLLM":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                fake.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, role: str | None = None, status: int | None = None) -> list[dict]:
        return [e for e in self.log if (role is None or e["role"] == role)
                and (status is None or e["status"] == status)]

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        body = json.loads(req.rfile.read(int(req.headers["Content-Length"])))
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        role = "judge" if system.startswith("You grade") else "answer"
        question = re.search(r"Question: (.*)", user).group(1)
        mode = self.rule(role, question)
        with self.lock:
            key = (role, user)
            attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        entry = {"role": role, "question": question, "mode": mode, "attempt": attempt,
                 "t": time.monotonic(), "retry_header": req.headers.get("x-stainless-retry-count"),
                 "auth": req.headers.get("Authorization"), "status": "pending", "prompt": user}
        with self.lock:
            self.log.append(entry)
        try:
            self._reply(req, mode, attempt, role, system, user, entry)
        except (BrokenPipeError, ConnectionResetError):
            entry["status"] = "disconnected"
        finally:
            with self.lock:
                self.in_flight -= 1

    def _reply(self, req, mode, attempt, role, system, user, entry) -> None:
        if mode == "401":
            return self._send(req, entry, 401, {"error": {"message": "invalid api key"}})
        if mode == "429" and (attempt == 1 or self.retry_after == "always"):
            return self._send(req, entry, 429, {"error": {"message": "rate limited"}},
                              {"Retry-After": "1" if self.retry_after == "always"
                               else self.retry_after})
        if mode == "500" and attempt == 1:
            return self._send(req, entry, 500, {"error": {"message": "boom"}})
        if mode == "timeout" and attempt == 1:  # past the client's timeout: it has gone
            time.sleep(self.slow_s)
            entry["status"] = "timed out"
            return None
        if mode == "slow":
            time.sleep(self.slow_s)
        if mode == "malformed":
            return self._send(req, entry, 200, b'{"id": "x", "choices": [{"message": ')
        if role == "judge":
            verdict = fake_verdict(user)
            entry["verdict"] = verdict
            content = ("grounded: yes, correct: maybe" if mode == "garbled"
                       else json.dumps(verdict))
        else:
            content = fake_answer(user, mode)
        entry.update(content=content)
        self._complete(req, entry, content, len(system.split()) + len(user.split()))

    def _complete(self, req, entry, content: str, tokens_in: int) -> None:
        """A chat completion of ``content``, its token counts (words) logged on ``entry``."""
        tokens_out = len(content.split())
        entry.update(tokens_in=tokens_in, tokens_out=tokens_out)
        self._send(req, entry, 200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out}})

    @staticmethod
    def _send(req, entry, status: int, payload, headers: dict | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        entry["status"] = status
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(data)


# ``ragexp questions generate --generator llm``: the key's variable, and how the fake replies
# for each document (tests/unit/test_questions_llm.py, the generator contract)
KEY = "RAGEXP_TEST_LLM_KEY"
# document -> how the fake replies for it; any other document: ``passage``
MODES = {"ok": "ok", "dup": "dup", "retry": "retry", "garbled": "garbled",
         "nofield": "nofield", "elsewhere": "elsewhere", "leak": "leak", "slowpoke": "timeout",
         "busy": "429", "nearmiss": "unanswerable", "answered": "unanswerable",
         "wrongkind": "wrongkind", "heading": "heading"}
TOPICS = {"ok": "lease renewal", "dup": "segment sealing", "retry": "retry backoff",
          "garbled": "queue quotas", "nofield": "token scopes", "elsewhere": "broker clocks",
          "leak": "schedule misfires", "slowpoke": "payload limits", "busy": "worker pools",
          "nearmiss": "ledger compaction", "answered": "cluster quorum",
          "wrongkind": "error codes", "heading": "certificate rotation"}
# a question in words no test corpus holds: no retriever finds its evidence (the round trip)
STRAY = "Which zebra migrates northward before winter?"
_SENTENCE = re.compile(r"(.+?[.!?:])(?=\s|$)", re.S)


class GenerationFake(FakeLLM):
    """The shared fake server, replying as a question writer (and as the near-miss checker,
    whose system prompt starts "You check") by the document named in the prompt: its mode in
    ``MODES``, updated by ``modes`` (``{"faq": "heading"}``: document ``faq.md``). Modes
    beyond the drop reasons: ``heading`` quotes the heading the passage is under (its
    section's last title), ``stray`` asks ``STRAY``, and ``passage`` (any document not named)
    asks about words of the passage's first sentence, which it quotes."""

    def __init__(self, *args, modes: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.modes = {**MODES, **(modes or {})}

    def handle(self, req) -> None:
        body = json.loads(req.rfile.read(int(req.headers["Content-Length"])))
        msgs = body["messages"]
        role = "check" if msgs[0]["content"].startswith("You check") else "generate"
        first = msgs[1]["content"]
        doc = (re.search(r"Document: (\S+?)\.md", first).group(1) if role == "generate"
               else re.search(r"for (\S+)\?", first).group(1))
        mode = self.modes.get(doc, "passage")
        with self.lock:
            key = (role, json.dumps(msgs))
            attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
        entry = {"role": role, "question": doc, "mode": mode, "attempt": attempt,
                 "t": time.monotonic(), "status": "pending"}
        with self.lock:
            self.log.append(entry)
        if mode in ("timeout", "429") and attempt == 1:
            return self._reply(req, mode, attempt, role, msgs[0]["content"], first, entry)
        content = self.content(role, doc, mode, msgs)
        entry["reply"] = content
        self._complete(req, entry, content, sum(len(m["content"].split()) for m in msgs))

    @staticmethod
    def content(role: str, doc: str, mode: str, msgs: list[dict]) -> str:
        if role == "check":
            return json.dumps({"answered": doc == "answered"})
        passage = msgs[1]["content"].split("Passage:\n", 1)[1].split("\n\nKind asked:")[0]
        if mode in ("passage", "stray", "heading"):
            return json.dumps(GenerationFake.from_passage(doc, mode, msgs[1]["content"],
                                                          passage))
        quote = passage.split(". ")[0] + "."
        reply = {"question": f"Which setting governs the {TOPICS[doc]} of {doc}?",
                 "answer": " ".join(quote.rstrip(".").split()[-2:]), "quote": quote,
                 "kind": "factual"}
        if mode == "retry" and len(msgs) == 2 or mode == "garbled":
            return "Sure! Here is a question about the passage."
        if mode == "nofield":
            del reply["quote"]
        elif mode == "dup":
            reply["question"] = f"Which setting governs the {TOPICS['ok']} of ok?"
        elif mode == "elsewhere":
            reply["quote"] = "This sentence is written in no document at all."
        elif mode == "leak":
            reply["question"] = f"Is it so that {quote.rstrip('.').lower()}?"
        elif mode == "wrongkind":
            reply["kind"] = "identifier"
        elif mode == "unanswerable":
            reply.update(question=f"Can quantum queues be enabled for {doc}?", answer="",
                         quote="", kind="unanswerable")
        return "```json\n" + json.dumps(reply) + "\n```" if doc == "ok" else json.dumps(reply)

    @staticmethod
    def from_passage(doc: str, mode: str, prompt: str, passage: str) -> dict:
        """A factual question on the passage's first sentence (the quote), its answer the
        sentence's last two words and its question four other words of it; ``stray`` asks
        ``STRAY`` instead, ``heading`` quotes the section's last title."""
        found = _SENTENCE.match(passage)
        quote = found.group(1) if found else passage
        answer = " ".join(quote.rstrip(".!?:").split()[-2:])
        taken = words(answer)
        asked = [w for w in dict.fromkeys(WORD.findall(quote.lower()))
                 if w not in STOP and len(w) > 3 and w not in taken][:4]
        question = STRAY if mode == "stray" else f"What about {' '.join(asked)} in {doc}?"
        if mode == "heading":
            quote = re.search(r"Section: (.*)", prompt).group(1).split(" > ")[-1]
        return {"question": question, "answer": answer, "quote": quote, "kind": "factual"}
