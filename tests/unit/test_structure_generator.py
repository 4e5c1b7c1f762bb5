"""``generator=structure``: every template on inline markdown (ATX and setext headings, headings
with code, numbers, Unicode and trailing punctuation, definitions, a glossary table, error codes
in a list and a table, table rows, numbered steps, FAQ headings and bold lines), the exact
question written from the input, evidence verbatim and never the heading; empty sections and
boilerplate repeated across documents ask nothing; the handbook's file passes ``questions
check`` and the same seed writes the same bytes."""

from __future__ import annotations

import json
import re

import pytest

from ragexp.cli.main import main
from ragexp.data import golden
from ragexp.errors import InvalidValue
from ragexp.generate import structure
from ragexp.generate.passages import Job, passages_of
from ragexp.generate.structure import StructureGenerator, candidates, verb
from ragexp.records import Document
from ragexp.text import markdown

QUIET = ["progress=false"]
NATURAL = re.compile(r"^(What|How|Which|Who|When|Where|Why|Can|Will|Is|Are|Do|Does|My|A) .*\?$")

OPS = """# Operating the broker

The broker stores every job in an append-only ledger on local disk.

## Rotating the `signing` key.

1. Generate a new key with `brindlectl key create`.
2. Install it on every broker and reload the service.

## 3. Install the agent

Download the package and run its installer as root on each host.

Queues
======

Named lists of jobs that workers lease in priority order, oldest first.

Dead letters
------------

Jobs whose last attempt failed wait here until an operator replays them.

## Configuración rápida

Copie el archivo de ejemplo y ajuste la dirección del servidor antes de arrancar.

## Empty section

## Backoff between attempts

After a failure the broker waits longer before each retry.

## Above the high watermark

### Steps

1. Compact the ledger with `brindlectl ledger compact`.
2. Grow the volume while the broker keeps running.

## Will a job run twice?

Yes, delivery is at-least-once, so handlers must be idempotent.

**Can I run a single broker?**

For development only; production clusters run three brokers for quorum.
"""

REFERENCE = """# Reference

## Terms

**Lease**: temporary ownership of a job by one worker until it acks.

Backoff
: the wait before a failed job is tried again, doubling each time.

- **Dead-letter queue** — where jobs go after their final failed attempt.
- `brindlectl worker forget` — removes a lost worker and frees its leases.
- BD-3002: the lease expired before the worker acknowledged the job.

## Glossary

| Term | Definition |
|---|---|
| Quorum | A majority of brokers, two of three or three of five. |
| Raft | The consensus protocol that Raft brokers use to elect a leader. |

## Error codes

| Code | Message | Cause |
|---|---|---|
| BD-2004 | ledger disk full | The ledger filesystem passed 95% usage. |

## Keys

| Key | Default | Meaning |
|---|---|---|
| lease timeout | 30 s | How long a worker holds a job before it is leased again. |
"""

DOCS = [Document("ops.md", "Operating the broker", OPS),
        Document("reference.md", "Reference", REFERENCE)]


def asked(doc: Document) -> list[tuple[str, str, str]]:
    return [(c.template, c.kind, c.question) for c in candidates(doc)]


def quote_of(doc: Document, question: str) -> str:
    return next(c.quote for c in candidates(doc) if c.question == question)


def test_headings_ask_by_their_form_with_the_text_under_them_as_evidence():
    assert asked(DOCS[0]) == [
        ("how_do_i", "procedural", "How do I operate the broker?"),
        ("how_do_i", "procedural", "How do I rotate the `signing` key?"),  # its steps
        ("how_do_i", "procedural", "How do I install the agent?"),
        ("what_are", "factual", "What are queues?"),  # setext, level 1
        ("what_are", "semantic", "What are dead letters?"),  # setext, level 2; no word shared
        ("what_is_the", "semantic", "What is the configuración rápida?"),
        ("say_about", "semantic", "What does the documentation say about backoff between "
                                  "attempts?"),
        ("steps_for", "procedural", "What are the steps for above the high watermark?"),
        ("faq", "semantic", "Will a job run twice?"),
        ("faq", "factual", "Can I run a single broker?"),  # shares "run" and "broker"
    ]
    doc = DOCS[0]
    # a procedure's evidence is its steps, a heading's the paragraph under it
    assert quote_of(doc, "How do I rotate the `signing` key?") == (
        "1. Generate a new key with `brindlectl key create`.\n2. Install it on every broker and "
        "reload the service.")
    assert quote_of(doc, "What are queues?") == ("Named lists of jobs that workers lease in "
                                                 "priority order, oldest first.")
    assert quote_of(doc, "What are the steps for above the high watermark?").startswith(
        "1. Compact the ledger")
    assert quote_of(doc, "Can I run a single broker?") == (
        "For development only; production clusters run three brokers for quorum.")


