"""A client for any OpenAI-compatible chat endpoint: the network edge of ``answer=llm`` and
``judge=llm``.

Built on the ``openai`` package, which retries 408/409/429/5xx responses, timeouts and
connection errors with exponential backoff (0.5 s doubling to at most 8 s, minus up to 25 %
jitter) and honours a ``Retry-After`` / ``retry-after-ms`` header of up to 120 s (a longer one
is not retried). Retries are counted from the HTTP requests each call actually sent. Around it this module adds what a measurement
needs: the API key read from an environment variable named in config and checked when the
client is built (before any work), a concurrency limit, token counts as reported by the
endpoint's ``usage``, and cost from a per-1M-token price table.

A call that still fails is a :class:`Completion` with ``error`` set, except for errors that
will fail every call the same way (401, 403, 404: wrong key, no access, unknown model or URL),
which raise :class:`LLMError` at once.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from tqdm import tqdm

from ragexp import settings
from ragexp.errors import RagexpError

Messages = list[dict[str, str]]


class LLMError(RagexpError, RuntimeError):
    """A configuration or endpoint error that no retry fixes."""


# What a stage's ``max_tokens`` accepts (``answer.max_tokens``, ``judge.max_tokens``,
# ``generator.max_tokens``): how long a reply the stage asks its endpoint for.
MAX_TOKENS = {"ge": 1}


def endpoint_problems(e, at: str) -> list[str]:
    """An endpoint (or its config node ``e`` at key ``at``) names a ``base_url`` and a
    ``model``, and its ``timeout`` and prices are finite numbers."""
    out = [f"{at}.{key} is empty: give {what}" for key, what in (
        ("base_url", "a URL such as https://api.openai.com/v1 or http://localhost:11434/v1"),
        ("model", "a model name")) if not str(getattr(e, key) or "").strip()]
    for key in ("timeout", "price_in_per_mtok", "price_out_per_mtok"):
        value = getattr(e, key)
        if isinstance(value, (int, float)) and not math.isfinite(value):
            out.append(f"{at}.{key}={value!r} is invalid: must be a finite number")
    return out


# the shared ``llm`` node and each stage's own, which composition checks as a stage would
ENDPOINT_NODES = ("llm", "answer.llm", "judge.llm", "generator.llm")
ENDPOINT_RULES = tuple(settings.rule_for(key, ("base_url", "model"), endpoint_problems)
                       for key in ENDPOINT_NODES)


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and how to call it: the config's ``llm`` node, and
    each stage's ``llm`` (``answer.llm``, ``judge.llm``, ``generator.llm``), whose keys default
    to ``llm.*``. Its fields declare what they accept (``settings``): the config schemas are
    generated from them (``config.schema``).

    ``timeout`` is seconds per attempt; prices are USD per 1,000,000 tokens; ``max_error_rate``
    is the share of calls failing (or unreadable) that fails a run (the answerer's and the
    judge's). ``where`` is the config key of this endpoint (``answer.llm``), set by the stage
    that calls it (``at``): its values are checked then, so that an error names the key the
    user types (Hydra builds a stage's ``llm`` node before the stage, which cannot say where
    it is). Raises LLMError, once placed, on a value out of range (``endpoint_problems``).
    """

    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: Optional[str] = "OPENAI_API_KEY"  # None: an endpoint without authentication
    timeout: float = field(default=60.0, metadata={"gt": 0})
    # on 408/409/429/5xx, timeouts and connection errors
    max_retries: int = field(default=4, metadata={"ge": 0, "le": 20})
    # requests in flight at once
    concurrency: int = field(default=4, metadata={"ge": 1, "le": 64})
    temperature: float = field(default=0.0, metadata={"ge": 0, "le": 2})
    # None: cost not logged
    price_in_per_mtok: Optional[float] = field(default=None, metadata={"ge": 0})
    price_out_per_mtok: Optional[float] = field(default=None, metadata={"ge": 0})
    max_error_rate: float = field(default=0.1, metadata={"ge": 0, "le": 1})
    where: Optional[str] = field(default=None, metadata=settings.BUILT)  # None: not placed yet

    def __post_init__(self) -> None:
        if self.where is not None:
            settings.check(self, self.where, endpoint_problems(self, self.where),
                           error=LLMError)

    def at(self, where: str) -> Endpoint:
        """This endpoint placed at the config key ``where`` (``answer.llm``): checked, its error
        messages naming that key. Raises LLMError on a value out of range."""
        return replace(self, where=where)

    def api_key(self) -> str:
        """The key from the environment variable ``api_key_env`` names; raises LLMError when
        that variable is unset or empty. ``api_key_env: null`` means no authentication."""
        if self.api_key_env is None:
            return "no-key"
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise LLMError(
                f"{self.where}.api_key_env names the environment variable {self.api_key_env!r}, "
                f"which is not set or empty: export {self.api_key_env}=<your key> before the run, "
                f"or set {self.where}.api_key_env (or llm.api_key_env) to the variable that holds "
                f"it (null for an endpoint without authentication)")
        return key

    def cost_usd(self, tokens_in: int, tokens_out: int) -> float | None:
        """``tokens_in * price_in / 1e6 + tokens_out * price_out / 1e6``; None without a price."""
        if self.price_in_per_mtok is None or self.price_out_per_mtok is None:
            return None
        return tokens_in * self.price_in_per_mtok / 1e6 + tokens_out * self.price_out_per_mtok / 1e6


