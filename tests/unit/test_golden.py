"""The golden-set validator: passes on the shipped data, and names file:line for every kind of
problem on tiny hand-written corpora."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from cli_runs import run_here
from conftest import CORPUS, GOLDEN, jsonl, write_tree

from ragexp.cli import main as cli
from ragexp.data.golden import (
    GoldenError,
    check_golden,
    find_quote,
    golden_files,
    load_corpus,
    load_golden,
    main,
)

MINIMUM = {"identifier": 15, "semantic": 20, "procedural": 15, "factual": 25, "unanswerable": 15}


def _ws(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- the shipped golden set

def test_check_cli_passes_on_shipped_data_and_prints_counts():
    proc = run_here(main, ["check"])
    assert proc.returncode == 0, proc.stderr
    printed = dict(re.findall(r"^\| (\w+) \| (\d+) \|$", proc.stdout, flags=re.M))
    # Expected counts read straight from the files, not through ragexp.
    expected = Counter(json.loads(line)["kind"] for f in sorted(GOLDEN.glob("*.jsonl"))
                       for line in f.read_text().splitlines() if line.strip())
    for kind, minimum in MINIMUM.items():
        assert int(printed[kind]) == expected[kind]
        assert expected[kind] >= minimum, f"{kind}: {expected[kind]} < {minimum}"
    assert int(printed["total"]) == sum(expected.values())


def test_shipped_evidence_resolves_to_the_quoted_text(docs, golden):
    raw = {json.loads(line)["id"]: json.loads(line) for f in sorted(GOLDEN.glob("*.jsonl"))
           for line in f.read_text().splitlines() if line.strip()}
    assert len(golden) == len(raw)
    for q in golden:
        quotes = [ev["quote"] for ev in raw[q.qid].get("evidence") or []]
        assert len(q.evidence) == len(quotes)
        for span, quote in zip(q.evidence, quotes):
            assert _ws(docs[span.doc_id].text[span.start:span.end]) == _ws(quote)


# ---------------------------------------------------------------- tiny hand-made fixtures

GUIDE = """# Guide

## Leases

A worker holds a lease for thirty seconds and
renews it with a heartbeat before it expires.

