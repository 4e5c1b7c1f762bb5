"""``generator=structure``: questions from what a markdown corpus's authors already wrote in
question form or as summaries. Offline and deterministic: no model, no sampling of words.

Each document is read as CommonMark reads it (``text.markdown.blocks``, GitHub tables) and
every structure below becomes a candidate question, its evidence the verbatim span that answers
it (never the heading itself):

============================  ===============================================  ==============
structure                     question (template)                              kind
============================  ===============================================  ==============
heading ending in ``?``,      the heading, lightly normalised                  factual or
bold ``**...?**`` line                                                         procedural
gerund / imperative /         ``How do I <verb phrase>?``                      procedural
``How to`` heading            (``Rotating the key`` -> ``rotate the key``)
short noun heading            ``What is <x>?``, ``What is the <x y>?``,        factual
                              ``What are <xs>?``
longer noun heading           ``What does the documentation say about <x>?``   factual
definition, glossary entry    ``What is <term>?`` (one word or code),          factual
                              ``What does <term> mean?``
error code, code identifier   ``What does error <CODE> mean?``,                identifier
                              ``What does `<cmd>` do?``, ``What is `<key>` for?``
table cell                    ``What is the <column> of <row key>?``           factual
numbered list under ``Steps`` ``What are the steps for <parent heading>?``     procedural
============================  ===============================================  ==============

A factual heading or FAQ question whose evidence shares at most ``MAX_SEMANTIC_OVERLAP``
content words with it becomes ``semantic``: the author answered it in other words. The
evidence of a heading is its section's first paragraph, or, for a procedural heading, its first
numbered list (the steps); of a definition, the definition; of an identifier, its list item's
description or its table row; of a table cell, its row. A question's words are the heading's or
the term's and the template's: no word of the answer is copied into it.

**The asker's situation** (``context``, default 0): people rarely ask a page's heading as it
stands; they say who they are and what happened first ("My brother and his wife are in prison
... How long will it be before I hear back from the court?"). With ``context = c`` each question
is preceded by ``c`` sentences of the same document (``CONTEXT_WORDS`` words each), drawn
(seeded) from prose outside the evidence's own section and put in the asker's voice
(:func:`first_person`): words about the page's topic that do not answer it, which is what a
lexical reranker stumbles on and a dense retriever reads past. How much context your people
give is for calibration to say (``ragexp questions calibrate``): on ConditionalQA's crowd-written
questions, two sentences made the generated set rank configurations as the people's do
(docs/questions.md, "Evidence on public corpora").

The pipeline (``generation``) asks passage by passage: a job's passage gives the candidates whose
evidence starts in it; at most ``per_section`` of each kind per section are ever kept (which
ones: seeded), and draw ``d`` of a passage writes its ``d``-th kept candidate, those of the
kind the job asks for first. A block whose text is repeated verbatim in another document
(navigation, footers) gives no candidate.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Sequence

import numpy as np

from ragexp import settings
from ragexp.data.golden import MAX_SEMANTIC_OVERLAP
from ragexp.generate.passages import Job, Passage
from ragexp.records import Document
from ragexp.text import markdown
from ragexp.text.analysis import content_words, normalize_ws, split_sentences
from ragexp.text.sections import outline

FACTUAL, PROCEDURAL, IDENTIFIER, SEMANTIC = "factual", "procedural", "identifier", "semantic"
KINDS = (FACTUAL, PROCEDURAL, IDENTIFIER, SEMANTIC)
DOCS = "the documentation"
TEMPLATES = {  # the question written per structure ("template" of a Candidate)
    "faq": "{x}",
    "how_do_i": "How do I {x}?",
    "what_is": "What is {x}?",
    "what_is_the": "What is the {x}?",
    "what_are": "What are {x}?",
    "say_about": "What does " + DOCS + " say about {x}?",
    "term_means": "What does {x} mean?",
    "error_means": "What does error {x} mean?",
    "code_does": "What does {x} do?",
    "code_for": "What is {x} for?",
    "cell": "What {are} the {column} of {x}?",
    "steps_for": "What are the steps for {x}?",
}
# Headings that name a part of a page, not a topic: their numbered list is asked for by the
# parent heading (steps_for), and they give no heading question of their own.
GENERIC = frozenset({"steps", "procedure", "instructions", "example", "examples", "notes",
                     "see also", "details", "summary", "overview", "introduction",
                     "what you will see"})
ADMONITIONS = frozenset("note warning tip important caution info example".split())  # **Note:**
# First words that make a heading an instruction ("Install the broker").
IMPERATIVES = frozenset(
    """add back build change check choose configure connect create debug define delete deploy
    disable enable find fix get handle inspect install manage migrate monitor move recover
    register reload remove rename replace replay restart restore rotate run scale secure set
    start stop test tune turn update upgrade use write clean watch verify take copy send issue
    revoke grant purge drain promote transfer import export expose prevent avoid keep protect
    reduce increase shrink grow generate convert pause resume""".split())
# A heading starting with a wh-word is a question when its second word is one of these
# ("What counts as ...", "How do I ..."), an embedded clause otherwise ("What you will see").
AUXILIARIES = frozenset(
    """is are was were do does did can could should will would may might must has have happens
    happened counts changes goes makes causes""".split())
WH = frozenset("what when where which who whom whose why how".split())
# Words that make a noun heading a phrase read better as "say about" than as "What is".
PHRASE_WORDS = frozenset(
    """a an the and or of for with without between in on to from by when while after before
    versus vs if not into over under via you we your our will that which who against beside
    about across at through within per as than""".split())
ARTICLES = frozenset({"the", "a", "an"})
# Last words that make "Rolling upgrade procedure" a noun phrase, not an instruction.
NOUN_ENDS = frozenset("procedure process guide checklist policy strategy mode window".split())
NOT_GERUNDS = frozenset("""bring ceiling during evening everything king morning nothing pricing
    ring routing spring something string thing thinking wing logging""".split())
CONTEXT_WORDS = (6, 20)  # a context sentence's length in words, both ends included
# First words that point back to an earlier sentence: out of place, such a sentence means nothing
BACK_REFERENCES = frozenset("it its this these they their them that those such he she".split())
# The asker's voice: the page's second person as the first (``first_person``). "you" is "me"
# after a preposition or a verb that takes it as object ("to you", "we send you"), "I" elsewhere.
_OBJECT_AFTER = """to for with from about on at by of into than against without towards give
    gives given send sends sent tell tells told ask asks asked help helps let lets allow allows
    contact contacts pay pays paid charge charges invite invites offer offers show shows call
    calls email emails write writes protect protects refund refunds fine fines""".split()
_VOICE = ((re.compile(r"\b[Yy]ou(?:'|’)re\b"), "I'm"),
          (re.compile(r"\b[Yy]ou(?:'|’)ve\b"), "I've"),
          (re.compile(r"\b[Yy]ou(?:'|’)ll\b"), "I'll"),
          (re.compile(r"\b[Yy]ou(?:'|’)d\b"), "I'd"),
          (re.compile(r"\byourself\b"), "myself"), (re.compile(r"\bYourself\b"), "Myself"),
          (re.compile(r"\byours\b"), "mine"), (re.compile(r"\byour\b"), "my"),
          (re.compile(r"\bYour\b"), "My"), (re.compile(r"\b[Yy]ou are\b"), "I am"),
          (re.compile(r"\b[Yy]ou were\b"), "I was"),
          (re.compile(r"\b(" + "|".join(_OBJECT_AFTER) + r") you\b", re.I), r"\1 me"),
          (re.compile(r"\b[Yy]ou\b"), "I"))
CODE = re.compile(r"[A-Z][A-Z0-9]{0,5}-\d{2,6}")  # an error code: BD-3002, E-43, HTTP-404
_NUMBERING = re.compile(r"^(?:(?:step|part|chapter|section)\s+\d+[.:)]?\s*|\d+[.)]\s+|"
                        r"\d+(?:\.\d+)+[.)]?\s+)", re.I)
_LABEL = re.compile(r"^[A-Z][a-z]+(?: [a-z]+)?: (?=\S)")  # "Runbook: ", "How-to: "
_COMMAND = re.compile(r"[a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)+")
_E_DROPPED = re.compile(r"(?:[^aeiou][aeiou][cvzgskb]|[aeiou]{2}s|[^aeiou][aiu]l|[^aeiourlw]l|"
                        r"[^aeiou](?:at|et|ur|id|ud|in|ad|un)|uir|rc|rv|lv|rs|rg|dg|ang|yp)$")
_IRREGULAR = {"us": "use", "creat": "create", "writ": "write", "rewrit": "rewrite",
              "overwrit": "overwrite", "invit": "invite", "restor": "restore", "stor": "store",
              "ignor": "ignore", "explor": "explore", "focus": "focus", "signal": "signal",
              "add": "add"}
_EDGE_SYMBOLS = re.compile(r"^[^\w`(\[-]+|[\s.:;,!…]+$")
_ORDERED = re.compile(r"^\s{0,3}\d{1,9}[.)](\s|$)")
_MARKER = re.compile(r"^\s*(?:[-+*]|\d{1,9}[.)])\s+")
# ``**Term**: text``, ``**Term:** text``, ``**Term** — text``; group 1 the term as written
_BOLD_LEAD = re.compile(r"^(\*\*|__)(?P<term>(?:(?!\1).)+?)\1\s*(?P<sep>[:—–]|-(?=\s))?\s*")
# ``Term`` / `` `cmd` `` / ``BD-3002`` then a separator and the description
_CODE_LEAD = re.compile(r"^(?P<term>`[^`\n]+`|[A-Z][A-Z0-9]{0,5}-\d{2,6})\s*"
                        r"(?:[:—–]|-(?=\s))\s*(?=\S)")
_NOUNS = re.compile(r"[^\W\d_]+(?:[ -][^\W\d_]+)*")  # a column header that is words alone
_EMPTY_CELLS = frozenset({"-", "—", "none", "n/a", "see below"})
_DEFINITION_HEADERS = (frozenset({"term", "name", "word", "concept"}),
                       frozenset({"definition", "meaning", "description"}))


def prompt_sha256() -> str:
    """sha256 of the question templates and the word lists that choose them: the file's record
    of which template set wrote its questions (the ``prompt_sha256`` of an LLM generator)."""
    text = json.dumps([TEMPLATES, sorted(GENERIC), sorted(IMPERATIVES), sorted(AUXILIARIES),
                       sorted(PHRASE_WORDS), sorted(NOT_GERUNDS), sorted(NOUN_ENDS),
                       sorted(ADMONITIONS), CODE.pattern, sorted(BACK_REFERENCES),
                       _OBJECT_AFTER, CONTEXT_WORDS])
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """One question a document's structure asks: ``template`` (a key of ``TEMPLATES``), the
    ``question``, its ``kind``, the reference ``answer`` (the evidence as a person reads it)
    and the evidence ``quote``, verbatim in document ``doc_id`` from character ``start``."""

    doc_id: str
    start: int
    quote: str
    question: str
    answer: str
    kind: str
    template: str


# ----------------------------------------------------------------------------- phrases


def inline(text: str) -> str:
    """Inline markdown as a question quotes it: markup rendered, code spans kept in backticks,
    whitespace collapsed, leading symbols and trailing punctuation dropped (``**Ack**:`` ->
    ``Ack``, ``🚀 `brindled`.`` -> ```brindled```)."""
    return _EDGE_SYMBOLS.sub("", markdown.plain(text, code=True)).strip()


def heading_text(title: str) -> str:
    """A heading as a question quotes it: :func:`inline`, less a leading number (``1.``,
    ``2.3``, ``Step 2:``) and label (``Runbook:``)."""
    text = _NUMBERING.sub("", inline(title)).strip()
    return _LABEL.sub("", text) if text.count(":") == 1 else text


def verb(gerund: str) -> str:
    """The base form of an English ``-ing`` word, lower case: ``Rotating`` -> ``rotate``,
    ``running`` -> ``run``, ``telling`` -> ``tell``, ``enqueueing`` -> ``enqueue``. A heuristic:
    a doubled final consonant undone (not l, s, f, z), an ``e`` restored after the endings
    that drop it (``_E_DROPPED``), ``_IRREGULAR`` for the rest."""
    stem = gerund.lower()[:-3]
    if stem in _IRREGULAR:
        return _IRREGULAR[stem]
    if len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in "aeiouylsfz":
        return stem[:-1]
    return stem + "e" if _E_DROPPED.search(stem) else stem


def names(text: str) -> frozenset[str]:
    """Capitalised words that a text writes mid-sentence, after a lower-case word (``run by
    Brindle``): names, which keep their capital at the start of a question."""
    return frozenset(re.findall(r"(?<=[a-z,] )[A-Z][a-z]+\b", text))


def _lower_first(phrase: str, kept: frozenset[str]) -> str:
    """``phrase`` with its first word lowered (``Queues`` -> ``queues``) unless it is one of
    the names ``kept`` (``Raft``) or not a capitalised word (``HTTP``, ``SDKs``, ``I``)."""
    first, _, rest = phrase.partition(" ")
    if first[:1].isupper() and (first[1:].islower() or (len(first) == 1 and first != "I")) \
            and first not in kept:
        first = first.lower()
    return f"{first} {rest}".rstrip()


def _plural(word: str) -> bool:
    w = word.lower().strip("`")
    return len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is", "'s"))


def _ask(template: str, kind: str, x: str, **parts: str) -> tuple[str, str, str]:
    """``(template, kind, question)``: ``TEMPLATES[template]`` filled with ``x`` and ``parts``."""
    return template, kind, TEMPLATES[template].format(x=x, **parts)


def _normalised_question(text: str) -> str:
    """A question as the author wrote it: one ``?`` at the end, first letter upper case."""
    text = text.rstrip(" ?.") + "?"
    return text[:1].upper() + text[1:]


def _asked_kind(question: str) -> str:
    """The kind of a question an author wrote: ``procedural`` when it asks how to do something
    (``How do I ...``, ``How can we ...``), ``factual`` otherwise; one rule for an FAQ heading
    and an FAQ bold line."""
    return PROCEDURAL if re.match(r"how (do|can|should) (i|we|you)\b", question, re.I) \
        else FACTUAL


def heading_question(title: str, kept: frozenset[str] = frozenset()
                     ) -> tuple[str, str, str] | None:
    """``(template, kind, question)`` for a heading's inline ``title``, or None for a generic
    one (``Steps``, ``Example``) or one without words. ``kept``: the document's :func:`names`,
    whose capital a question keeps (:func:`_lower_first`)."""
    text = heading_text(title)
    tokens = text.split()
    if not tokens or text.casefold() in GENERIC:
        return None
    first = tokens[0].lower().strip(",;:")
    second = tokens[1].lower() if len(tokens) > 1 else ""
    if text.endswith("?") or (first in WH and second in AUXILIARIES):
        question = _normalised_question(text)
        return _ask("faq", _asked_kind(question), question)
    if first == "how" and second == "to" and len(tokens) > 2:
        return _ask("how_do_i", PROCEDURAL, " ".join(tokens[2:]))
    if CODE.fullmatch(text) or re.fullmatch(r"`[^`]+`", text):
        return identifier_question(text)
    if first in PHRASE_WORDS - ARTICLES:  # "With curl", "Before you start": part of a page
        return None
    if len(tokens) > 1 and not tokens[0].endswith(",") and second not in ("and", "or") and \
            tokens[-1].lower() not in NOUN_ENDS and (
                (first.endswith("ing") and len(first) > 4 and first not in NOT_GERUNDS)
                or first in IMPERATIVES):
        head = verb(first) if first.endswith("ing") and first not in IMPERATIVES else first
        rest = " ".join("my" if t.lower() == "your" else t for t in tokens[1:])
        return _ask("how_do_i", PROCEDURAL, f"{head} {rest}")
    if first in ARTICLES and len(tokens) > 1:
        tokens, first = tokens[1:], second
    phrase = _lower_first(" ".join(tokens), kept)
    lowered = {t.lower().strip(",;:") for t in tokens}
    if len(tokens) > 4 or lowered & PHRASE_WORDS or first in WH or re.search(r"[(\[:,]", text) \
            or (len(tokens) == 1 and first.endswith("ing") and first not in NOT_GERUNDS):
        return _ask("say_about", FACTUAL, _lower_first(text, kept))
    if _plural(tokens[-1]):
        return _ask("what_are", FACTUAL, phrase)
    return _ask("what_is" if len(tokens) == 1 else "what_is_the", FACTUAL, phrase)


def identifier_question(term: str) -> tuple[str, str, str]:
    """``(template, kind, question)`` for an identifier as a question quotes it: an error code
    (``BD-3002``), a command or flag in a code span (`` `brindlectl worker forget` ``,
    `` `--yes` ``), or any other code span (a key: `` `lease_timeout` ``)."""
    bare = term.strip("`")
    if CODE.fullmatch(bare):
        return _ask("error_means", IDENTIFIER, bare)
    return _ask("code_does" if " " in bare or bare.startswith("-") else "code_for", IDENTIFIER,
                term)


def term_question(term: str, kept: frozenset[str] = frozenset()
                  ) -> tuple[str, str, str]:
    """``(template, kind, question)`` for a defined term as written inline (a glossary row's
    first cell, a bold term): identifiers as :func:`identifier_question`; a wh-phrase as the
    question it is; one word or code ``What is <term>?``, a plural ``What are <terms>?``,
    several words ``What does <term> mean?``, a phrase (a preposition, a conjunction, five or
    more words) ``What does the documentation say about <term>?``. ``kept``: names, as for
    :func:`heading_question`."""
    text = inline(term)
    if CODE.fullmatch(text) or (text.startswith("`") and " " in text.strip("`")):
        return identifier_question(text)
    tokens = text.split()
    if tokens[0].lower() in WH:  # "**Which configuration wins**:" asks its own question
        return _ask("faq", FACTUAL, _normalised_question(text))
    phrase = _lower_first(text, kept)
    if len(tokens) > 4 or {t.lower() for t in tokens} & PHRASE_WORDS:
        return _ask("say_about", FACTUAL, phrase)
    if _plural(tokens[-1]):
        return _ask("what_are", FACTUAL, phrase)
    return _ask("what_is" if len(tokens) == 1 else "term_means", FACTUAL, phrase)


def command(title: str, blocks: Sequence[markdown.Block]) -> str | None:
    """The heading as a command in a code span (```queue create```) when it is lower-case
    words that the section's code shows (``brindlectl queue create thumbnails`` in a code block
    or span): a command reference's headings; None otherwise."""
    text = heading_text(title)
    if not _COMMAND.fullmatch(text):
        return None
    for b in blocks:
        code = [b.text] if b.kind in markdown.CODE_KINDS else re.findall(r"`([^`\n]+)`", b.text)
        if any(re.search(rf"(?<![\w-]){re.escape(text)}(?![\w-])", c) for c in code):
            return f"`{text}`"
    return None


