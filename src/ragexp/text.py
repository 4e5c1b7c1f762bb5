"""Text analysis shared by BM25, the abstain signal, the answerer and the golden-set checks.

One analyser everywhere, so that "the query's terms" mean the same thing to the retriever that
ranks, the signal that refuses and the checker that says a paraphrase is a paraphrase.
"""

from __future__ import annotations

import re
from functools import lru_cache

from py_rust_stemmers import SnowballStemmer

# A compact English stopword list (function words only: content words must survive).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves i'm it's don't
    also get got may might must shall us via per e g eg ie etc one""".split()
)

# A token is a run of letters/digits, optionally joined by - _ . into a compound such as
# BD-2110, max_payload_bytes or brindle.toml.  A trailing '.' (end of sentence) is not joined.
_TOKEN = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*")
_JOINERS = re.compile(r"[-_.]")
_STEMMER = SnowballStemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball (Porter2) stem of one lowercase word."""
    return _STEMMER.stem_word(word)


def _parts(token: str) -> list[str]:
    return [stem(p) for p in _JOINERS.split(token) if p and p not in STOPWORDS]


def tokenize(text: str) -> list[str]:
    """Index/query terms: stemmed content words, plus each compound kept whole.

    ``BD-2110`` yields ``bd-2110``, ``bd`` and ``2110``, so an identifier matches both whole
    (precise) and by its parts (a user typing "2110" still finds it).
    """
    terms: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        token = match.group()
        if _JOINERS.search(token):
            terms.append(token)
        terms.extend(_parts(token))
    return terms


def content_words(text: str) -> set[str]:
    """Set of stemmed content words (compounds split into parts), used for overlap checks."""
    words: set[str] = set()
    for match in _TOKEN.finditer(text.lower()):
        words.update(_parts(match.group()))
    return words


# A sentence ends at . ! or ? followed by space and something that can start a sentence.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[*0-9])")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences at terminal punctuation followed by a capital-like start."""
    return [s.strip() for s in SENTENCE_BREAK.split(text) if s.strip()]


def normalize_ws(text: str) -> tuple[str, list[int]]:
    """Collapse every whitespace run to one space; return the text and, for each of its
    characters, the offset of the character it came from in ``text``.

    This is what lets a hard-wrapped quote match its document and still map back to exact
    source offsets.
    """
    out: list[str] = []
    offsets: list[int] = []
    in_space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not in_space and out:
                out.append(" ")
                offsets.append(i)
            in_space = True
        else:
            out.append(ch)
            offsets.append(i)
            in_space = False
    if out and out[-1] == " ":
        out.pop()
        offsets.pop()
    return "".join(out), offsets