The word banana appears here. The word banana appears here.
"""

GOOD = {"id": "t-01", "kind": "factual", "question": "How long is a lease held?",
        "answer": "Thirty seconds.",
        "evidence": [{"doc": "guide.md",
                      "quote": "holds a lease for thirty seconds and renews it"}]}


def _setup(tmp_path, lines, extra_files=None):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl(lines), **(extra_files or {})})
    return corpus, golden


def _assert_reported(capsys, corpus, golden, file, line, fragment):
    """check_golden, load_golden and the CLI all report the problem at file:line."""
    docs = load_corpus(corpus)
    _, problems = check_golden(golden, docs)
    where = f"{golden / file}:{line}:"
    hits = [p for p in problems if str(p).startswith(where) and fragment in p.message]
    assert hits, f"no problem at {where} mentioning {fragment!r}: {[str(p) for p in problems]}"
    with pytest.raises(GoldenError) as err:
        load_golden(golden, docs)
    assert where in str(err.value)
    rc = main(["check", "--corpus", str(corpus), "--golden", str(golden)])
    assert rc != 0
    assert where in capsys.readouterr().err
    # the command the docs name ("golden check" was only python -m ragexp.data.golden check)
    assert cli.main(["questions", "check", "--corpus", str(corpus), "--golden", str(golden)]) == 1
    assert where in capsys.readouterr().err


def test_good_fixture_is_clean(tmp_path):
    corpus, golden = _setup(tmp_path, [GOOD, {"id": "t-02", "kind": "unanswerable",
                                               "question": "Who founded the company?"}])
    queries = load_golden(golden, load_corpus(corpus))
    assert [q.qid for q in queries] == ["t-01", "t-02"]
    assert not queries[1].answerable and queries[1].evidence == ()


def test_duplicate_id(tmp_path, capsys):
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "question": "Again?"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "duplicate id 't-01'")
    _, problems = check_golden(golden, load_corpus(corpus))
    assert f"first at {golden / 'g.jsonl'}:1" in problems[0].message


def test_duplicate_id_across_files(tmp_path, capsys):
    corpus, golden = _setup(tmp_path, [GOOD], {"h.jsonl": jsonl([GOOD])})
    _assert_reported(capsys, corpus, golden, "h.jsonl", 1, "duplicate id")


def test_kinds_come_from_the_data(tmp_path):
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "id": "t-02", "kind": "trivia"},
                                       {k: v for k, v in GOOD.items() if k != "kind"} | {"id": "t-03"}])
    queries = load_golden(golden, load_corpus(corpus))
    assert [q.kind for q in queries] == ["factual", "trivia", "general"]
    assert all(q.answerable for q in queries)


@pytest.mark.parametrize("kind", ["", "two words", "a.b", 7, "x" * 41])
def test_kind_must_be_a_metric_safe_name(tmp_path, capsys, kind):
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "id": "t-02", "kind": kind}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "is not a name of 1-40 letters")


def test_quote_not_found(tmp_path, capsys):
    bad = {**GOOD, "id": "t-02",
           "evidence": [{"doc": "guide.md", "quote": "holds a lease for sixty seconds"}]}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "quote not found")


def test_quote_ambiguous(tmp_path, capsys):
    bad = {**GOOD, "id": "t-02",
           "evidence": [{"doc": "guide.md", "quote": "The word banana appears here."}]}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "found 2 times")


def test_unanswerable_with_evidence(tmp_path, capsys):
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "id": "t-02", "kind": "unanswerable"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     "unanswerable question has evidence")


@pytest.mark.parametrize("evidence", [[], None])
def test_answerable_without_evidence(tmp_path, capsys, evidence):
    bad = {**GOOD, "id": "t-02", "evidence": evidence}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "has no evidence")


@pytest.mark.parametrize("kind", ["Unanswerable", "UNANSWERABLE"])
def test_unanswerable_in_another_case_is_named_as_the_kind_meant(tmp_path, capsys, kind):
    bad = {"id": "t-02", "kind": kind, "question": "What is the moon made of?"}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f"answerable question ({kind}) has no evidence; the kind that marks a "
                     f"question the corpus does not answer is 'unanswerable', in lower case")


def test_an_evidence_item_given_twice_is_reported_once(tmp_path):
    item = {"doc": "guide.md", "quote": "holds a lease for sixty seconds"}
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "id": "t-02", "evidence": [item, item]}])
    _, problems = check_golden(golden, load_corpus(corpus))
    assert [p.message.count("quote not found") for p in problems] == [1]


def test_missing_document(tmp_path, capsys):
    bad = {**GOOD, "id": "t-02", "evidence": [{"doc": "nope.md", "quote": "anything"}]}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     "document not found in corpus: nope.md")


def test_invalid_json(tmp_path, capsys):
    corpus, golden = _setup(tmp_path, [GOOD, '{"id": "t-02", "kind": ', GOOD | {"id": "t-03"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "invalid JSON")
    # The validator keeps going: the line after the broken one is still read.
    queries, _ = check_golden(golden, load_corpus(corpus))
    assert [q.qid for q in queries] == ["t-01", "t-03"]


def test_semantic_question_sharing_words_with_its_evidence(tmp_path, capsys):
    # worker, hold(s) and lease are in both question and quote.
    bad = {"id": "t-02", "kind": "semantic", "question": "How long does a worker hold a lease?",
           "answer": "Thirty seconds.",
           "evidence": [{"doc": "guide.md", "quote": "A worker holds a lease for thirty seconds"}]}
    corpus, golden = _setup(tmp_path, [GOOD, bad])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, "shares 3 content words")


def test_semantic_question_sharing_one_word_is_allowed(tmp_path):
    ok = {"id": "t-02", "kind": "semantic", "question": "What keeps the heartbeat going?",
          "answer": "Renewal.",
          "evidence": [{"doc": "guide.md",
                        "quote": "renews it with a heartbeat before it expires"}]}
    corpus, golden = _setup(tmp_path, [GOOD, ok])
    assert [q.qid for q in load_golden(golden, load_corpus(corpus))] == ["t-01", "t-02"]


def test_quote_across_a_hard_wrap_maps_to_raw_offsets(tmp_path):
    corpus, golden = _setup(tmp_path, [GOOD])
    docs = load_corpus(corpus)
    (query,) = load_golden(golden, docs)
    (span,) = query.evidence
    text = docs["guide.md"].text
    # Offsets computed by hand from the raw file.
    assert span.start == text.index("holds a lease")
    assert span.end == text.index("renews it") + len("renews it")
    assert "\n" in text[span.start:span.end]
    assert _ws(text[span.start:span.end]) == GOOD["evidence"][0]["quote"]


def test_find_quote_collapses_whitespace_in_the_quote_too(tmp_path):
    docs = load_corpus(write_tree(tmp_path / "corpus", {"guide.md": GUIDE}))
    spans = find_quote(docs["guide.md"], "  thirty   seconds\n and  ")
    assert len(spans) == 1
    assert docs["guide.md"].text[spans[0].start:spans[0].end] == "thirty seconds and"


def test_missing_folders_are_reported(tmp_path, capsys):
    rc = main(["check", "--corpus", str(tmp_path / "nope"), "--golden", str(GOLDEN)])
    assert rc == 2
    assert f"corpus folder {tmp_path / 'nope'}: no such folder" in capsys.readouterr().err
    (tmp_path / "a.md").write_text("# A\n")
    assert main(["check", "--corpus", str(tmp_path / "a.md"), "--golden", str(GOLDEN)]) == 2
    assert f"corpus folder {tmp_path / 'a.md'}: a file, not a folder" in capsys.readouterr().err
    rc = main(["check", "--corpus", str(CORPUS), "--golden", str(tmp_path / "nope")])
    assert rc == 2
    assert "golden set not found" in capsys.readouterr().err


# --- evidence at three levels: quote, section, document -----------------------------------------

SECTIONED = """# Install

