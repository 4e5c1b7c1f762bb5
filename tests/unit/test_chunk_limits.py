"""Every chunk respects max_words, blocks stay whole up to max_block_words, and every chunk's
source spans still map back to its text: the issue's 300,000-word line, hand cases, and
Hypothesis-generated markdown at several sizes; golden labels still resolve when blocks split."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragexp.data.relevance import span_qrels
from ragexp.records import Document
from ragexp.stages.chunking import MarkdownChunker


def _ws(text: str) -> str:
    return " ".join(text.split())


def _check_spans(doc: Document, chunks) -> None:
    for c in chunks:
        assert all(0 <= s < e <= len(doc.text) for s, e in c.spans), c.chunk_id
        assert list(c.spans) == sorted(c.spans)
        assert _ws(" ".join(doc.text[s:e] for s, e in c.spans)) == _ws(c.text), c.chunk_id


def _covered(chunks) -> set[int]:
    return {i for c in chunks for s, e in c.spans for i in range(s, e)}


def test_a_300000_word_line_becomes_windows_of_at_most_max_words():
    line = " ".join(f"w{i}" for i in range(300_000))
    doc = Document("big.md", "Big", f"# Big\n\n{line}\n")
    chunks = MarkdownChunker(max_words=120, overlap_words=20, include_headings=False).chunk([doc])
    assert max(len(c.text.split()) for c in chunks) == 120
    # Word windows of 120, each next one starting 20 words back: every word kept, in order.
    assert len(chunks) == -(-(300_000 - 20) // 100)  # ceil((N - overlap) / (max - overlap))
    for i, c in enumerate(chunks):
        first = 100 * i
        assert c.text.split() == [f"w{j}" for j in range(first, min(first + 120, 300_000))]
    _check_spans(doc, chunks[:50] + chunks[-50:])


def test_a_long_list_item_splits_at_sentences_then_words():
    long_sentence = "Long " + " ".join(f"x{i}" for i in range(25))
    item = f"- First short sentence here. Second one is short too. {long_sentence}."
    doc = Document("l.md", "L", f"# L\n\n{item}\n- Next item.\n")
    chunks = MarkdownChunker(max_words=10, overlap_words=0, include_headings=False).chunk([doc])
    assert [c.text for c in chunks] == [
        "- First short sentence here.\nSecond one is short too.",
        "Long " + " ".join(f"x{i}" for i in range(9)), " ".join(f"x{i}" for i in range(9, 19)),
        "x19 x20 x21 x22 x23 x24.\n- Next item."]
    _check_spans(doc, chunks)


def test_blocks_stay_whole_up_to_the_limit_then_split_at_lines():
    # 8 rows of 6 words each and the delimiter row under the first (1 word): 49 words
    rows = "\n".join(f"| key{i} | value {i} |" + ("\n|---|---|" if i == 0 else "")
                     for i in range(8))
    code = "\n".join(f"    call{i}(arg, other)" for i in range(6))  # 6 lines, 2 words each
    text = f"# T\n\nIntro sentence.\n\n{rows}\n\n```python\n{code}\n```\n"
    doc = Document("t.md", "T", text)
    whole = MarkdownChunker(max_words=12, overlap_words=0, max_block_words=49,
                            include_headings=False).chunk([doc])
    assert rows in [c.text for c in whole]  # 49 words: whole, a chunk of its own
    assert any(c.text.startswith("```python") and c.text.endswith("```") for c in whole)
    split = MarkdownChunker(max_words=12, overlap_words=0, max_block_words=48,
                            include_headings=False).chunk([doc])
    table_chunks = [c for c in split if "| key" in c.text]
    assert [c.text for c in table_chunks[:2]] == [
        "Intro sentence.\n| key0 | value 0 |\n|---|---|",  # 2 + 6 + 1 words; a row more is 15
        "| key1 | value 1 |\n| key2 | value 2 |"]
    fence = f"```python\n{code}\n```"  # 14 words: under 47, still whole
    assert all(len(c.text.split()) <= 12 or c.text == fence for c in split)
    assert fence in [c.text for c in split]
    lines = {text.index(ln) for ln in text.splitlines() if ln.strip()}
    for c in split:  # pieces of blocks start and end at line boundaries
        for s, e in c.spans:
            assert s in lines and (e == len(text) or text[e] == "\n"), (c.text, s, e)
    _check_spans(doc, whole + split)


# ---------------------------------------------------------------- Hypothesis

WORD = st.text("abcdefghijklmnopqrstuvwxyzäöüßжщ0123456789", min_size=1, max_size=8)


# A sentence starts with a letter: a paragraph "0." alone is an empty ordered list item in
# CommonMark, its marker no text.
FIRST_WORD = st.text("abcdefghijklmnopqrstuvwxyzäöüßжщ", min_size=1, max_size=8)


@st.composite
def sentence(draw):
    words = [draw(FIRST_WORD)] + draw(st.lists(WORD, max_size=draw(st.sampled_from([5, 29,
                                                                                     149]))))
    end = draw(st.sampled_from([".", "!", "?", ""]))
    return words[0].capitalize() + (" " + " ".join(words[1:]) if words[1:] else "") + end


def _wrap(text: str, width: int) -> str:
    out, line = [], ""
    for w in text.split(" "):
        if line and len(line) + 1 + len(w) > width:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return "\n".join(out + [line])


@st.composite
def block(draw):
    kind = draw(st.sampled_from(["heading", "para", "list", "fence", "table"]))
    if kind == "heading":
        return kind, "#" * draw(st.integers(1, 3)) + " " + " ".join(draw(
            st.lists(WORD, min_size=1, max_size=3)))
    if kind == "para":
        text = " ".join(draw(st.lists(sentence(), min_size=1, max_size=5)))
        return kind, _wrap(text, draw(st.sampled_from([40, 100, 100_000])))
    if kind == "list":
        return kind, "\n".join("- " + " ".join(draw(st.lists(sentence(), min_size=1,
                                                              max_size=3)))
                               for _ in range(draw(st.integers(1, 4))))
    if kind == "fence":
        lines = draw(st.lists(st.lists(WORD, min_size=0, max_size=12).map(" ".join),
                              min_size=1, max_size=30))
        return kind, "```\n" + "\n".join("  " + ln for ln in lines) + "\n```"
    rows = draw(st.lists(st.lists(WORD, min_size=1, max_size=4), min_size=1, max_size=25))
    delimiter = "|" + "---|" * len(rows[0])  # a GFM table: header row, then this one
    return kind, "\n".join(["| " + " | ".join(r) + " |" for r in rows[:1]] + [delimiter]
                           + ["| " + " | ".join(r) + " |" for r in rows[1:]])


@st.composite
def markdown(draw):
    blocks = draw(st.lists(block(), min_size=1, max_size=12))
    text, headings = "", []
    for kind, body in blocks:
        if kind == "heading":
            headings.append((len(text), len(text) + len(body)))
        text += body + "\n" * draw(st.sampled_from([2, 3]))
    return Document("doc.md", "Doc", text), headings


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown(), st.sampled_from([10, 17, 40, 120]), st.sampled_from([0, 5, 9]),
       st.sampled_from([1, 25, 400]))
def test_generated_markdown_keeps_limits_spans_and_every_word(case, max_words, overlap,
                                                              max_block_words):
    doc, headings = case
    chunker = MarkdownChunker(max_words=max_words, overlap_words=overlap,
                              max_block_words=max_block_words, include_headings=False)
    chunks = chunker.chunk([doc])
    limit = max(max_words, max_block_words)
    for c in chunks:
        n = len(c.text.split())
        single_block = (len(c.spans) == 1 and doc.text[c.spans[0][0]:c.spans[0][1]] == c.text
                        and re.match(r"```|\|", c.text) is not None)
        assert n <= max_words or (single_block and n <= limit), (n, c.text[:80])
    _check_spans(doc, chunks)
    # Nothing is lost: every character that is not whitespace or a heading line is in a span.
    in_heading = {i for s, e in headings for i in range(s, e)}
    missing = [i for i, ch in enumerate(doc.text)
               if not ch.isspace() and i not in in_heading and i not in _covered(chunks)]
    assert not missing, doc.text[missing[0]:missing[0] + 40]


# ---------------------------------------------------------------- golden labels

@pytest.mark.parametrize("max_words,max_block_words", [(40, 1), (120, 30), (60, 400)])
def test_golden_labels_still_resolve_when_blocks_split(docs, golden, max_words,
                                                      max_block_words):
    chunks = MarkdownChunker(max_words=max_words, overlap_words=10,
                             max_block_words=max_block_words).chunk(docs.values())
    limit = max(max_words, max_block_words)
    assert all(len(c.text.split()) - len(c.heading.split()) <= limit for c in chunks)
    assert sum(len(c.text.split()) - len(c.heading.split()) > max_words for c in chunks) == sum(
        1 for c in chunks if c.text.split("\n", 1)[1].startswith(("```", "|"))
        and len(c.text.split()) - len(c.heading.split()) > max_words)  # only whole blocks
    qrels = span_qrels(golden, chunks)
    lost = [q.qid for q in golden if q.answerable and not qrels.get(q.qid)]
    assert not lost
    for c in chunks:
        body = c.text[len(c.heading) + 1:]  # include_headings: the heading path comes first
        assert c.text.startswith(c.heading + "\n")
        assert _ws(" ".join(docs[c.doc_id].text[s:e] for s, e in c.spans)) == _ws(body)


def test_spaceless_scripts_count_characters_so_a_chinese_paragraph_still_splits():
    """A Chinese paragraph has no spaces: counted in whitespace words it is one word, and a
    2,000-character paragraph would be one chunk whatever ``max_words`` says. Each character
    counts as one word, as ``text.word_count`` counts it (independently: one per Han char)."""
    han = "".join(chr(0x4E00 + (i * 37) % 20000) for i in range(2000))  # no sentence breaks
    doc = Document("zh.md", "Zh", f"# Zh\n\n{han}\n")
    chunks = MarkdownChunker(max_words=50, overlap_words=10, include_headings=False).chunk([doc])
    sizes = [sum(1 for ch in c.text if 0x4E00 <= ord(ch) <= 0x9FFF) for c in chunks]
    assert max(sizes) == 50 and all(len(c.text) == n for c, n in zip(chunks, sizes))
    assert len(chunks) == -(-(2000 - 10) // 40)  # windows of 50 restarting 10 back
    assert "".join(c.text[10 if i else 0:] for i, c in enumerate(chunks)) == han
    _check_spans(doc, chunks)


def test_mixed_thai_and_latin_sentences_respect_max_words_in_layout_words():
    from ragexp.text.analysis import layout_word_count

    thai = "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ" * 10
    text = f"# T\n\nThe queue {thai} then restarts. Short tail.\n"
    chunks = MarkdownChunker(max_words=40, overlap_words=0, include_headings=False).chunk(
        [Document("t.md", "T", text)])
    assert max(layout_word_count(c.text) for c in chunks) <= 40
    # Thai letters not counting combining vowel and tone marks (unicodedata, independently)
    letters = sum(1 for ch in thai if not unicodedata.category(ch).startswith("M"))
    assert len(chunks) >= -(-(letters + 6) // 40)
    body = text.split("\n\n", 1)[1]
    assert "".join("".join(c.text.split()) for c in chunks) == "".join(body.split())
