"""Text analysis shared by BM25, the hash embedder, the lexical reranker, the abstain signal, the
answerer and the golden-set checks.

One analyser everywhere, so that "the query's terms" mean the same thing to the retriever that
ranks, the signal that refuses and the checker that says a paraphrase is a paraphrase. The rule:

1. **Normalise** (``normalize``): Unicode NFKC, then full case folding, then NFKC again, and drop
   default-ignorable code points (soft hyphen, zero-width space/joiners): the NFKC_Casefold of
   Unicode (UAX #15 / #44). Full-width ``ＢＤ－１２３４`` reads ``bd-1234``, ``ﬁ`` reads ``fi``,
   ``ß`` and ``SS`` both read ``ss``. Folding is locale-free (no Turkish dotless-i rule).
2. **Words** (``words``): runs of letters, combining marks and digits of every script
   (``[\\p{L}\\p{M}\\p{N}]+``), joined into one compound by single ``-``, ``_``, ``.`` or
   ``‐`` between them: ``BD-2110``, ``max_payload_bytes``, ``brindle.toml``, ``3.14``. A
   sentence-final dot is not a joiner.
3. **Terms** (``tokenize``): a compound is kept whole *and* split into its parts, so an
   identifier matches whole (precise) and by parts (a user typing "2110" still finds it). Each
   part becomes terms by script:

   - ASCII words: English stopwords dropped, Snowball (Porter2) English stem;
   - words of scripts written without spaces between words (Han, Hiragana, Katakana, Hangul,
     Thai, Lao, Khmer, Myanmar): each run yields its character unigrams and adjacent bigrams
     (characters are grapheme clusters), in text order. Bigrams are what Lucene's CJK analyzer
     indexes (``CJKBigramFilter``: most Chinese and Japanese words are two characters long, so
     bigrams are precise); unigrams are added, as Elasticsearch's ``cjk_bigram`` does with
     ``output_unigrams``, so that one-character words and one-character queries still match.
     Lucene bigrams Hangul too (Korean attaches particles to words, so bigrams help there); we
     follow it. Word segmentation by dictionary (ICU, MeCab) would be better still, but needs
     per-language resources this analyser does not assume;
   - every other word (Cyrillic, Greek, accented Latin such as ``größte`` ...): kept whole,
     folded, never stemmed. An English stemmer or stopword list applied to another language
     mangles it, and the analyser does not guess languages.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import regex
from py_rust_stemmers import SnowballStemmer

# Part of the hash embedder's identity: bump it whenever the terms a text yields change, so that
# cached vectors computed under an older rule are never reused.
ANALYZER = "unicode-1"

# A compact English stopword list (function words only: content words must survive).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    also get got may might must shall us via per e g eg ie etc one""".split()
)

_WORD = r"[\p{L}\p{M}\p{N}]+"
_JOIN = r"[-_.\u2010]"
_COMPOUND = regex.compile(rf"{_WORD}(?:{_JOIN}{_WORD})*")
_JOINERS = regex.compile(_JOIN)
# The same two patterns restricted to ASCII text (where \p{L}\p{M}\p{N} is [a-z0-9] once
# folded), run by the faster ``re``: most corpora are mostly ASCII.
_ASCII_COMPOUND = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*")
_ASCII_JOINERS = re.compile(r"[-_.]")
_SPACELESS = (r"\p{Han}\p{scx=Hiragana}\p{scx=Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}"
              r"\p{Myanmar}")