# ----------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class _Section:
    """A heading and the blocks up to the next heading of any level (its own text)."""

    path: tuple[str, ...]
    title: str
    blocks: tuple[markdown.Block, ...]


def _sections(doc: Document) -> Iterator[_Section]:
    """Each heading's own blocks, and first the blocks before the first heading (no title)."""
    found = markdown.blocks(doc.text)
    heads = [i for i, b in enumerate(found) if b.kind == "heading"]
    paths = [s.path for s in outline(doc)]
    if not heads or heads[0] > 0:
        yield _Section((), "", tuple(found[:heads[0] if heads else len(found)]))
    for n, i in enumerate(heads):
        stop = heads[n + 1] if n + 1 < len(heads) else len(found)
        yield _Section(paths[n], found[i].title, tuple(found[i + 1:stop]))


def _lists(blocks: Sequence[markdown.Block], text: str) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, ordered)`` of each run of list items with nothing but blank lines between
    (a list, its nested items in it), as ``passages`` takes a list whole."""
    run: list[int] | None = None
    ordered = False
    for b in blocks:
        if b.kind == "item" and run is not None and not text[run[1]:b.start].strip():
            run[1] = b.end
            continue
        if run is not None:
            yield run[0], run[1], ordered
            run = None
        if b.kind == "item":
            run, ordered = [b.start, b.end], bool(_ORDERED.match(b.text))
    if run is not None:
        yield run[0], run[1], ordered


def _leads(text: str) -> bool:
    """Whether a paragraph starts by naming what it defines or asks (a bold lead, a definition
    list's term line): it answers its own question, not its heading's."""
    lines, bold = text.split("\n"), _BOLD_LEAD.match(text)
    return bool(bold and (bold.group("sep") or bold.group("term").endswith(("?", ":")))) or \
        (len(lines) > 1 and lines[1].startswith(": "))


def _folded(text: str) -> str:
    return normalize_ws(text)[0]


_TEMPLATE_WORDS = frozenset(content_words(" ".join(TEMPLATES.values())))


def paraphrased(kind: str, question: str, quote: str) -> str:
    """``semantic`` for a ``factual`` question of two or more words of its own (not the
    template's) that shares at most ``MAX_SEMANTIC_OVERLAP`` content words with its quote (the
    rule ``questions check`` holds a semantic question to): the author answered it in other
    words. Any other question keeps ``kind``."""
    words = content_words(question)
    return SEMANTIC if kind == FACTUAL and len(words - _TEMPLATE_WORDS) >= 2 and \
        len(words & content_words(quote)) <= MAX_SEMANTIC_OVERLAP else kind


class _Reader:
    """The candidates of one document: ``skip`` holds the whitespace-folded texts of blocks
    repeated in other documents, which give none."""

    def __init__(self, doc: Document, skip: frozenset[str]):
        self.doc, self.skip, self.out = doc, skip, []
        self.names = names(doc.text)

    def add(self, start: int, end: int, asked: tuple[str, str, str],
            answer: str | None = None) -> None:
        """A candidate asking ``asked`` (``(template, kind, question)``) with the text at
        ``[start, end)``, stripped, as its quote, and ``answer`` (default: the quote, plain)."""
        template, kind, question = asked
        quote = self.doc.text[start:end].strip()
        start += len(self.doc.text[start:end]) - len(self.doc.text[start:end].lstrip())
        if not quote:
            return
        answer = answer if answer is not None else markdown.plain(quote)
        self.out.append(Candidate(self.doc.doc_id, start, quote, question, answer, kind,
                                  template))

    def read(self) -> list[Candidate]:
        for sec in _sections(self.doc):
            blocks = [b for b in sec.blocks if _folded(b.text) not in self.skip]
            self._heading(sec, blocks)
            for b in blocks:
                if b.kind in markdown.TEXT_KINDS:
                    self._lead(b, blocks)
                elif b.kind == "table":
                    self._table(b)
        return self.out

    def _heading(self, sec: _Section, blocks: list[markdown.Block]) -> None:
        """The heading's question, its evidence the first paragraph (a procedure's: its first
        numbered list); a ``Steps`` heading's list asked for by its parent heading."""
        text = self.doc.text
        steps = next(((s, e) for s, e, ordered in _lists(blocks, text) if ordered), None)
        paragraph = next((b for b in blocks if b.kind == "paragraph"), None)
        cmd = command(sec.title, sec.blocks)
        asked = identifier_question(cmd) if cmd else heading_question(sec.title, self.names)
        if asked is None:
            if steps and inline(sec.title).casefold() in GENERIC and len(sec.path) > 1:
                parent = heading_question(sec.path[-2], self.names)
                if parent and parent[0] == "how_do_i":
                    self.add(*steps, parent)
                else:
                    x = _lower_first(heading_text(sec.path[-2]), self.names)
                    self.add(*steps, _ask("steps_for", PROCEDURAL, x))
            return
        template, kind, question = asked
        if kind == PROCEDURAL and steps:
            self.add(*steps, asked)
        elif paragraph is not None and not _leads(paragraph.text):
            quote = text[paragraph.start:paragraph.end]
            self.add(paragraph.start, paragraph.end,
                     (template, paraphrased(kind, question, quote), question))

    def _lead(self, block: markdown.Block, blocks: list[markdown.Block]) -> None:
        """A paragraph or list item that starts by naming what it defines: ``**Term**: ...``,
        ``Term`` then ``: definition`` (a definition list), `` `cmd` — ...``, ``BD-3002: ...``,
        or a bold question (``**Can I ...?**``) answered after it or by the next block."""
        raw = block.text
        marker = _MARKER.match(raw) if block.kind == "item" else None
        at = marker.end() if marker else 0
        body = raw[at:]
        lines = body.split("\n")
        if block.kind == "paragraph" and len(lines) > 1 and lines[1].startswith(": ") \
                and lines[0].strip():
            start = block.start + len(lines[0]) + 3
            self.add(start, block.end, term_question(lines[0], self.names))
            return
        bold, code = _BOLD_LEAD.match(body), _CODE_LEAD.match(body)
        if bold:
            term = bold.group("term").strip()
            rest = block.start + at + bold.end()
            if term.endswith("?"):
                if body[bold.end():].strip():
                    end = block.end
                else:  # the answer is the next block
                    after = [b for b in blocks if b.start > block.start]
                    if not after or after[0].kind not in markdown.TEXT_KINDS:
                        return
                    rest, end = after[0].start, after[0].end
                question = _normalised_question(inline(term))
                kind = paraphrased(_asked_kind(question), question, self.doc.text[rest:end])
                self.add(rest, end, ("faq", kind, question))
            elif (bold.group("sep") or term.endswith(":")) and \
                    term.rstrip(":").casefold() not in ADMONITIONS:
                self.add(rest, block.end, term_question(term.rstrip(":"), self.names))
        elif code:
            self.add(block.start + at + code.end(), block.end,
                     identifier_question(code.group("term")))

    def _table(self, block: markdown.Block) -> None:
        """A glossary table (``Term`` and ``Definition`` columns): ``What is <term>?`` with the
        definition cell as evidence. Any other table: its key column is the first whose cells
        differ row to row; per row whose key is a name (it starts with a letter or a code span,
        at most six words), a key that is an identifier (an error code, a code span) is asked
        for with the row as evidence, and each other column whose header is a noun phrase of at
        most three words as ``What is the <column> of <key>?``, the row as evidence."""
        lines = block.text.split("\n")
        if len(lines) < 3:
            return
        header = [markdown.plain(c).casefold() for c in markdown.cells(lines[0])]
        starts = np.cumsum([0] + [len(ln) + 1 for ln in lines])[2:] + block.start
        rows = [(int(at), row, markdown.cells(row)) for at, row in zip(starts, lines[2:])
                if len(markdown.cells(row)) >= 2]
        if header and header[0] in _DEFINITION_HEADERS[0] and any(
                h in _DEFINITION_HEADERS[1] for h in header[1:]):
            col = next(i for i, h in enumerate(header) if h in _DEFINITION_HEADERS[1])
            for at, row, cells in rows:
                if col < len(cells) and cells[col] and inline(cells[0]):
                    cell_at = at + row.index(cells[col], row.index(cells[0]) + len(cells[0]))
                    self.add(cell_at, cell_at + len(cells[col]),
                             term_question(cells[0], self.names),
                             answer=markdown.plain(cells[col]))
            return
        keys = [[inline(c) for c in cells] for _, _, cells in rows]
        key_col = next((j for j in range(len(header)) if all(len(k) > j and k[j] for k in keys)
                        and len({k[j] for k in keys}) == len(keys)), None)
        if key_col is None:
            return
        for (at, row, cells), texts in zip(rows, keys):
            key = texts[key_col]
            if not re.match(r"[^\W\d_]|`", key) or len(key.split()) > 6:
                continue  # a number names nothing without its column; a sentence is no key
            if CODE.fullmatch(key) or (key.startswith("`") and key.endswith("`")):
                self.add(at, at + len(row), identifier_question(key),
                         answer=markdown.row_text(row))
            for j, (column, cell) in enumerate(zip(header, cells)):
                column = re.sub(r"\s*\([^)]*\)", "", column).strip()
                value = markdown.plain(cell)
                words = column.split()
                if j == key_col or not value or value.casefold() in _EMPTY_CELLS or \
                        not 0 < len(words) <= 3 or set(words) & (WH | PHRASE_WORDS - {"or"}) \
                        or not _NOUNS.fullmatch(column):
                    continue
                are = "are" if _plural(words[-1]) else "is"
                self.add(at, at + len(row), _ask("cell", FACTUAL, key, are=are, column=column),
                         answer=value)