def test_definitions_glossaries_identifiers_and_table_cells():
    assert asked(DOCS[1]) == [
        ("what_is", "factual", "What is lease?"),
        ("what_is", "factual", "What is backoff?"),
        ("term_means", "factual", "What does dead-letter queue mean?"),
        ("code_does", "identifier", "What does `brindlectl worker forget` do?"),
        ("error_means", "identifier", "What does error BD-3002 mean?"),
        ("what_is", "factual", "What is quorum?"),
        ("what_is", "factual", "What is Raft?"),  # a name the text writes mid-sentence
        ("error_means", "identifier", "What does error BD-2004 mean?"),
        ("cell", "factual", "What is the message of BD-2004?"),
        ("cell", "factual", "What is the cause of BD-2004?"),
        ("cell", "factual", "What is the default of lease timeout?"),
        ("cell", "factual", "What is the meaning of lease timeout?"),
    ]
    doc = DOCS[1]
    assert quote_of(doc, "What is lease?") == ("temporary ownership of a job by one worker "
                                               "until it acks.")
    assert quote_of(doc, "What is backoff?") == ("the wait before a failed job is tried again, "
                                                 "doubling each time.")
    assert quote_of(doc, "What does error BD-3002 mean?") == (
        "the lease expired before the worker acknowledged the job.")
    assert quote_of(doc, "What is quorum?") == \
        "A majority of brokers, two of three or three of five."
    row = "| BD-2004 | ledger disk full | The ledger filesystem passed 95% usage. |"
    assert quote_of(doc, "What does error BD-2004 mean?") == row
    assert quote_of(doc, "What is the cause of BD-2004?") == row
    cell = next(c for c in candidates(doc) if c.question == "What is the default of lease timeout?")
    assert cell.answer == "30 s"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.doc_id)
def test_every_question_is_natural_and_its_evidence_verbatim_and_not_a_heading(doc):
    found = candidates(doc)
    headings = [b for b in markdown.blocks(doc.text) if b.kind == "heading"]
    for c in found:
        assert NATURAL.match(c.question), c.question
        assert doc.text[c.start:c.start + len(c.quote)] == c.quote
        spans = golden.find_quote(doc, c.quote)
        assert len(spans) == 1
        assert not any(h.start <= spans[0].start < h.end for h in headings)
    assert not any("Empty section" in c.question or "empty section" in c.question for c in found)


def test_text_before_any_heading_and_a_table_keyed_by_its_distinct_column():
    """A page without headings still defines its terms; a table whose first column repeats
    (``GET`` twice) is keyed by the first column whose cells all differ."""
    doc = Document("api.md", "API", "**Token**: the credential every call of the API sends.\n\n"
                   "| Method | Path | Role |\n|---|---|---|\n| GET | `/v1/queues` | reader |\n"
                   "| GET | `/v1/jobs` | reader |\n| POST | `/v1/schedules` | producer |\n")
    assert [q for _, _, q in asked(doc)][:4] == [
        "What is token?", "What is `/v1/queues` for?", "What is the method of `/v1/queues`?",
        "What is the role of `/v1/queues`?"]
    assert len(candidates(doc)) == 1 + 3 * 3
    assert candidates(doc)[-1].answer == "producer"
    assert candidates(doc)[-1].quote == "| POST | `/v1/schedules` | producer |"
    doc = Document("dup.md", "Dup", "| Method | Role |\n|---|---|\n| GET | reader |\n"
                   "| POST | reader |\n| GET | admin |\n")
    assert candidates(doc) == []  # no column names one row


