"""Chunkers (source offsets, atomic fences/tables, unwrapping, overlap) and the span relevance
rule, on hand-made documents and on the shipped corpus at several chunk sizes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from ragexp.data.relevance import is_relevant, overlap, span_qrels
from ragexp.records import Chunk, Document, Query, Span
from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker, parse_sections

FENCE = re.compile(r"^\s*(```|~~~)")
SIZES = [(mw, ov) for mw in (40, 80, 120, 250) for ov in (0, 20)]


def _ws(text: str) -> str:
    return " ".join(text.split())


def _body(chunk: Chunk, with_heading: bool = True) -> str:
    return chunk.text.split("\n", 1)[1] if with_heading else chunk.text


MANUAL = """# Manual

Intro sentence one here. Intro sentence two
is wrapped across lines.

## Setup

### Install

Run the installer. It takes a
minute.

```bash
brindle install \\
  --fast
```

| a | b |
|---|---|
| 1 | 2 |

- first item that is
  wrapped
- second item
"""


@pytest.fixture(scope="module")
def manual():
    return Document("manual.md", "Manual", MANUAL)


# ---------------------------------------------------------------- hand-made document

def test_sections_units_and_heading_paths_by_hand(manual):
    sections = parse_sections(manual)
    fence = MANUAL[MANUAL.index("```bash"):MANUAL.index("--fast\n```") + len("--fast\n```")]
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    assert [(h, [u.text for u in units]) for h, units in sections] == [
        ("Manual", ["Intro sentence one here.", "Intro sentence two is wrapped across lines."]),
        # "## Setup" has no text of its own, so it makes no section.
        ("Manual > Setup > Install", ["Run the installer.", "It takes a minute.", fence, table,
                                      "- first item that is wrapped", "- second item"]),
    ]
    for _, units in sections:
        for u in units:
            assert _ws(MANUAL[u.start:u.end]) == _ws(u.text)


def test_include_headings_toggles_the_heading_prefix(manual):
    with_h = MarkdownChunker(max_words=200, overlap_words=0).chunk([manual])
    without = MarkdownChunker(max_words=200, overlap_words=0,
                              include_headings=False).chunk([manual])
    assert [c.chunk_id for c in with_h] == ["manual.md#0", "manual.md#1"]
    assert with_h[0].text == ("Manual\nIntro sentence one here.\n"
                              "Intro sentence two is wrapped across lines.")
    assert with_h[1].text.startswith("Manual > Setup > Install\nRun the installer.\n")
    for a, b in zip(with_h, without):
        assert a.heading == b.heading and a.spans == b.spans
        assert a.text == f"{a.heading}\n{b.text}"
        assert not b.text.startswith(b.heading)


def test_overlap_windows_by_hand():
    # 12 sentences of 5 words each.
    text = "# T\n\n" + " ".join(f"Sentence number {i} says hello." for i in range(12)) + "\n"
    doc = Document("t.md", "T", text)

    def sentences(chunk):
        return [int(n) for n in re.findall(r"number (\d+)", chunk.text)]

    no_overlap = MarkdownChunker(max_words=20, overlap_words=0).chunk([doc])
    assert [sentences(c) for c in no_overlap] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # Each next window restarts 10 words (two sentences) back.
    overlapped = MarkdownChunker(max_words=20, overlap_words=10).chunk([doc])
    assert [sentences(c) for c in overlapped] == [
        [0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9], [8, 9, 10, 11]]


def test_overlap_never_makes_a_window_of_carried_text_only():
    # Units of 8 and 20 words, then a 65-word fence: 8 + 20 + 65 > 80 and 20 + 65 > 80.
    fence = "```\n" + " ".join(f"w{i}" for i in range(63)) + "\n```"
    text = ("# T\n\n" + "Short one with exactly eight words in it. "
            + "Then a longer sentence of exactly twenty words follows here to fill the window "
              "up nicely and then stop now.\n\n" + fence + "\n")
    doc = Document("t.md", "T", text)
    bodies = [c.text.split("\n", 1)[1] for c in
              MarkdownChunker(max_words=80, overlap_words=20).chunk([doc])]
    assert len(bodies) == 2, bodies
    assert bodies[1].startswith("```")


@pytest.mark.parametrize("max_words", [40, 80])
def test_every_window_adds_text_of_its_own(docs, max_words):
    chunks = MarkdownChunker(max_words=max_words, overlap_words=20).chunk(docs.values())
    stuck = [b.chunk_id for a, b in zip(chunks, chunks[1:])
             if a.doc_id == b.doc_id and a.heading == b.heading
             and b.spans[-1][1] <= a.spans[-1][1]]
    assert not stuck


def test_a_unit_larger_than_the_window_still_makes_one_chunk():
    words = " ".join(f"w{i}" for i in range(50))
    doc = Document("big.md", "Big", f"# Big\n\n```\n{words}\n```\n\nShort tail sentence.\n")
    chunks = MarkdownChunker(max_words=10, overlap_words=0).chunk([doc])
    assert [c.text.count("w49") for c in chunks] == [1, 0]
    assert chunks[1].text.endswith("Short tail sentence.")


@pytest.mark.parametrize("kwargs", [{"max_words": 9}, {"max_words": 20, "overlap_words": 20},
                                    {"max_words": 20, "overlap_words": -1}])
def test_invalid_window_settings_raise(kwargs):
    with pytest.raises(ValueError, match="chunking"):
        MarkdownChunker(**kwargs)


def test_whole_document_chunker(manual):
    (c,) = WholeDocumentChunker().chunk([manual])
    assert (c.chunk_id, c.doc_id, c.heading) == ("manual.md", "manual.md", "Manual")
    assert c.text == "Manual\n" + MANUAL
    assert c.spans == ((0, len(MANUAL)),)
    (bare,) = WholeDocumentChunker(include_title=False).chunk([manual])
    assert bare.text == MANUAL
    (untitled,) = WholeDocumentChunker().chunk([Document("x", "", "just text")])
    assert untitled.text == "just text"


# ---------------------------------------------------------------- shipped corpus

@pytest.mark.slow
def test_chunk_ids_and_texts_are_stable_across_runs(chunks):
    code = ("import json; from ragexp.data import shipped; from ragexp.data.golden import load_corpus; "
            "from ragexp.stages.chunking import MarkdownChunker; "
            "cs = MarkdownChunker().chunk(load_corpus(shipped.path('handbook/corpus')).values()); "
            "print(json.dumps([[c.chunk_id, c.text, c.spans] for c in cs]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    other = json.loads(proc.stdout)
    assert [[c.chunk_id, c.text, [list(s) for s in c.spans]] for c in chunks] == other


def _blocks(text: str):
    """(start, end) of every fenced block and every table, found independently of ragexp."""
    lines, pos = [], 0
    for line in text.splitlines(keepends=True):
        lines.append((pos, line.rstrip("\n")))
        pos += len(line)
    out, i = [], 0
    while i < len(lines):
        off, line = lines[i]
        if FENCE.match(line):
            j = i + 1
            while not FENCE.match(lines[j][1]):
                j += 1
            out.append(("fence", off, lines[j][0] + len(lines[j][1])))
            i = j + 1
        elif line.startswith("|"):
            j = i
            while j + 1 < len(lines) and lines[j + 1][1].startswith("|"):
                j += 1
            out.append(("table", off, lines[j][0] + len(lines[j][1])))
            i = j + 1
        else:
            i += 1
    return out


@pytest.mark.parametrize("max_words", [40, 120])
def test_fences_and_tables_are_never_split(docs, max_words):
    chunks = MarkdownChunker(max_words=max_words, overlap_words=20).chunk(docs.values())
    n_blocks = 0
    for doc in docs.values():
        mine = [c for c in chunks if c.doc_id == doc.doc_id]
        for kind, start, end in _blocks(doc.text):
            n_blocks += 1
            raw = doc.text[start:end]
            holders = [c for c in mine if raw in c.text]
            assert holders, f"{doc.doc_id}: {kind} at {start} is in no chunk whole"
            assert any(s <= start and end <= e for c in holders for s, e in c.spans)
        for c in mine:  # no chunk holds half a fence
            assert sum(1 for ln in c.text.splitlines() if FENCE.match(ln)) % 2 == 0, c.chunk_id
    assert n_blocks >= 20


def test_wrapped_paragraphs_are_unwrapped(docs):
    n = 0
    for doc in docs.values():
        for _, units in parse_sections(doc):
            for u in units:
                if FENCE.match(u.text) or u.text.startswith("|"):
                    continue
                n += 1
                assert "\n" not in u.text, (doc.doc_id, u.text)
    assert n > 300
    wrapped = sum(1 for d in docs.values() for _, us in parse_sections(d) for u in us
                  if "\n" in d.text[u.start:u.end] and "\n" not in u.text)
    assert wrapped >= 50


@pytest.mark.parametrize("max_words,overlap_words", SIZES)
def test_chunk_spans_reproduce_chunk_text(docs, max_words, overlap_words):
    for include in (True, False):
        chunker = MarkdownChunker(max_words, overlap_words, include_headings=include)
        for c in chunker.chunk(docs.values()):
            text = docs[c.doc_id].text
            assert all(0 <= s < e <= len(text) for s, e in c.spans)
            assert list(c.spans) == sorted(c.spans)
            raw = " ".join(text[s:e] for s, e in c.spans)
            assert _ws(raw) == _ws(_body(c, include)), c.chunk_id


@pytest.mark.parametrize("overlap_words", [0, 20])
def test_consecutive_windows_share_at_most_overlap_words(docs, overlap_words):
    chunks = MarkdownChunker(max_words=80, overlap_words=overlap_words).chunk(docs.values())
    shared_pairs = 0
    for a, b in zip(chunks, chunks[1:]):
        if a.doc_id != b.doc_id or a.heading != b.heading:
            continue
        shared = [(max(s1, s2), min(e1, e2)) for s1, e1 in a.spans for s2, e2 in b.spans
                  if min(e1, e2) > max(s1, s2)]
        words = sum(len(docs[a.doc_id].text[s:e].split()) for s, e in shared)
        assert words <= overlap_words
        shared_pairs += bool(shared)
    if overlap_words:
        assert shared_pairs >= 10
    else:
        assert shared_pairs == 0


# ---------------------------------------------------------------- relevance rule

def _covered(chunks, span: Span) -> int:
    chars = set()
    for c in chunks:
        if c.doc_id == span.doc_id:
            for s, e in c.spans:
                chars.update(range(max(s, span.start), min(e, span.end)))
    return len(chars)


@pytest.mark.parametrize("max_words,overlap_words", SIZES)
def test_every_answerable_question_has_relevant_chunks_at_any_size(docs, golden, max_words,
                                                                   overlap_words):
    chunks = MarkdownChunker(max_words, overlap_words).chunk(docs.values())
    by_id = {c.chunk_id: c for c in chunks}
    qrels = span_qrels(golden, chunks)
    assert set(qrels) == {q.qid for q in golden if q.answerable}
    for q in golden:
        if not q.answerable:
            continue
        assert qrels[q.qid], f"{q.qid}: no relevant chunk at {max_words}/{overlap_words}"
        relevant = [by_id[c] for c in qrels[q.qid]]
        for span in q.evidence:
            assert _covered(relevant, span) >= 0.5 * len(span), (q.qid, span)


def _chunk(*spans, doc="d"):
    return Chunk("c", doc, "text", spans=tuple(spans))


@pytest.mark.parametrize("spans,evidence,covered,relevant", [
    # |E| = 100, |C| = 250: needs 50 characters of E.
    (((150, 400),), (100, 200), 50, True),
    (((151, 400),), (100, 200), 49, False),
    # Split coverage adds up: 30 + 20 = 50.
    (((100, 130), (180, 400)), (100, 200), 50, True),
    # Long E (1000), small chunk (40): needs 20 characters, i.e. half of the chunk.
    (((980, 1020),), (0, 1000), 20, True),
    (((981, 1021),), (0, 1000), 19, False),
    (((0, 10), (500, 530)), (0, 1000), 40, True),
    # No overlap at all is never relevant, even for an empty chunk.
    (((300, 400),), (100, 200), 0, False),
    ((), (100, 200), 0, False),
])
def test_relevance_at_the_half_boundary(spans, evidence, covered, relevant):
    chunk, span = _chunk(*spans), Span("d", *evidence)
    assert overlap(chunk, span) == covered
    assert is_relevant(chunk, span) is relevant


def test_relevance_needs_the_same_document():
    assert overlap(_chunk((0, 100), doc="other"), Span("d", 0, 100)) == 0
    assert not is_relevant(_chunk((0, 100), doc="other"), Span("d", 0, 100))


def test_span_qrels_ignores_chunk_ids_and_unanswerable_questions():
    q1 = Query("q1", "x", "factual", "a", (Span("d", 0, 100),))
    q2 = Query("q2", "x", "factual", "a", (Span("d", 5000, 5100),))
    q3 = Query("q3", "x", "unanswerable")
    chunks = [Chunk("a", "d", "t", spans=((0, 60),)), Chunk("b", "d", "t", spans=((60, 300),)),
              Chunk("c", "e", "t", spans=((0, 100),))]
    assert span_qrels([q1, q2, q3], chunks) == {"q1": {"a": 1}, "q2": {}}
    renamed = [Chunk(f"zz{i}", c.doc_id, c.text, spans=c.spans) for i, c in enumerate(chunks)]
    assert span_qrels([q1, q2, q3], renamed) == {"q1": {"zz0": 1}, "q2": {}}


def test_heading_keeps_a_trailing_hash_that_is_part_of_the_text():
    doc = Document("x.md", "X", "# X\n\n## Using C#\n\nSome text.\n\n## Closed ##\n\nMore text.\n")
    assert [h for h, _ in parse_sections(doc)] == ["X > Using C#", "X > Closed"]


COLLIDING = ("# Install\n\nIntro.\n\n## Upgrade\n\nrun widget migrate\n\n# Install/Upgrade\n\n"
             "legacy hosts combined paths\n\n# Cold storage\n\ntape one\n\n# Cold-storage\n\n"
             "tape two\n")


def test_distinct_heading_paths_are_distinct_section_units():
    # A top-level "Install/Upgrade" and the nested "Install > Upgrade" were both the unit
    # guide.md#Install/Upgrade (a question labelled with one scored RR 1.0 on the other's chunk),
    # and "Cold storage" / "Cold-storage" were one unit too.
    from ragexp.data.units import unit_of
    from ragexp.stages.parent_child import ParentChildChunker

    doc = Document("guide.md", "Install", COLLIDING)
    chunks = MarkdownChunker().chunk([doc])
    units = unit_of(chunks, "section")
    by_heading = {c.heading: units[c.chunk_id] for c in chunks}
    assert len(set(by_heading.values())) == len(by_heading) == 5
    assert by_heading["Install > Upgrade"] == "guide.md#Install/Upgrade"  # reads as its path
    assert re.fullmatch(r"guide\.md#Install/Upgrade~[0-9a-f]{6}", by_heading["Install/Upgrade"])
    assert by_heading["Cold storage"] == "guide.md#Cold-storage"
    assert re.fullmatch(r"guide\.md#Cold-storage~[0-9a-f]{6}", by_heading["Cold-storage"])
    assert by_heading["Install"] == "guide.md#Install"  # no collision: the id as before
    # parent_child: each section's parent carries the same unit id, one parent per path
    chunker = ParentChildChunker()
    parents = chunker.parents([doc], chunker.chunk([doc]))
    for child, parent in parents.items():
        assert parent.heading == next(c.heading for c in chunker.chunk([doc])
                                      if c.chunk_id == child)
    ids = {p.heading: p.chunk_id for p in parents.values()}
    assert ids == by_heading


def test_a_question_no_chunk_judges_is_refused_saying_where_its_evidence_fell(tmp_path):
    # "the chunker lost source offsets or the evidence spans are outside every chunk", for a
    # quote straddling two chunks (a quote of a heading line is refused as the questions are
    # read: test_golden)
    from conftest import jsonl, write_tree

    from ragexp.data.datasets import MarkdownDataset
    from ragexp.errors import InvalidValue

    words = " ".join(f"w{i}" for i in range(1, 31))
    corpus = write_tree(tmp_path / "docs", {"w.md": f"# T\n\n{words}\n"})
    (tmp_path / "q.jsonl").write_text(jsonl([
        {"id": "x3", "kind": "f", "question": "w10", "answer": "x",
         "evidence": [{"doc": "w.md", "quote": "w10 w11"}]}]))
    ds = MarkdownDataset(str(corpus), str(tmp_path / "q.jsonl"))
    chunks = MarkdownChunker(max_words=10, overlap_words=0).chunk(ds.documents())
    with pytest.raises(InvalidValue) as err:
        ds.qrels(chunks)
    said = str(err.value)
    assert said.startswith("1 answerable question(s) have no relevant chunk under this "
                           "chunking (x3): x3: w.md chars 32-39: ")
    assert "w.md#0 holds 3 of its 7 chars" in said and "w.md#1 holds 3 of its 7 chars" in said
    assert "straddles chunks" in said