Brindle installs from one binary.

## Docker

### Compose

Use the compose file from the release page and run `docker compose up`.

### Plain docker

Run the image with the data volume mounted.

## From source

Build with `make release`. The tests take five minutes.

## Empty

## Other
Nothing else.
"""


def _one_question(tmp_path, docs: dict, evidence: list) -> tuple:
    """``(corpus, golden)`` folders: ``GUIDE`` and ``docs`` (``{path: text}``), and a question
    file of ``GOOD`` (line 1) and one question with ``evidence`` (line 2); again with other
    evidence, the files are written anew."""
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, **docs})
    rec = {"id": "s-01", "kind": "procedural", "question": "How do I install it?",
           "answer": "See the install page.", "evidence": evidence}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    return corpus, golden


def _sectioned(tmp_path, evidence):
    return _one_question(tmp_path, {"install.md": SECTIONED}, evidence)


def _span_text(tmp_path, evidence):
    corpus, golden = _sectioned(tmp_path, evidence)
    docs = load_corpus(corpus)
    q = load_golden(golden, docs)[1]
    return [docs[s.doc_id].text[s.start:s.end] for s in q.evidence]


def test_section_label_owns_its_subsections(tmp_path):
    # "Docker" holds no text of its own: only its two subsections.
    (text,) = _span_text(tmp_path, [{"doc": "install.md", "section": "Install > Docker"}])
    assert "docker compose up" in text and "data volume mounted" in text
    assert "make release" not in text and "## Docker" not in text


def test_section_label_by_unambiguous_tail_case_insensitive(tmp_path):
    (text,) = _span_text(tmp_path, [{"doc": "install.md", "section": "plain  DOCKER"}])
    assert text.strip() == "Run the image with the data volume mounted."


def test_document_label_and_mixed_levels(tmp_path):
    texts = _span_text(tmp_path, [{"doc": "install.md"},
                                  {"doc": "guide.md", "quote": "holds a lease for thirty seconds"}])
    assert texts[0] == SECTIONED and texts[1] == "holds a lease for thirty seconds"


@pytest.mark.parametrize("evidence, fragment", [
    ([{"doc": "install.md", "section": "Kubernetes"}], "no section 'Kubernetes' in install.md"),
    ([{"doc": "install.md", "section": "Empty"}], "has no text under its heading"),
    ([{"doc": "install.md", "section": "Docker", "quote": "x"}], "both a quote and a section"),
    ([{"doc": "install.md", "heading": "Docker"}], "unknown evidence field(s) 'heading'"),
    ([{"doc": "install.md", "section": ""}], "'section' must be a non-empty string"),
    ([{"doc": "nope.md"}], "document not found in corpus: nope.md"),
    # a notes.txt file in the folder is not read: the message said only "not found"
    ([{"doc": "notes.txt"}], "document not found in corpus: notes.txt (the corpus reads only "
                             "markdown files, .md, .markdown; a .txt file is not read: rename it "
                             "to .md)"),
])
def test_bad_section_and_document_labels(tmp_path, capsys, evidence, fragment):
    corpus, golden = _sectioned(tmp_path, evidence)
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, fragment)


def test_markdown_files_in_any_case_and_dot_markdown_are_documents(tmp_path):
    # README.MD and a Jekyll post.markdown were skipped: questions on them were refused as
    # "not found", and a sweep over the folder measured a corpus without them
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, "README.MD": "# Read me\n\nHi.\n",
                                              "post.markdown": "# Post\n\nBody text.\n",
                                              "notes.txt": "# Notes\n", "dir.md/x.txt": "x"})
    docs = load_corpus(corpus)
    assert sorted(docs) == ["README.MD", "guide.md", "post.markdown"]
    rec = {"id": "m-01", "kind": "x", "question": "q?", "answer": "a",
           "evidence": [{"doc": "post.markdown", "quote": "Body text."}]}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    (span,) = load_golden(golden, docs)[1].evidence
    assert docs["post.markdown"].text[span.start:span.end] == "Body text."


@pytest.mark.parametrize("doc, quote, line, section", [
    ("# Guide\n\n## Install with Docker\n\nRun the image.\n", "Install with Docker", 3,
     "Install with Docker"),
    ("# Guide\n\n## Install with Docker\n\nRun the image.\n", "## Install", 3,
     "Install with Docker"),
    ("Setext Title\n============\n\nBody words.\n", "Title ====", 1, "Setext Title"),
])
def test_a_quote_of_a_heading_is_refused_with_its_section_label(tmp_path, capsys, doc, quote,
                                                                 line, section):
    # golden check accepted it; every run but chunking=none then refused the question (no chunk's
    # source text holds a heading), so a chunking ablation could not include it
    corpus, golden = _one_question(tmp_path, {"h.md": doc},
                                   [{"doc": "h.md", "quote": quote}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f"quote lies in the heading at line {line} of h.md")
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f'label the section, {{"doc": "h.md", "section": "{section}"}}')
    # the label the message gives
    corpus, golden = _one_question(tmp_path, {"h.md": doc}, [{"doc": "h.md", "section": section}])
    assert len(load_golden(golden, load_corpus(corpus))) == 2


def test_a_quote_of_a_heading_in_a_document_of_headings_only_is_kept(tmp_path):
    # such a document's chunks are its headings' text (chunking.parse_sections)
    from ragexp.data.relevance import span_qrels
    from ragexp.stages.chunking import MarkdownChunker

    corpus, golden = _one_question(tmp_path, {"h.md": "# Todo\n\n## Later\n"},
                                   [{"doc": "h.md", "quote": "Later"}])
    docs = load_corpus(corpus)
    chunks = MarkdownChunker().chunk(docs.values())
    assert span_qrels(load_golden(golden, docs), chunks)["s-01"]


def test_a_quote_from_a_heading_into_its_text_is_kept(tmp_path):
    corpus, golden = _one_question(tmp_path, {"h.md": "# Guide\n\nRun the image now.\n"},
                                   [{"doc": "h.md", "quote": "Guide Run the image"}])
    assert len(load_golden(golden, load_corpus(corpus))[1].evidence) == 1


FILLER = "The machine keeps its own log of every cycle it runs, day and night. " * 6
CROSSED = (f"# Machine\n\n## Restart\n\n{FILLER}Clear the hopper and restart.\n\n"
           f"### Error E-43\n\nE-43 means the milk line is blocked. {FILLER}\n")


@pytest.mark.parametrize("doc, quote, line", [
    (CROSSED, "Clear the hopper and restart. ### Error E-43 E-43 means the milk", 7),
    (CROSSED, "restart. ### Error E-43 E-43 means", 7),
    ("# A\n\nFirst part ends here.\n\nSetext B\n--------\n\nSecond part.\n",
     "ends here. Setext B -------- Second", 5),
])
def test_a_quote_across_a_heading_is_refused(tmp_path, capsys, doc, quote, line):
    """A trial's quote ran from one section into the next: ``questions check`` passed it and
    the run refused its question, no chunk holding half of it under the markdown chunking."""
    from ragexp.data.relevance import span_qrels
    from ragexp.records import Query, Span
    from ragexp.stages.chunking import MarkdownChunker

    corpus, golden = _one_question(tmp_path, {"h.md": doc}, [{"doc": "h.md", "quote": quote}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f"quote runs across the heading at line {line} of h.md")
    docs = load_corpus(corpus)
    if quote.startswith("Clear"):  # the run's judgement of the trial's quote: no chunk at all
        start = docs["h.md"].text.index("Clear")
        end = docs["h.md"].text.index("milk") + len("milk")
        q = Query("s-01", "q?", "procedural", evidence=(Span("h.md", start, end),))
        assert span_qrels([q], MarkdownChunker().chunk(docs.values())) == {"s-01": {}}


@pytest.mark.parametrize("quote", [
    "Clear the hopper and restart.",  # ends before the next heading
    "night. Clear the hopper and restart. ### Error",  # mostly its own section's
    "restart. ### Error E-43 E-43 means the milk line is blocked.",  # mostly the next one's
])
def test_a_quote_mostly_in_one_section_is_kept(tmp_path, quote):
    """The run judges it by the section holding most of it (``units``, the relevance rule's
    half): ``tests/unit/test_units.py`` holds such a quote's judgement steady across chunkings."""
    corpus, golden = _one_question(tmp_path, {"h.md": CROSSED},
                                   [{"doc": "h.md", "quote": quote}])
    assert len(load_golden(golden, load_corpus(corpus))[1].evidence) == 1