def test_heading_forms():
    q = structure.heading_question
    assert q("Rotating the signing key") == ("how_do_i", "procedural",
                                             "How do I rotate the signing key?")
    assert q("Configure *your* worker:") == ("how_do_i", "procedural",
                                             "How do I configure my worker?")
    assert q("How to replay dead letters") == ("how_do_i", "procedural",
                                               "How do I replay dead letters?")
    assert q("What counts as a failed attempt") == ("faq", "factual",
                                                    "What counts as a failed attempt?")
    assert q("`BD-4007`")[2] == "What does error BD-4007 mean?"
    assert q("`brindlectl worker forget`")[2] == "What does `brindlectl worker forget` do?"
    assert q("Step 2: Restart the broker")[2] == "How do I restart the broker?"
    assert q("Runbook: ledger disk full (BD-2004)")[2] == \
        "What does the documentation say about ledger disk full (BD-2004)?"
    assert q("Rolling upgrade procedure")[2] == "What is the rolling upgrade procedure?"
    assert q("The dead-letter queue")[2] == "What is the dead-letter queue?"
    assert q("Leasing, acking and nacking")[2] == \
        "What does the documentation say about leasing, acking and nacking?"
    assert q("🚀 Überblick")[2] == "What is überblick?"
    assert q("Steps") is None and q("With curl") is None and q("  ") is None


def test_term_forms():
    q = structure.term_question
    assert q("**Quorum**") == ("what_is", "factual", "What is quorum?")
    assert q("Identity checks") == ("what_are", "factual", "What are identity checks?")
    assert q("Full jitter") == ("term_means", "factual", "What does full jitter mean?")
    assert q("Imports and lookups at start")[2] == \
        "What does the documentation say about imports and lookups at start?"
    assert q("Which configuration wins") == ("faq", "factual", "Which configuration wins?")
    assert q("`brindled`") == ("what_is", "factual", "What is `brindled`?")
    assert q("Raft", frozenset({"Raft"}))[2] == "What is Raft?"


def test_gerunds_to_verbs():
    pairs = {"Rotating": "rotate", "running": "run", "telling": "tell", "enqueueing": "enqueue",
             "creating": "create", "writing": "write", "producing": "produce", "using": "use",
             "extending": "extend", "configuring": "configure", "handling": "handle",
             "upgrading": "upgrade", "editing": "edit", "debugging": "debug", "adding": "add",
             "embedding": "embed"}
    assert {g: verb(g) for g in pairs} == pairs


def test_boilerplate_repeated_across_documents_asks_nothing():
    footer = "Was this page helpful? Tell us in the feedback channel of the handbook."
    docs = [Document(f"{n}.md", n, f"# {n.title()}\n\nThe {n} page says what {n} does in the "
                     f"cluster.\n\n## Feedback\n\n{footer}\n") for n in ("alpha", "beta")]
    skip = structure.repeated_blocks(docs)
    for doc in docs:
        assert [c.question for c in candidates(doc, skip)] == [
            f"What is {doc.doc_id[:-3]}?"]
    assert any("feedback" in c.question for c in candidates(docs[0]))  # alone: kept


def test_per_section_keeps_that_many_of_a_kind_chosen_by_the_seed():
    """Twelve error codes in one section, per_section=3: three identifier questions and three
    table-cell questions are ever written, those of the kind asked first; which, by the seed."""
    rows = "\n".join(f"| BD-{3000 + i} | failure number {i} of the jobs subsystem |"
                     for i in range(12))
    doc = Document("codes.md", "Codes", f"# Codes\n\n| Code | Message |\n|---|---|\n{rows}\n")
    passages = passages_of([doc])
    kept = {}
    for seed in (0, 1):
        gen = StructureGenerator(per_section=3)
        gen.prepare([doc], passages)
        out = gen.write([Job(passages[0], d, "identifier", d) for d in range(8)], seed)
        assert [o if isinstance(o, str) else o["kind"] for o in out] == \
            ["identifier"] * 3 + ["factual"] * 3 + ["no_structure"] * 2
        kept[seed] = [o["question"] for o in out[:6]]
        assert len(set(kept[seed])) == 6
    assert kept[0] != kept[1]