# A part splits into runs of spaceless-script characters (with their combining marks) and the rest.
_RUNS = regex.compile(rf"(?P<spaceless>(?:[{_SPACELESS}]\p{{M}}*)+)|[^{_SPACELESS}]+")
_HAS_SPACELESS = regex.compile(rf"[{_SPACELESS}]")
_GRAPHEME = regex.compile(r"\X")
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
_STEMMER = SnowballStemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball (Porter2) English stem of one lowercase ASCII word."""
    return _STEMMER.stem_word(word)


def normalize(text: str) -> str:
    """NFKC_Casefold: ``NFKC(casefold(NFKC(text)))`` without default-ignorable code points.
    ASCII text takes a fast path (its NFKC is itself and its case fold is ``lower()``)."""
    if text.isascii():
        return text.lower()
    text = _IGNORABLE.sub("", unicodedata.normalize("NFKC", text))
    return unicodedata.normalize("NFKC", text.casefold())


def words(text: str) -> list[str]:
    """The normalised words of ``text``, compounds whole (``"BD-2110 fails"`` ->
    ``["bd-2110", "fails"]``). Terms are a function of this list alone: re-joining it with
    spaces and analysing again gives the same terms."""
    text = normalize(text)
    return (_ASCII_COMPOUND if text.isascii() else _COMPOUND).findall(text)


def _spaceless_terms(run: str) -> list[str]:
    chars = _GRAPHEME.findall(run)
    out = [chars[0]]
    for prev, ch in zip(chars, chars[1:]):
        out += [prev + ch, ch]
    return out


@lru_cache(maxsize=200_000)
def _part_terms(part: str) -> tuple[str, ...]:
    """Terms of one part of a compound (see the module docstring, step 3)."""
    if part.isascii():
        return () if part in STOPWORDS else (stem(part),)
    if not _HAS_SPACELESS.search(part):
        return (part,)
    out: list[str] = []
    for m in _RUNS.finditer(part):
        piece = m.group()
        if m.group("spaceless"):
            out += _spaceless_terms(piece)
        elif regex.search(_WORD, piece):
            out += _part_terms(piece)
    return tuple(out)


def _parts(word: str, joiners=_JOINERS) -> list[str]:
    return [t for p in joiners.split(word) if p for t in _part_terms(p)]


def tokenize(text: str) -> list[str]:
    """Index/query terms, in text order: each compound whole, then its parts' terms.

    ``"Error BD-2110"`` -> ``["error", "bd-2110", "bd", "2110"]``; ``"größte"`` ->
    ``["grösste"]``; ``"東京"`` -> ``["東", "東京", "京"]``. Empty for text without words or
    with stopwords only.
    """
    text = normalize(text)
    return piece_terms(text, text.isascii())


def pieces(text: str) -> tuple[list[str], bool]:
    """``text`` normalised and split at whitespace, and whether it is ASCII (which rule its
    pieces follow): ``tokenize(text)`` is the concatenation of ``piece_terms(p, ascii)`` over
    these pieces, since no word holds a whitespace character (``str.isspace``: none is a letter,
    mark, digit or joiner). Lets a corpus analyse each distinct piece once
    (``TokenMatrix.build``)."""
    text = normalize(text)
    return text.split(), text.isascii()


def terms_of_pieces(batch: list[str], ascii: bool) -> list[list[str]]:
    """``[piece_terms(p, ascii) for p in batch]``, faster for many pieces: by the ASCII rule a
    piece that is one plain word (``[a-z0-9]+``) yields nothing if it is a stopword, else its
    stem, and all those stems come from one call of the stemmer."""
    if not ascii:
        return [piece_terms(p, False) for p in batch]
    plain = [p for p in batch if p.isalnum() and p not in STOPWORDS]
    stems = dict(zip(plain, _STEMMER.stem_words(plain)))
    return [[stems[p]] if p in stems else [] if p.isalnum() else piece_terms(p, True)
            for p in batch]


def piece_terms(piece: str, ascii: bool) -> list[str]:
    """Terms of normalised text by the ASCII rule (``ascii``) or the general one: those one
    piece of ``pieces(text)`` (``ascii`` as ``pieces`` returned it) contributes to
    ``tokenize(text)``, in order. A whole normalised text is one piece too."""
    compound, known = (_ASCII_COMPOUND, _ascii_word_terms) if ascii else (_COMPOUND,
                                                                            _general_word_terms)
    terms: list[str] = []
    for word in compound.findall(piece):
        terms.extend(known(word))
    return terms


# The terms of each distinct word, computed once per process (bm25s stems each distinct word
# once too): a word's terms depend on the word alone, so the per-occurrence work is one lookup
# (a memo of a pure function, not state: it cannot change a result).
_MAX_KNOWN_WORDS = 2_000_000


@lru_cache(maxsize=_MAX_KNOWN_WORDS)
def _ascii_word_terms(word: str) -> tuple[str, ...]:
    return _word_terms(word, _ASCII_JOINERS)


@lru_cache(maxsize=_MAX_KNOWN_WORDS)
def _general_word_terms(word: str) -> tuple[str, ...]:
    return _word_terms(word, _JOINERS)


def _word_terms(word: str, joiners) -> tuple[str, ...]:
    """Terms of one compound word: the compound whole, then its parts' terms (step 3)."""
    if joiners.search(word):
        return (word, *_parts(word, joiners))
    return _part_terms(word)


def content_words(text: str) -> set[str]:
    """Set of the terms of every part (compounds split, not kept whole), for overlap checks."""
    return {t for word in words(text) for t in _parts(word)}


def word_count(text: str) -> int:
    """Number of words, a compound counting as one and each character (grapheme) of a spaceless
    script as one: the length of a sentence in any script."""
    n = 0
    for word in words(text):
        if not _HAS_SPACELESS.search(word):
            n += 1
            continue
        for m in _RUNS.finditer(word):
            if m.group("spaceless"):
                n += len(_GRAPHEME.findall(m.group()))
            elif regex.search(_WORD, m.group()):
                n += 1
    return n


# A sentence ends at . ! or ? followed by space and something that can start a sentence (an
# upper- or title-case letter, a letter of a script without case (Han, Arabic, ...), a digit, a
# quote or a bracket), or right after a CJK full stop, exclamation or question mark (those
# scripts put no space after them).
# What a chunk's size counts: a whitespace-separated token, except that each character
# (grapheme) of a spaceless script counts alone, as ``word_count`` counts it. Unlike
# ``word_count`` it keeps punctuation-only tokens, so it can cut text at any of them.
LAYOUT_WORD = regex.compile(rf"(?:[{_SPACELESS}]\p{{M}}*)|[^\s{_SPACELESS}]+")


def layout_word_count(text: str) -> int:
    """Number of ``LAYOUT_WORD`` matches in ``text``: ``len(text.split())`` for text without a
    spaceless script, one per character of Chinese, Japanese, Thai and the like."""
    if text.isascii():
        return len(text.split())
    return sum(1 for _ in LAYOUT_WORD.finditer(text))


SENTENCE_BREAK = regex.compile(
    r"(?<=[.!?])\s+(?=[\p{Lu}\p{Lt}\p{Lo}\p{Nd}`\"'(\[*])|(?<=[。！？｡])\s*(?=\S)")


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
