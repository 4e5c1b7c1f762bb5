"""Simulated known-item queries, offline and deterministic: no model.

After Azzopardi, de Rijke & Balog, "Building simulated queries for known-item topics" (SIGIR
2007). For a target passage ``d`` a query is built by drawing a length ``l`` (Poisson with mean
``mean_length``, clipped to ``[min_length, max_length]``) and then ``l`` terms, with
replacement, from

    p(t | q) = (1 - lam) * p(t | d) + lam * p(t),      p(t) = cf(t) / |C|

where ``p(t)`` is the collection model (the paper's noise: terms the user recalls wrongly; off
by default, ``lam = 0``) and ``p(t | d)`` is the paper's term-selection strategy:

- ``popular``:        p(t | d) = tf(t, d) / |d|
- ``discriminative``: p(t | d) = b(t, d) / (p(t) * sum_t' b(t', d) / p(t'))   (b: t in d)

Terms are the passage's words (``text.analysis.words``, compounds whole) less stopwords; a
term drawn twice is written once. Only a ``Drawable`` term is drawn, from the passage and from
the collection alike: no number (``13 75 associated endometrial``) or function word
(``FUNCTION_WORDS``) unless the passage's heading path holds it, and no word glued by markup
conversion (``capabilitytop-level``, ``xlinkedin``). The evidence is the fewest sentences of
the passage that hold every drawn term found in it (greedy cover), each a verbatim quote; the
reference answer is those sentences. Its bias is lexical by construction: the query shares its
words with the passage, so it favours lexical retrievers (``docs/questions.md``).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from ragexp import settings
from ragexp.errors import InvalidValue
from ragexp.generate.passages import Job, Passage
from ragexp.records import Document
from ragexp.text.analysis import STOPWORDS, split_sentences, words

STRATEGIES = ("popular", "discriminative")
KIND = "known_item"
# Closed-class English words the analyser's STOPWORDS leave in (pronouns, determiners,
# prepositions, conjunctions, adverbs of degree and time) and number words: a retriever matches
# them, but no user recalls a page by them. Drawn only when the heading names them.
FUNCTION_WORDS = frozenset("""
    across afterwards along already although always amid among amongst another anybody anyhow
    anyone anything anyway anywhere around away behind beside besides beyond cannot despite
    either else elsewhere even ever every everybody everyone everything everywhere except
    hence however indeed inside instead like likewise many meanwhile moreover much near
    neither never nevertheless next nobody none nonetheless nothing nowhere often onto
    otherwise outside perhaps quite rather really several since somebody someone something
    sometimes somewhat somewhere still thereby therefore therein thereof though throughout thus
    together toward towards unless unlike upon usually whatever whenever whereas whereby
    wherever whether whichever whoever whose within without yet
    zero two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty
    sixty seventy eighty ninety hundred thousand million billion first second third once twice
""".split())
_JOINER = re.compile(r"[-_.\u2010]")
_CODE = re.compile(r"`+[^`]*`+")
_CASE_CUT = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def terms(text: str) -> list[str]:
    """Query terms of ``text`` in order: normalised words, compounds whole, stopwords and
    one-character words left out."""
    return [w for w in words(text) if w not in STOPWORDS and len(w) > 1]


def collection_model(docs: Sequence[Document]) -> dict[str, float]:
    """``p(t) = cf(t) / |C|`` over every document's ``terms``, keys sorted."""
    cf = Counter(t for d in docs for t in terms(d.text))
    total = sum(cf.values())
    return {t: cf[t] / total for t in sorted(cf)}


def is_number(term: str) -> bool:
    """A term without a letter: ``13``, ``3.14``, ``2024-01-02``. ``bd-3002``, ``v2`` and
    ``ok_13`` hold letters: identifiers, always drawable."""
    return not any(ch.isalpha() for ch in term)