NFC, NFD = "Caf\u00e9 hours", "Cafe\u0301 hours"  # print alike


@pytest.mark.parametrize("doc_form, quote_form", [(NFC, NFD), (NFD, NFC)])
def test_a_quote_in_other_code_points_says_so(tmp_path, capsys, doc_form, quote_form):
    # "quote not found: 'Café hours'" printed the quote as the document shows it
    corpus, golden = _one_question(tmp_path, {"c.md": f"# C\n\n{doc_form} are nine to five.\n"},
                                   [{"doc": "c.md", "quote": quote_form}])
    quote, doc = ("NFD", "NFC") if quote_form == NFD else ("NFC", "NFD")
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f"quote not found in c.md: {quote_form!r}; the document has it in other "
                     f"code points (the quote's are {quote}, the document's {doc}: Unicode "
                     f"normalisation)")


@pytest.mark.parametrize("doc_text, quote, hint", [
    ("Five\u200bhundred jobs a second.", "Five hundred jobs",
     "the document has it with other invisible characters"),
    ("Five hundred jobs a second.", "Five\u00adhundred",
     "the document has it with other invisible characters"),
    ("Five hundred jobs a second.", "five HUNDRED jobs", "the document has it in other case"),
    # typeset by an editor, or copied from a rendered page: printed alike at a glance
    ("It says \u201cdon\u2019t stop\u201d \u2014 ever.", 'says "don\'t stop" - ever',
     "the document has it with other punctuation"),
    ("Wait... then retry 2-3 times.", "Wait\u2026 then retry 2\u20133 times",
     "the document has it with other punctuation"),
])
def test_a_quote_that_misses_by_case_punctuation_or_an_invisible_character_says_so(
        tmp_path, capsys, doc_text, quote, hint):
    corpus, golden = _one_question(tmp_path, {"c.md": f"# C\n\n{doc_text}\n"},
                                   [{"doc": "c.md", "quote": quote}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, f"quote not found in c.md: "
                     f"{quote!r}; {hint}")


def test_sections_of_one_heading_path_are_told_to_take_a_quote(tmp_path, capsys):
    # "give more of its heading path", where there is no more path to give
    doc = "# API\n\n## Example\n\none\n\n# API\n\n## Example\n\ntwo\n"
    corpus, golden = _one_question(tmp_path, {"dup.md": doc},
                                   [{"doc": "dup.md", "section": "API > Example"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     "2 sections have the heading path 'API > Example' (lines 3, 9), which no "
                     "label can tell apart; quote the text meant instead")


@pytest.mark.parametrize("heading, label", [(NFC, NFD), (NFD, NFC), (NFC, f"C > {NFD}")])
def test_a_section_label_in_other_code_points_names_its_section(tmp_path, heading, label):
    # refused as "no section", the document's headings printed just like the label
    doc = f"# C\n\n## {heading}\n\nNine to five.\n\n## Other\n\nx\n"
    corpus, golden = _one_question(tmp_path, {"c.md": doc}, [{"doc": "c.md", "section": label}])
    docs = load_corpus(corpus)
    (span,) = load_golden(golden, docs)[1].evidence
    assert docs["c.md"].text[span.start:span.end].strip() == "Nine to five."


def test_a_document_named_in_other_code_points_says_so(tmp_path, capsys):
    corpus, golden = _one_question(tmp_path, {"caf\u00e9.md": "# C\n\nx\n"},
                                   [{"doc": "cafe\u0301.md"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     "is not the known 'caf\u00e9.md': the same characters in other code points")


@pytest.mark.parametrize("field, value, fragment", [
    ("kind", "all", "kind 'all' is the name of the group of every question"),
    ("kind", "ALL", "kind 'ALL' is the name of the group of every question"),
    ("source", "all", "source 'all' is the name of every source together"),
])
def test_a_kind_or_source_named_all_is_refused(tmp_path, capsys, field, value, fragment):
    # kind "all": compare and the gate printed two rows "all" (the gate's note quoting the
    # kind's), and the sweep's page was not written (a TypeError in its charts)
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, {**GOOD, "id": "t-02",
                                                                        field: value}])})
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, fragment)