def test_per_section_out_of_range_is_refused():
    with pytest.raises(InvalidValue, match="per_section"):
        StructureGenerator(per_section=0)


def generate(out, *args: str) -> int:
    return main(["questions", "generate", "--generator", "structure", "--out", str(out), *args,
                 *QUIET])


def test_a_markdown_folder_generates_a_file_that_passes_check(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for doc in DOCS:
        (corpus / doc.doc_id).write_text(doc.text)
    out = tmp_path / "q.jsonl"
    assert generate(out, "--n", "40", "dataset=markdown", f"dataset.corpus_dir={corpus}") == 0
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["kind"] for r in written} == {"factual", "procedural", "identifier", "semantic"}
    assert all(NATURAL.match(r["question"]) for r in written)
    assert written[0]["generator"] == {"name": "structure", "per_section": 2, "context": 0}
    assert written[0]["prompt_sha256"] == structure.prompt_sha256()


@pytest.mark.slow
def test_the_handbook_file_passes_check_and_the_same_seed_writes_the_same_bytes(tmp_path):
    a, b = tmp_path / "a" / "structure.jsonl", tmp_path / "b" / "structure.jsonl"
    a.parent.mkdir(), b.parent.mkdir()
    for out in (a, b):
        assert generate(out, "--n", "150", "--seed", "0") == 0
    assert a.read_bytes() == b.read_bytes()
    assert golden.main(["check", "--golden", str(a)]) == 0
    c = tmp_path / "c.jsonl"
    assert generate(c, "--n", "150", "--seed", "1") == 0
    assert c.read_bytes() != a.read_bytes()


@pytest.mark.parametrize("page, asker", [
    ("Contact ACAS if you're unsure if you're an agency worker.",
     "Contact ACAS if I'm unsure if I'm an agency worker."),
    ("You must tell your employer and they can send you a form.",
     "I must tell my employer and they can send me a form."),
    ("The council writes to you once you've applied yourself.",
     "The council writes to me once I've applied myself."),
    ("You are eligible if you were employed and you’ll keep yours.",
     "I am eligible if I was employed and I'll keep mine."),
    ("Nothing here addresses the reader.", "Nothing here addresses the reader."),
])
def test_first_person_puts_the_page_in_the_askers_voice(page, asker):
    assert structure.first_person(page) == asker


SITUATED = """# Carer's Allowance

You could get Carer's Allowance if you care for someone at least 35 hours a week.

## What you'll get

You get £81.90 a week if you're eligible. It is paid every four weeks into your account.

## Eligibility

You must be 16 or over and spend at least 35 hours a week caring for someone.

## How to claim

Apply online or by post with your National Insurance number ready.
"""


def situated(context: int, seed: int = 0) -> list[dict]:
    doc = Document("carers.md", "Carer's Allowance", SITUATED)
    passages = passages_of([doc])
    gen = StructureGenerator(context=context)
    gen.prepare([doc], passages)
    return [o for o in gen.write([Job(p, 0, "factual", f"{p.pid}:0") for p in passages], seed)
            if isinstance(o, dict)]


def test_context_puts_sentences_of_the_page_outside_the_answers_section_before_it():
    """context=c: c sentences of the same page in the asker's voice, none from the evidence's
    own section and none of its quote, before the question the page's structure asks; the
    evidence is unchanged; the same seed writes the same, another seed may draw others."""
    bare = {o["evidence"][0]["quote"]: o for o in situated(0)}
    sentences = {s.text: s for s in structure.situations(
        Document("carers.md", "Carer's Allowance", SITUATED))}
    mine = {structure.first_person(t): s for t, s in sentences.items()}
    for context in (1, 2):
        written = situated(context)
        assert [o["evidence"] for o in written] == [b["evidence"] for b in bare.values()]
        for o in written:
            plain = bare[o["evidence"][0]["quote"]]["question"]
            assert o["question"].endswith(" " + plain)
            lead = o["question"][:-len(plain) - 1]
            drawn = [s for s in mine if s in lead]
            assert len(drawn) == context and " ".join(
                sorted(drawn, key=lambda s: mine[s].start)) == lead
            quote = o["evidence"][0]["quote"]
            own = next(s.path for s in sentences.values() if s.text in quote)
            assert all(mine[s].path != own for s in drawn)
        assert situated(context) == written
    assert {o["question"] for o in situated(1, seed=1)} != {o["question"] for o in situated(1)}