def candidates(doc: Document, skip: frozenset[str] = frozenset()) -> list[Candidate]:
    """Every question the structure of markdown document ``doc`` asks (the module's table), in
    document order; ``skip``: whitespace-folded block texts that give none (boilerplate)."""
    return _Reader(doc, skip).read()


def repeated_blocks(docs: Sequence[Document]) -> frozenset[str]:
    """The whitespace-folded texts of the paragraphs, list items and tables found in more than
    one document (page navigation, footers): they answer nothing one page alone answers."""
    seen: dict[str, str] = {}
    repeated: set[str] = set()
    for doc in docs:
        for b in markdown.blocks(doc.text):
            if b.kind in (*markdown.TEXT_KINDS, "table"):
                key = _folded(b.text)
                if seen.setdefault(key, doc.doc_id) != doc.doc_id:
                    repeated.add(key)
    return frozenset(repeated)


def _stable(*parts: object) -> int:
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def first_person(sentence: str) -> str:
    """A page's sentence in the asker's voice: ``you're`` -> ``I'm``, ``your`` -> ``my``,
    ``you`` -> ``me`` after a preposition or a verb that takes it as object (``to you``, ``send
    you``), ``I`` elsewhere (``_VOICE``; a heuristic, no parser: "Contact ACAS if you're
    unsure" -> "Contact ACAS if I'm unsure")."""
    for pattern, repl in _VOICE:
        sentence = pattern.sub(repl, sentence)
    return sentence