def test_questions_asked_twice_are_named(tmp_path, capsys, caplog):
    # a copy of a question under another id passed golden check without a word; split=dev
    # scored one copy and split=test the other
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    copy = {**GOOD, "id": "t-01b", "question": "  how long is a LEASE held? "}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, copy])})
    assert main(["check", "--corpus", str(corpus), "--golden", str(golden)]) == 0
    said = ("1 question text(s) are asked more than once (t-01 = t-01b): each copy counts again "
            "in every mean; ragexp's dev/test split puts copies of one kind on one side")
    assert f"warning: {said}" in capsys.readouterr().err
    with caplog.at_level("WARNING", logger="ragexp.data.golden"):
        load_golden(golden, load_corpus(corpus))
    assert said in caplog.text


def test_hidden_files_and_folders_are_not_documents(tmp_path, caplog):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, ".hidden.md": "# H\n\nx\n",
                                              ".git/inside.md": "# I\n\ny\n",
                                              "sub/.github/ISSUE.md": "# T\n\nz\n"})
    with caplog.at_level("INFO", logger="ragexp.data.golden"):
        assert sorted(load_corpus(corpus)) == ["guide.md"]
    assert "3 hidden markdown file(s) not read" in caplog.text
    # a question labelled there was refused as "document not found", the file right there
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([
        {**GOOD, "evidence": [{"doc": "sub/.github/ISSUE.md"}]}])})
    _, problems = check_golden(golden, load_corpus(corpus))
    assert [p.message for p in problems] == [
        "t-01: document not found in corpus: sub/.github/ISSUE.md (a file or folder whose name "
        "starts with '.' is hidden, not a document of the corpus: rename it)"]
    hidden = write_tree(tmp_path / ".dotted" / "docs", {"a.md": "# A\n\ntext\n"})
    assert sorted(load_corpus(hidden)) == ["a.md"]  # only names below the corpus folder count