@dataclass(frozen=True)
class Completion:
    """One chat call's outcome: ``text`` (None when it failed, with ``error`` saying why),
    the token counts the endpoint reported, and the retries it took."""

    text: Optional[str]
    tokens_in: int = 0
    tokens_out: int = 0
    retries: int = 0
    error: str = ""


class ChatClient:
    """Chat completions against one :class:`Endpoint`, each reply at most ``max_tokens``
    tokens (the calling stage's ``max_tokens``); built eagerly so that a missing key fails
    before any work."""

    def __init__(self, endpoint: Endpoint, max_tokens: int = 400):
        # defer heavy import
        import openai

        # an endpoint no stage placed is checked as the shared ``llm`` node
        endpoint = endpoint if endpoint.where is not None else endpoint.at("llm")
        self.endpoint, self.max_tokens = endpoint, max_tokens
        self._openai = openai
        key = endpoint.api_key()
        # Counts HTTP attempts per calling thread (the sync client retries on that thread), so
        # retries are exact whether the call ends in success or in an error.
        self._attempts = threading.local()
        http = openai.DefaultHttpxClient(event_hooks={"request": [self._count_attempt]})
        self._client = openai.OpenAI(base_url=endpoint.base_url, api_key=key, http_client=http,
                                     timeout=endpoint.timeout, max_retries=endpoint.max_retries)

    def _count_attempt(self, request) -> None:
        self._attempts.n = getattr(self._attempts, "n", 0) + 1

    def _retries(self) -> int:
        return max(getattr(self._attempts, "n", 0) - 1, 0)

    def complete(self, messages: Messages) -> Completion:
        """One chat completion. Returns a Completion (``error`` set when the endpoint failed
        after its retries or replied with something that is not a chat completion); raises
        LLMError for 401/403/404."""
        ep, oa = self.endpoint, self._openai
        self._attempts.n = 0
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=ep.model, messages=messages, temperature=ep.temperature,
                max_tokens=self.max_tokens)
            reply = raw.parse()
            text = reply.choices[0].message.content or ""
            usage = reply.usage
            return Completion(text, int(usage.prompt_tokens) if usage else 0,
                              int(usage.completion_tokens) if usage else 0, self._retries())
        except (oa.AuthenticationError, oa.PermissionDeniedError, oa.NotFoundError) as exc:
            raise LLMError(f"{ep.where}: {ep.base_url} refused the call ({exc.status_code}) for "
                           f"model {ep.model!r}: {_short(exc)}; check {ep.where}.base_url, "
                           f"{ep.where}.model and the key in ${ep.api_key_env}") from exc
        except (oa.APITimeoutError, oa.APIConnectionError) as exc:
            return Completion(None, retries=self._retries(),
                              error=f"{type(exc).__name__} after {self._retries()} retries: "
                                    f"{_short(exc)}")
        except oa.APIStatusError as exc:
            return Completion(None, retries=self._retries(),
                              error=f"HTTP {exc.status_code} after {self._retries()} retries: "
                                    f"{_short(exc)}")
        except (oa.APIResponseValidationError, ValueError, AttributeError, IndexError,
                TypeError) as exc:  # a body that is not a chat completion (malformed JSON...)
            return Completion(None, retries=self._retries(),
                              error=f"malformed reply: {type(exc).__name__}: {_short(exc)}")

    def complete_all(self, conversations: Sequence[Messages], progress: bool = False,
                     desc: str = "llm") -> list[Completion]:
        """Every conversation, at most ``concurrency`` in flight, results in input order."""
        if not conversations:
            return []
        with ThreadPoolExecutor(max_workers=self.endpoint.concurrency) as pool, \
                tqdm(total=len(conversations), desc=desc, disable=not progress) as bar:
            futures = [pool.submit(self.complete, m) for m in conversations]
            out = []
            try:
                for future in futures:
                    out.append(future.result())
                    bar.update(1)
            except BaseException:  # LLMError or Ctrl-C: do not send the calls still queued
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            return out


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