@dataclass(frozen=True)
class _Situation:
    """A sentence of prose a question may be preceded by: its section's path and where it
    starts in the document."""

    path: tuple[str, ...]
    start: int
    text: str


def situations(doc: Document) -> list[_Situation]:
    """The sentences of ``doc``'s paragraphs and list items (not headings, tables or code) of
    ``CONTEXT_WORDS`` words that read as a sentence (a capital first, ``.``, ``!`` or ``?``
    last: no list fragment, no lead-in ending in ``:``; not opening on a word that points back,
    ``BACK_REFERENCES``, nor with an "it" in its first 30 characters: "Replace it by ..." means
    nothing out of place), whitespace collapsed,
    list markers dropped, in document order: what ``context`` draws from. An FAQ entry's text
    (a section whose heading asks a question) answers another question: none of it is drawn."""
    out = []
    for sec in _sections(doc):
        if sec.title.rstrip().endswith("?"):
            continue
        for b in sec.blocks:
            if b.kind not in ("paragraph", "item"):
                continue
            for sentence in split_sentences(_MARKER.sub("", markdown.plain(b.text))):
                text = " ".join(sentence.split())
                first = re.sub(r"\W", "", text.split()[0].lower()) if text else ""
                if CONTEXT_WORDS[0] <= len(text.split()) <= CONTEXT_WORDS[1] and \
                        text[:1].isupper() and text[-1:] in ".!?" and \
                        first not in BACK_REFERENCES and not re.search(r"\bit\b", text[:30]):
                    out.append(_Situation(sec.path, b.start, text))
    return out