def test_a_linked_folder_is_read_once_and_a_link_loop_ends(tmp_path):
    # a folder linked into the corpus (a shared folder of a monorepo) was skipped without a
    # word, while a linked file was read; a link back into the corpus or to an ancestor must not
    # read its files again under another id, nor walk forever
    shared = write_tree(tmp_path / "shared", {"ops.md": "# Ops\n\nRestart it.\n",
                                              "deep/more.md": "# More\n\nm\n"})
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, "sub/a.md": "# A\n\na\n"})
    for name, target in [("linked", shared), ("again", shared), ("deep_again", shared / "deep"),
                         ("loop", corpus), ("sub/up", corpus / "sub"), ("root", tmp_path)]:
        (corpus / name).symlink_to(target, target_is_directory=True)
    (shared / "back").symlink_to(corpus, target_is_directory=True)
    assert sorted(load_corpus(corpus)) == ["again/deep/more.md", "again/ops.md", "guide.md",
                                           "sub/a.md"]  # "again" is first in name order


def test_documents_of_the_same_text_are_named(tmp_path, caplog):
    # two copies of one page: a question labelled in one scored 0 for retrieving the other, and
    # which came first was decided by the file name, without a word
    page = "# Leases\n\nA worker holds a lease for thirty seconds.\n"
    corpus = write_tree(tmp_path / "corpus", {
        "a.md": page, "old/a.md": "---\ntitle: Old\n---\n" + page + "\n\n", "b.md": "# B\n\nb\n",
        "empty1.md": "", "empty2.md": "\n"})
    with caplog.at_level("WARNING", logger="ragexp.data.golden"):
        docs = load_corpus(corpus)
    assert len(docs) == 5
    (record,) = [r for r in caplog.records if "same text" in r.getMessage()]
    assert "1 group(s) of documents hold the same text (front matter aside): a.md = old/a.md." \
        in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="ragexp.data.golden"):
        load_corpus(write_tree(tmp_path / "other", {"a.md": page, "b.md": page + "More.\n"}))
    assert not caplog.records


def test_ambiguous_section_names_every_candidate(tmp_path, capsys):
    doc = "# A\n\n## Setup\n\none\n\n# B\n\n## Setup\n\ntwo\n"
    corpus, golden = _one_question(tmp_path, {"dup.md": doc},
                                   [{"doc": "dup.md", "section": "Setup"}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     "is ambiguous in dup.md: 'A > Setup' (line 3), 'B > Setup' (line 9)")
    corpus, golden = _one_question(tmp_path, {"dup.md": doc},
                                   [{"doc": "dup.md", "section": "B > Setup"}])
    docs = load_corpus(corpus)
    (span,) = load_golden(golden, docs)[1].evidence
    assert docs["dup.md"].text[span.start:span.end].strip() == "two"


def test_hash_lines_in_code_fences_are_not_sections(tmp_path):
    doc = "# Guide\n\n```bash\n# Setup\necho hi\n```\n\n## Setup\n\nreal text\n"
    corpus, golden = _one_question(tmp_path, {"f.md": doc},
                                   [{"doc": "f.md", "section": "Setup"}])
    docs = load_corpus(corpus)
    (span,) = load_golden(golden, docs)[1].evidence
    assert docs["f.md"].text[span.start:span.end].strip() == "real text"


@pytest.mark.parametrize("max_words, overlap", [(10, 0), (12, 4), (40, 10), (250, 40)])
def test_section_labels_survive_rechunking(tmp_path, max_words, overlap):
    """A chunk is relevant to a section label exactly when it lies inside that section, at any
    chunk size; with whole-document chunks the document holding the section is relevant."""
    from ragexp.data.relevance import span_qrels
    from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker

    long_docker = SECTIONED.replace("Run the image with the data volume mounted.",
                                    " ".join(f"Step {i} runs the image." for i in range(30)))
    corpus, golden = _one_question(tmp_path, {"install.md": long_docker},
                                   [{"doc": "install.md", "section": "Docker"}])
    docs = load_corpus(corpus)
    queries = load_golden(golden, docs)
    chunks = MarkdownChunker(max_words=max_words, overlap_words=overlap).chunk(docs.values())
    relevant = set(span_qrels(queries, chunks)["s-01"])
    inside = {c.chunk_id for c in chunks if c.heading.startswith("Install > Docker")}
    assert len(inside) >= 2 and relevant == inside
    whole = WholeDocumentChunker().chunk(docs.values())
    assert set(span_qrels(queries, whole)["s-01"]) == {"install.md"}


@pytest.mark.parametrize("value, said", [(True, "got true"), (None, "got null")])
def test_a_bad_id_is_shown_as_the_json_it_was(tmp_path, capsys, value, said):
    """Trial item 10: ``"id": true`` was reported as Python's ``got True``."""
    corpus, golden = _setup(tmp_path, [GOOD, {**GOOD, "id": value}])
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2,
                     f"'id' must be a non-empty string or an integer, {said}")