def glued(word: str, raw: str, cf: Counter) -> bool:
    """Whether ``word`` (one part of a compound, as ``text.analysis.words`` reads it) is two
    words run together by markup conversion: a converter that drops the tag between a link's,
    list item's or cell's text and the next one joins them, and the next one usually starts
    with a capital (``capabilityTop-level``, ``XLinkedIn``). So: in ``raw`` (the passage's
    text, inline code left out: ``producerToken`` there is an identifier) the word is written
    with a case change inside it (a capital after a lower-case letter, or a capital after a
    capital before a lower-case one), and cut there it gives two words, neither a stopword, each
    found on its own in the collection more often than ``word`` (``cf``: ``word_parts``).
    ``LinkedIn`` alone is kept (``in`` is a stopword), as is a glue in lower case only
    (``capabilitytop``): without a dictionary it cannot be told from a compound (``backend``,
    ``hostname``)."""
    if not (word.isalpha() and word.isascii()):
        return False
    found = re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])",
                      _CODE.sub(" ", raw), re.IGNORECASE)
    if found is None:
        return False
    whole = cf.get(word, 0)
    for m in _CASE_CUT.finditer(found.group()):
        a, b = word[:m.start()], word[m.start():]
        if a not in STOPWORDS and b not in STOPWORDS and min(cf.get(a, 0), cf.get(b, 0)) > whole:
            return True
    return False


def word_parts(docs: Sequence[Document]) -> Counter:
    """Occurrences of each word part in ``docs`` (a compound's parts, split at its joiners)."""
    return Counter(p for d in docs for w in words(d.text) for p in _JOINER.split(w) if p)


@dataclass(frozen=True)
class Drawable:
    """Which terms a passage may give a query: a term that is no number (``is_number``) and no
    function word (``FUNCTION_WORDS``), unless the passage is about it (the term is a word of
    its heading path: ``404`` under "Error 404"), and none of whose parts is ``glued``
    (``cf``: ``word_parts`` of the collection; ``raw``: the passage's text)."""

    cf: Counter
    heading: frozenset[str] = frozenset()
    raw: str = ""

    def __call__(self, term: str) -> bool:
        if (is_number(term) or term in FUNCTION_WORDS) and term not in self.heading:
            return False
        return not any(glued(p, self.raw, self.cf) for p in _JOINER.split(term) if p)


def query_model(passage_terms: Sequence[str], collection: dict[str, float], strategy: str,
                lam: float, noise: dict[str, float] | None = None) -> dict[str, float]:
    """``p(t | q)`` above, over the passage's terms and the collection's, keys sorted; sums to
    1. ``noise`` is the distribution the ``lam`` share is drawn from (default ``collection``;
    the generator gives it the collection model over drawable terms, renormalised).
    Raises ``InvalidValue`` for an unknown strategy or a passage without terms."""
    if not passage_terms:
        raise InvalidValue("a passage without terms has no query model")
    tf = Counter(passage_terms)
    if strategy == "popular":
        p_doc = {t: n / len(passage_terms) for t, n in tf.items()}
    elif strategy == "discriminative":
        norm = sum(1 / collection[t] for t in tf)
        p_doc = {t: 1 / (collection[t] * norm) for t in tf}
    else:
        raise InvalidValue(f"known_item strategy {strategy!r} is not one of "
                           f"{', '.join(STRATEGIES)}")
    noise = collection if noise is None else noise
    vocab = sorted(set(noise) | set(p_doc))
    return {t: (1 - lam) * p_doc.get(t, 0.0) + lam * noise.get(t, 0.0) for t in vocab}


def draw_terms(rng: np.random.Generator, model: dict[str, float], n: int) -> list[str]:
    """``n`` terms drawn with replacement from ``model`` (a distribution over sorted keys)."""
    vocab = list(model)
    probs = np.fromiter(model.values(), dtype=float, count=len(vocab))
    return [vocab[i] for i in rng.choice(len(vocab), size=n, p=probs / probs.sum())]