@dataclass
class StructureGenerator:
    """Questions from a markdown corpus's own structure (the module's templates).
    ``per_section``: at most that many questions of one kind from one section (which ones, by
    the seed); ``context``: sentences of the asker's situation before each question (the
    module's "asker's situation"). Raises ``InvalidValue`` on a value out of range."""

    per_section: int = field(default=2, metadata={"ge": 1, "le": 100})  # of each kind
    context: int = field(default=0, metadata={"ge": 0, "le": 3})  # situation sentences
    name: ClassVar[str] = "structure"
    kinds: ClassVar[tuple[str, ...]] = KINDS
    model: ClassVar[str | None] = None
    prompt_sha256: ClassVar[str | None] = prompt_sha256()
    _by_passage: dict[str, list[tuple[Candidate, str]]] = field(default_factory=dict, init=False,
                                                               repr=False)
    _kept: dict[int, frozenset[Candidate]] = field(default_factory=dict, init=False, repr=False)
    _situations: dict[str, list[_Situation]] = field(default_factory=dict, init=False,
                                                     repr=False)
    _paths: dict[str, tuple[list[int], list[tuple[str, ...]]]] = field(
        default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        settings.check(self, "generator")

    def settings(self) -> dict:
        """What the generator was run with, for each question's provenance."""
        return {"name": self.name, "per_section": self.per_section, "context": self.context}

    def prepare(self, docs: Sequence[Document], passages: Sequence[Passage]) -> None:
        """Every document's candidates, each under the passage its evidence starts in (one
        that starts in no passage, a block under ``passages.MIN_WORDS`` words, is never
        asked)."""
        skip = repeated_blocks(docs)
        by_doc: dict[str, list[Passage]] = {}
        for p in sorted(passages, key=lambda p: (p.doc_id, p.start)):
            by_doc.setdefault(p.doc_id, []).append(p)
        self._by_passage, self._kept, self._situations, self._paths = {}, {}, {}, {}
        for doc in docs:
            if self.context:
                self._situations[doc.doc_id] = situations(doc)
                heads = [(sec.span.start, sec.path) for sec in outline(doc)]
                self._paths[doc.doc_id] = ([h[0] for h in heads], [h[1] for h in heads])
            held = by_doc.get(doc.doc_id, [])
            starts = [p.start for p in held]
            for c in candidates(doc, skip):
                i = bisect.bisect_right(starts, c.start) - 1
                if i >= 0 and c.start < held[i].end:
                    self._by_passage.setdefault(held[i].pid, []).append((c, held[i].section))

    def _kept_for(self, seed: int) -> frozenset[Candidate]:
        """The candidates kept under ``per_section``: per document, section and kind, the
        first ``per_section`` of a permutation seeded by ``seed`` and the group's name."""
        if seed not in self._kept:
            groups: dict[tuple[str, str, str], list[Candidate]] = {}
            for found in self._by_passage.values():
                for c, section in found:
                    groups.setdefault((c.doc_id, section, c.kind), []).append(c)
            kept: set[Candidate] = set()
            for key in sorted(groups):
                group = sorted(groups[key], key=lambda c: (c.start, c.question))
                order = np.random.default_rng([seed, _stable(*key)]).permutation(len(group))
                kept.update(group[i] for i in order[:self.per_section])
            self._kept[seed] = frozenset(kept)
        return self._kept[seed]

    def write(self, batch: Sequence[Job], seed: int) -> list[dict | str]:
        """Per job a record (``question``, ``kind``, ``answer``, ``evidence``) or the drop
        reason ``no_structure`` (its passage asks nothing kept, or fewer than ``draw + 1``
        questions) or ``no_situation`` (``context`` asked for, and the page has no sentence to
        give). Job ``j`` is answered from ``seed``, ``j``'s passage, draw and kind alone,
        so a rerun or a resumed file writes the same."""
        kept = self._kept_for(seed)
        out: list[dict | str] = []
        for job in batch:
            found = sorted((c for c, _ in self._by_passage.get(job.passage.pid, [])
                            if c in kept), key=lambda c: (c.start, c.question))
            order = np.random.default_rng([seed, _stable(job.passage.pid)]).permutation(
                len(found))
            ranked = sorted((found[i] for i in order), key=lambda c: c.kind != job.kind)
            if job.draw >= len(ranked):
                out.append("no_structure")
                continue
            c = ranked[job.draw]
            question, kind = self._situated(c, seed, job), c.kind
            if question is None:
                out.append("no_situation")
                continue
            if kind == SEMANTIC and len(content_words(question) & content_words(c.quote)) > \
                    MAX_SEMANTIC_OVERLAP:  # the situation shares the answer's words
                kind = FACTUAL
            out.append({"question": question, "kind": kind, "answer": c.answer,
                        "evidence": [{"doc": c.doc_id, "quote": c.quote}]})
        return out

    def _situated(self, c: Candidate, seed: int, job: Job) -> str | None:
        """``c``'s question after ``context`` sentences of its document (fewer where it has
        fewer), outside its evidence's section and that section's subsections (below a page's
        title: a subsection often holds the answer's next step), not in its quote, drawn by
        ``seed`` and the job alone, in document order and the asker's voice; the bare question
        when ``context`` is 0; None when the document has no such sentence (the question is
        dropped as ``no_situation``: a set asked with a situation holds none without)."""
        if not self.context:
            return c.question
        starts, paths = self._paths[c.doc_id]
        at = bisect.bisect_right(starts, c.start) - 1
        own = paths[at] if at >= 0 else ()
        inside = (lambda p: p[:len(own)] == own) if len(own) >= 2 else (lambda p: p == own)
        quote = " ".join(c.quote.split())
        pool = [s for s in self._situations[c.doc_id]
                if not inside(s.path) and s.text not in quote and quote not in s.text]
        if not pool:
            return None
        rng = np.random.default_rng([seed, _stable(job.passage.pid, job.draw, "context")])
        chosen = sorted(rng.choice(len(pool), size=min(self.context, len(pool)),
                                   replace=False))
        return " ".join([*(first_person(pool[i].text) for i in chosen), c.question])