HEADINGS_ONLY = "# Only Headings\n## Alpha topic\n## Beta topic"


@pytest.mark.parametrize("section, chunk", [("Alpha topic", "headings.md#1"),
                                            ("Only Headings > Beta topic", "headings.md#2")])
def test_a_heading_only_document_is_labelled_by_its_headings(tmp_path, section, chunk):
    """Trial item 2: docs/inputs.md says a document whose only text is headings gives one
    section per heading, its text the heading's: a section label names that chunk."""
    from ragexp.data.relevance import span_qrels
    from ragexp.stages.chunking import MarkdownChunker

    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, "headings.md": HEADINGS_ONLY})
    rec = {"id": "h-01", "kind": "factual", "question": "Which topics are there?",
           "answer": "Alpha and Beta.", "evidence": [{"doc": "headings.md", "section": section}]}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    docs = load_corpus(corpus)
    assert check_golden(golden, docs)[1] == []
    query = load_golden(golden, docs)[1]
    chunks = MarkdownChunker().chunk([docs["headings.md"]])
    title = section.split(" > ")[-1]
    assert [c.text.splitlines()[-1] for c in chunks if c.chunk_id == chunk] == [title]
    assert span_qrels([query], chunks) == {"h-01": {chunk: 1}}


META_ONLY = "---\ntitle: Only meta\n---\n"


@pytest.mark.parametrize("evidence, fragment", [
    ([{"doc": "meta.md"}], "document meta.md has no text: it holds only front matter"),
    ([{"doc": "meta.md", "quote": "Only meta"}], "quote lies in the front matter of meta.md"),
    ([{"doc": "intro.md", "quote": "title: Intro"}], "quote lies in the front matter of intro.md"),
    ([{"doc": "empty.md"}], "document empty.md is empty"),
])
def test_front_matter_is_no_text_to_label(tmp_path, capsys, evidence, fragment):
    """Trial item 5: a document of front matter only has no text, and a quote inside front
    matter (metadata) is refused; a quote of the same words in the text is found."""
    files = {"guide.md": GUIDE, "meta.md": META_ONLY, "empty.md": "",
             "intro.md": "---\ntitle: Intro\n---\n# Intro\n\nThe title: Intro is said again.\n"}
    corpus = write_tree(tmp_path / "corpus", files)
    rec = {"id": "m-01", "kind": "factual", "question": "What is it?", "answer": "Meta.",
           "evidence": evidence}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    if evidence[0]["doc"] == "intro.md":  # found once in the text, once in front matter: the text
        docs = load_corpus(corpus)
        (span,) = load_golden(golden, docs)[1].evidence
        assert span.start > docs["intro.md"].text.index("# Intro")
        rec["evidence"] = [{"doc": "intro.md", "quote": "title: Intro\n---"}]
        golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    _assert_reported(capsys, corpus, golden, "g.jsonl", 2, fragment)


@pytest.mark.parametrize("section, relevant", [
    ("Only Headings", {"headings.md#0", "headings.md#1", "headings.md#2"}),
    ("Alpha topic", {"headings.md#1"})])
def test_a_heading_only_section_owns_its_own_chunk_and_its_subsections(tmp_path, section,
                                                                         relevant):
    """A trial: a label on "# Gamma topic" over "## Delta topic" judged Delta's chunk only,
    leaving out Gamma's own (ranked first: RR@10 0.5 where it is 1.0)."""
    from ragexp.data.relevance import span_qrels
    from ragexp.stages.chunking import MarkdownChunker

    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE, "headings.md": HEADINGS_ONLY})
    rec = {"id": "h-01", "kind": "factual", "question": "Which topics are there?",
           "answer": "Alpha and Beta.", "evidence": [{"doc": "headings.md", "section": section}]}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD, rec])})
    docs = load_corpus(corpus)
    query = load_golden(golden, docs)[1]
    chunks = MarkdownChunker().chunk([docs["headings.md"]])
    assert [c.text.splitlines()[-1] for c in chunks] == ["Only Headings", "Alpha topic",
                                                         "Beta topic"]
    assert span_qrels([query], chunks) == {"h-01": dict.fromkeys(relevant, 1)}