def cover(sentences: Sequence[str], drawn: set[str]) -> list[str]:
    """The fewest sentences (greedy set cover, ties to the earlier one) holding every drawn term
    that any sentence holds, in passage order."""
    held = [set(terms(s)) & drawn for s in sentences]
    left, chosen = set().union(*held) if held else set(), []
    while left:
        best = max(range(len(sentences)), key=lambda i: (len(held[i] & left), -i))
        chosen.append(best)
        left -= held[best]
    return [sentences[i] for i in sorted(chosen)]


@dataclass
class KnownItemGenerator:
    """Known-item queries (the module's formula). ``strategy`` is ``popular`` or
    ``discriminative``; ``lam`` in [0, 1] the weight of the collection model (noise);
    lengths in terms. Raises ``InvalidValue`` on a value out of range."""

    strategy: str = "popular"  # popular (tf) or discriminative (1 / p(t)): the paper's two
    lam: float = field(default=0.0, metadata={"ge": 0, "le": 1})  # weight of the collection model
    mean_length: float = field(default=3.0, metadata={"gt": 0})  # Poisson mean, in terms
    min_length: int = field(default=2, metadata={"ge": 1})
    max_length: int = field(default=6, metadata={"ge": 1})
    name: ClassVar[str] = KIND
    kinds: ClassVar[tuple[str, ...]] = (KIND,)
    model: ClassVar[str | None] = None
    prompt_sha256: ClassVar[str | None] = None
    _collection: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _noise: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _cf: Counter = field(default_factory=Counter, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidValue(f"generator.strategy={self.strategy!r} is not one of "
                               f"{', '.join(STRATEGIES)}")
        settings.check(self, "generator")
        if not 1 <= self.min_length <= self.max_length:
            raise InvalidValue(f"generator.min_length={self.min_length} and max_length="
                               f"{self.max_length} need 1 <= min_length <= max_length")

    def settings(self) -> dict:
        """What the generator was run with, for each question's provenance."""
        return {"name": self.name, "strategy": self.strategy, "lam": self.lam,
                "mean_length": self.mean_length, "min_length": self.min_length,
                "max_length": self.max_length}

    def prepare(self, docs: Sequence[Document], passages: Sequence[Passage]) -> None:
        """The collection model, the occurrences of each word part (``word_parts``) and the noise:
        the collection model over terms drawable anywhere (``Drawable`` with no heading),
        renormalised (empty with ``lam = 0``: nothing is drawn from it)."""
        self._collection = collection_model(docs)
        self._cf = word_parts(docs)
        if self.lam > 0:
            anywhere = Drawable(self._cf)
            kept = {t: p for t, p in self._collection.items() if anywhere(t)}
            total = sum(kept.values())
            self._noise = {t: p / total for t, p in kept.items()}

    def write(self, batch: Sequence[Job], seed: int) -> list[dict | str]:
        """For each job a question record (``question``, ``kind``, ``answer``, ``evidence``) or
        the reason it was dropped; job ``j``'s draws use a generator seeded by ``seed`` and
        ``j.key`` alone, so a rerun or a resumed file draws the same."""
        return [self._one(job, seed) for job in batch]

    def _one(self, job: Job, seed: int) -> dict | str:
        drawable = Drawable(self._cf, frozenset(words(job.passage.section)), job.passage.text)
        p_terms = [t for t in terms(job.passage.text) if drawable(t)]
        if not p_terms:
            return "no_passage_term"
        key = int(hashlib.sha256(job.key.encode()).hexdigest()[:12], 16)
        rng = np.random.default_rng([seed, key])
        length = int(np.clip(rng.poisson(self.mean_length), self.min_length, self.max_length))
        drawn = draw_terms(rng, query_model(p_terms, self._collection, self.strategy, self.lam,
                                            self._noise), length)
        query = list(dict.fromkeys(drawn))
        evidence = cover(split_sentences(job.passage.text), set(query) & set(p_terms))
        if not evidence:
            return "no_passage_term"
        return {"question": " ".join(query), "kind": KIND,
                "answer": " ".join(" ".join(s.split()) for s in evidence),
                "evidence": [{"doc": job.passage.doc_id, "quote": s} for s in evidence]}
