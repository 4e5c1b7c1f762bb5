"""What the embedder's token window cut: passages and questions longer than the model reads.

A model such as MiniLM reads at most its window (256 tokens, special tokens included) and
embeds a longer text as its first tokens only, saying nothing. A run counts, in the model's own
tokens (``TokenCounter.counts``, nothing cut), the passages (chunks, as embedded) and questions
over the window and the longest of each, logs them as ``truncation.*`` metrics with the window
as the tag ``embedder.window_tokens``, and warns naming the longest few. An embedder without a
window (the hash embedder reads every term) is tagged ``none`` and logs no counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ragexp.errors import listed
from ragexp.index.resources import Resources

log = logging.getLogger(__name__)
WINDOW_TAG = "embedder.window_tokens"
NO_WINDOW = "none (reads every term: nothing is cut)"
NAMED = 3  # ids a warning names


@dataclass(frozen=True)
class OverWindow:
    """Texts of one kind (``what``: passages or questions) against a window: how many there
    are (``total``), the ids over it, longest first, and the longest text's tokens (0 for
    none)."""

    what: str
    total: int
    over: tuple[str, ...]
    longest: int

    @classmethod
    def count(cls, what: str, ids: list[str], tokens: np.ndarray, window: int) -> OverWindow:
        """``tokens`` (len(ids),) counts as the model is given them; over = ``tokens >
        window``."""
        order = np.argsort(-tokens, kind="stable")
        over = tuple(ids[i] for i in order if tokens[i] > window)
        return cls(what, len(ids), over, int(tokens.max()) if len(tokens) else 0)

    def warn(self, window: int, special: int, hint: str) -> None:
        """One warning line naming up to ``NAMED`` ids, when any text is over the window;
        ``special`` is how many of the window's tokens the model adds itself ([CLS], [SEP] and
        any prefix), so it reads ``window - special`` of a text's own tokens."""
        if self.over:
            log.warning("%d of %d %s are longer than the embedder's window of %d tokens "
                        "(longest %d): the model reads only their first %d tokens of text "
                        "(the window's other %d are the model's own special tokens)%s: %s",
                        len(self.over), self.total, self.what, window, self.longest,
                        window - special, special, hint, listed(self.over, NAMED))


def facts(res: Resources, questions: dict[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """``(metrics, tags)`` of a run's window: ``truncation.passages_over_window``,
    ``truncation.questions_over_window``, ``truncation.longest_passage_tokens`` and
    ``truncation.longest_question_tokens``, with the tag ``embedder.window_tokens``; the tag
    ``none`` alone for an embedder without a window; nothing when no stage used the embedder
    (the model read nothing). ``questions`` is ``{qid: text}``."""
    if not res.embedder_used:
        return {}, {}
    tokens = res.embedder.tokens()
    if tokens is None:
        return {}, {WINDOW_TAG: NO_WINDOW}
    passages = OverWindow.count("passages", [c.chunk_id for c in res.chunks],
                                res.passage_tokens(tokens), tokens.window)
    asked = OverWindow.count("questions", list(questions),
                             tokens.counts(list(questions.values()), "query"), tokens.window)
    special = {mode: int(tokens.counts([""], mode)[0]) for mode in ("passage", "query")}
    passages.warn(tokens.window, special["passage"], " (chunking.max_tokens, or chunking.windows=maxp under "
                                 "chunking=none, reads all of them)")
    asked.warn(tokens.window, special["query"], "")
    return ({"truncation.passages_over_window": float(len(passages.over)),
             "truncation.questions_over_window": float(len(asked.over)),
             "truncation.longest_passage_tokens": float(passages.longest),
             "truncation.longest_question_tokens": float(asked.longest)},
            {WINDOW_TAG: str(tokens.window)})