def test_a_question_file_given_twice_is_named_once(tmp_path):
    # 'dataset.questions=[qs/one.jsonl,qs/one.jsonl]' said "duplicate id 'a1' (first at
    # qs/one.jsonl:1)", reported at qs/one.jsonl:1 itself
    from ragexp.errors import InvalidValue

    folder = write_tree(tmp_path / "qs", {"one.jsonl": jsonl([GOOD])})
    one = folder / "one.jsonl"
    for given in ([one, one], [folder, one], [str(one), str(tmp_path / "qs" / ".." / "qs" /
                                                        "one.jsonl")]):
        with pytest.raises(InvalidValue, match=r"the question file .*one\.jsonl is given twice"):
            golden_files(given)
    assert golden_files([one]) == [one]


def test_a_question_folder_reads_jsonl_files_in_any_case(tmp_path, caplog):
    # B.JSONL was skipped without a word (the corpus reads README.MD), its questions missing;
    # so was a .json file of questions
    folder = write_tree(tmp_path / "qs", {"a.jsonl": jsonl([GOOD]),
                                          "B.JSONL": jsonl([{**GOOD, "id": "t-02"}]),
                                          "notes.json": "{}", "More.JSON": "{}",
                                          "sub/c.jsonl": "", "sub/e.json": "",
                                          "d.jsonl/inside.txt": "", "f.json/inside.txt": ""})
    with caplog.at_level("WARNING", logger="ragexp.data.golden"):
        assert golden_files(folder) == [folder / "B.JSONL", folder / "a.jsonl"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: More.JSON, notes.json not read: questions are JSON Lines files named *.jsonl "
        f"(one JSON object a line); rename one that holds questions"]
    caplog.clear()
    golden_files(folder / "a.jsonl")  # a file given by name: nothing to say of its folder
    golden_files(folder)  # said once a process: a run reads its question files four times
    assert not caplog.records
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    assert [q.qid for q in load_golden(folder, load_corpus(corpus))] == ["t-02", "t-01"]


def test_ragexp_questions_check_passes_the_shipped_set(capsys):
    assert cli.main(["questions", "check"]) == 0
    n = len(load_golden(GOLDEN, load_corpus(CORPUS)))
    out, err = capsys.readouterr()
    assert f"| total | {n} |" in out
    # run in a starter's folder, it printed the handbook's counts and exit 0 without a word:
    # the user took their own questions to have passed
    assert "note: no --corpus or --golden given: checking the shipped Brindle handbook's corpus " \
        "and golden set; pass --corpus DIR --golden FILE_OR_DIR to check your own" in err


def test_questions_check_says_which_half_is_the_handbook(tmp_path, capsys):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD])})
    assert cli.main(["questions", "check", "--corpus", str(corpus), "--golden", str(golden)]) == 0
    assert "note:" not in capsys.readouterr().err
    assert cli.main(["questions", "check", f"--golden={golden}"]) == 1  # guide.md not there
    assert "note: no --corpus given: checking the shipped Brindle handbook's corpus;" in \
        capsys.readouterr().err


def test_a_missing_section_lists_the_headings_and_says_how_many_more(tmp_path):
    """``(its headings: ...)`` named the first 8 headings of a 12-heading document and nothing
    more, so a user took the other 4 for absent."""
    doc = "".join(f"# Part {i}\n\nText {i}.\n\n" for i in range(1, 13))
    corpus = write_tree(tmp_path / "corpus", {"café.md": doc})
    q = {**GOOD, "evidence": [{"doc": "café.md", "section": "Nope"}]}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([q])})
    _, problems = check_golden([golden / "g.jsonl"], load_corpus(corpus))
    (problem,) = [p.message for p in problems if "no section" in p.message]
    first8 = ", ".join(f"'Part {i}'" for i in range(1, 9))
    assert problem.endswith(f"(its headings: {first8}, ... and 4 more)"), problem


def test_a_list_cut_short_says_how_many_it_left_out():
    from ragexp.decide.compare import not_comparable
    from ragexp.errors import listed

    assert listed(["a", "b", "c"], 3) == "a, b, c"  # all shown: nothing added
    assert listed(range(10), 4, "; ") == "0; 1; 2; 3; ... and 6 more"
    runs = [({"corpus_hash": h}, {}) for h in "abcdef"]
    assert "(a, b, c, d, ... and 2 more)" in not_comparable(runs)


def test_a_count_of_one_reads_as_one(tmp_path, capsys):
    """``questions check`` on a one-document, one-question set printed "1 documents, 1
    questions" (``errors.counted``, used wherever a count of one can reach a message)."""
    from ragexp.errors import counted

    assert [counted(n, "question") for n in (0, 1, 2)] == ["0 questions", "1 question",
                                                           "2 questions"]
    assert counted(1, "index", "indexes") == "1 index" and counted(3, "index",
                                                                   "indexes") == "3 indexes"
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD])})
    assert cli.main(["questions", "check", "--corpus", str(corpus), "--golden",
                     str(golden)]) == 0
    assert capsys.readouterr().out.startswith("1 document, 1 question\n")