def test_a_semantic_question_whose_situation_shares_the_answers_words_is_factual():
    """The situation may repeat the answer's words; the kind then follows the rule questions
    check holds semantic questions to (at most MAX_SEMANTIC_OVERLAP shared content words)."""
    for o in situated(2):
        shared = golden.semantic_shared(o["question"], [o["evidence"][0]["quote"]])
        assert o["kind"] != "semantic" or len(shared) <= golden.MAX_SEMANTIC_OVERLAP


def test_context_out_of_range_is_refused_and_a_situated_file_passes_check(tmp_path):
    with pytest.raises(InvalidValue, match="context"):
        StructureGenerator(context=4)
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for doc in (*DOCS, Document("carers.md", "Carer's Allowance", SITUATED)):
        (corpus / doc.doc_id).write_text(doc.text)
    out = tmp_path / "q.jsonl"
    assert generate(out, "--n", "40", "dataset=markdown", f"dataset.corpus_dir={corpus}",
                    "generator.context=2", "max_words=80") == 0
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written[0]["generator"] == {"name": "structure", "per_section": 2, "context": 2}
    assert all(r["question"].count(". ") >= 1 or r["question"].count("? ") >= 1
               for r in written if r["evidence"][0]["doc"] == "carers.md")


def test_a_situation_is_no_faq_answer_no_back_reference_and_not_the_answers_subsection():
    """What context draws from: not an FAQ entry's text (it answers another question), not a
    sentence that points back ("It ...", "Replace it ..."), not a subsection of the evidence's
    section (its next step); a page with nothing else to give drops the question."""
    text = """# Vault

## Install the vault

Download the package from the release page first.

### After installing

Run the setup wizard once to create the admin account.

## Backups

It keeps seven daily copies in the archive bucket.
Replace it by setting a new bucket name in the config file.
Backups run every night at two in the morning local time.

## Is my data encrypted?

Agents encrypt every chunk with a per-tenant key before upload.
"""
    doc = Document("vault.md", "Vault", text)
    drawn = {s.text for s in structure.situations(doc)}
    assert drawn == {"Download the package from the release page first.",
                     "Run the setup wizard once to create the admin account.",
                     "Backups run every night at two in the morning local time."}
    passages = passages_of([doc])
    gen = StructureGenerator(context=2)
    gen.prepare([doc], passages)
    out = [o for o in gen.write([Job(p, 0, "procedural", f"{p.pid}:0") for p in passages], 0)
           if isinstance(o, dict)]
    install = next(o for o in out if o["question"].endswith("How do I install the vault?"))
    assert install["question"] == ("Backups run every night at two in the morning local time. "
                                   "How do I install the vault?")
    lone = Document("lone.md", "Lone", "# Lone\n\nThe lone page says one thing about lone "
                    "widgets and their use.\n")
    gen.prepare([lone], passages_of([lone]))
    assert gen.write([Job(p, 0, "factual", f"{p.pid}:0") for p in passages_of([lone])], 0) == [
        "no_situation"]


def test_an_faq_bold_line_asking_how_is_procedural_as_its_heading_is():
    """One rule for the kind of a question an author wrote, heading or bold line."""
    for text in ("## How do I pause copying for a weekend?\n\nSet the window to closed on "
                 "both days in the schedule file.\n",
                 "**How do I pause copying for a weekend?**\n\nSet the window to closed on "
                 "both days in the schedule file.\n"):
        doc = Document("faq.md", "FAQ", f"# FAQ\n\n{text}")
        found = [(k, q) for _, k, q in asked(doc) if q.startswith("How do I pause")]
        assert found == [("procedural", "How do I pause copying for a weekend?")]
