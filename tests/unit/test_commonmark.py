"""Markdown read as CommonMark reads it (#19 kind 3): headings, code, quotes, lists and front
matter on hand-written documents whose right reading is taken from the CommonMark spec
(https://spec.commonmark.org/0.31.2/), with every chunk's source offsets checked."""

from __future__ import annotations

import pytest
from conftest import jsonl, write_tree

from ragexp.data.golden import check_golden, load_corpus
from ragexp.data.readers import InputError
from ragexp.index.bm25 import BM25Index
from ragexp.records import Document
from ragexp.stages.chunking import MarkdownChunker, parse_sections
from ragexp.text.analysis import tokenize
from ragexp.text.markdown import blocks, plain
from ragexp.text.sections import find_section, outline


def _sections(text: str) -> list[tuple[str, list[str]]]:
    return [(h, [u.text for u in units]) for h, units in parse_sections(Document("d.md", "D",
                                                                                 text))]


def _assert_offsets(text: str) -> None:
    """Every unit's text is its source range's text (whitespace runs and, in block quotes,
    the ``>`` markers aside)."""
    for _, units in parse_sections(Document("d.md", "D", text)):
        for u in units:
            source = text[u.start:u.end].replace(">", " ")
            assert " ".join(source.split()) == " ".join(u.text.replace(">", " ").split()), u


SETEXT = "Install\n=======\n\nRun the installer.\n\nDocker\n------\n\nUse the image.\n"


def test_setext_headings_are_headings():
    assert _sections(SETEXT) == [("Install", ["Run the installer."]),
                                 ("Install > Docker", ["Use the image."])]
    chunks = MarkdownChunker(include_headings=False).chunk([Document("d.md", "D", SETEXT)])
    assert not any("===" in c.text or "---" in c.text for c in chunks)
    assert [(s.path, s.line, SETEXT[s.span.start:s.span.end]) for s in outline(
        Document("d.md", "D", SETEXT))] == [
        (("Install",), 1, "\nRun the installer.\n\nDocker\n------\n\nUse the image.\n"),
        (("Install", "Docker"), 6, "\nUse the image.\n")]
    _assert_offsets(SETEXT)


def test_a_setext_section_label_resolves(tmp_path):
    corpus = write_tree(tmp_path / "corpus", {"install.md": SETEXT})
    rec = {"id": "s-1", "kind": "procedural", "question": "How do I run it in a container?",
           "answer": "Use the image.", "evidence": [{"doc": "install.md", "section": "Docker"}]}
    golden = write_tree(tmp_path / "golden", {"g.jsonl": jsonl([rec])})
    docs = load_corpus(corpus)
    (query,), problems = check_golden(golden, docs)
    assert problems == []
    (span,) = query.evidence
    assert docs["install.md"].text[span.start:span.end] == "\nUse the image.\n"
    assert docs["install.md"].title == "Install"


@pytest.mark.parametrize("text, headings", [
    # Closing hashes are not part of the title; a '#' with no space before it is (spec 71-76).
    ("## Closed ##\n\nx y z.\n", ["Closed"]),
    ("## Using C#\n\nx y z.\n", ["Using C#"]),
    ("### foo ### b\n\nx y z.\n", ["foo ### b"]),
    # Up to three spaces of indentation still make a heading; four make indented code.
    ("   # Indented\n\nx y z.\n", ["Indented"]),
    ("    # code, not a heading\n\nx y z.\n", []),
    # No space after the hashes, or seven of them: text.
    ("#5 bolts\n\nx y z.\n", []),
    ("####### seven\n\nx y z.\n", []),
    # '#' lines inside ``` and ~~~ fences are code; a ``` line does not close a ~~~ fence.
    ("```bash\n# install it\n```\n\n# Real\n\nx y z.\n", ["Real"]),
    ("~~~\n# comment\n```\n# still code\n~~~\n\n# Real\n\nx y z.\n", ["Real"]),
    # A '---' line right under a paragraph is a setext level-2 underline.
    ("# T\n\nA title\n---\n\nx y z.\n", ["T", "T > A title"]),
    # A setext heading may span lines; its title is their text.
    ("Two line\nheading\n=======\n\nx y z.\n", ["Two line heading"]),
])
def test_what_is_a_heading(text, headings):
    assert [s.title for s in outline(Document("d.md", "D", text))] == headings
    _assert_offsets(text)


def test_code_quotes_html_and_lists_by_hand():
    text = ("# T\n\n"
            "    indented = code\n\n"
            "~~~toml\n[broker]\n~~~\n\n"
            "<div>\nraw html\n</div>\n\n"
            "> Quoted first line\n> quoted second. Another one.\n\n"
            "- item one\nlazy continuation\n- item two\n  - nested item\n\n"
            "***\n\n"
            "[ref]: http://example.com\n\n"
            "Last paragraph.\n")
    assert _sections(text) == [("T", [
        "    indented = code",
        "~~~toml\n[broker]\n~~~",
        "<div>\nraw html\n</div>",
        "Quoted first line quoted second.", "Another one.",
        "- item one lazy continuation", "- item two", "- nested item",
        "Last paragraph."])]
    kinds = [(u.text[:8], u.kind) for _, us in parse_sections(Document("d", "D", text))
             for u in us]
    assert [k for _, k in kinds] == ["block", "block", "block", "sentence", "sentence", "item",
                                     "item", "item", "sentence"]
    _assert_offsets(text)


def test_code_in_a_block_quote_loses_its_markers_and_keeps_its_offsets():
    text = "# T\n\n> ```\n> # not a heading\n> ```\n"
    ((heading, (unit,)),) = parse_sections(Document("d", "D", text))
    assert (heading, unit.text) == ("T", "```\n# not a heading\n```")
    assert text[unit.start:unit.end] == "> ```\n> # not a heading\n> ```"


def test_paragraph_then_list_without_a_blank_line_is_two_blocks():
    # A bullet list may interrupt a paragraph (spec 5.3); "2." may not, so it stays text.
    assert _sections("Para one.\n- an item\n") == [("D", ["Para one.", "- an item"])]
    assert _sections("Para one\n2. not a list\n") == [("D", ["Para one 2. not a list"])]


def test_front_matter_is_metadata_not_text(tmp_path):
    doc = "---\ntitle: Deploying Brindle\nowner: zebrafinch\ntags: [ops, deploy]\n---\n\n" \
          "Deploy with the package.\n"
    other = "# Other\n\nNothing about the owner here.\n"
    docs = load_corpus(write_tree(tmp_path, {"deploy.md": doc, "other.md": other}))
    d = docs["deploy.md"]
    assert d.meta == {"title": "Deploying Brindle", "owner": "zebrafinch",
                      "tags": ["ops", "deploy"]}
    assert d.title == "Deploying Brindle"
    chunks = MarkdownChunker().chunk(docs.values())
    mine = [c for c in chunks if c.doc_id == "deploy.md"]
    assert [c.text for c in mine] == ["Deploying Brindle\nDeploy with the package."]
    assert all(s >= doc.index("Deploy with") for c in mine for s, _ in c.spans)
    # A search for a front-matter value finds nothing in the document it came from.
    scores = BM25Index().fit([c.text for c in chunks]).score(["zebrafinch owner"])[0]
    assert scores[[c.doc_id for c in chunks].index("deploy.md")] == 0


def test_a_front_matter_title_beats_the_heading_and_a_heading_beats_the_path(tmp_path):
    docs = load_corpus(write_tree(tmp_path, {
        "a.md": "---\ntitle: From front matter\n---\n# From heading\n\nx.\n",
        "b.md": "intro\n\nFrom setext\n===\n\nx.\n",
        "c.md": "```\n# a comment, not a title\n```\n",
        "d.md": "---\n---\nno metadata at all\n"}))
    assert {k: (d.title, d.meta) for k, d in docs.items()} == {
        "a.md": ("From front matter", {"title": "From front matter"}),
        "b.md": ("From setext", {}), "c.md": ("c.md", {}), "d.md": ("d.md", {})}
    assert _sections(docs["d.md"].text) == [("D", ["no metadata at all"])]


@pytest.mark.parametrize("front, line, fragment", [
    ("---\ntitle: [unclosed\n---\n", 2, "front matter is not valid YAML"),
    ("---\nok: 1\nbad: : :\n---\n", 3, "front matter is not valid YAML"),
    ("---\n- a list\n---\n", 1, "front matter must be a YAML mapping"),
    ("---\ntitle: [a, b]\n---\n", 1, "'title' must be a single value"),
])
def test_unreadable_front_matter_names_file_and_line(tmp_path, front, line, fragment):
    write_tree(tmp_path, {"bad.md": front + "Body.\n"})
    with pytest.raises(InputError) as err:
        load_corpus(tmp_path)
    assert err.value.line == line and fragment in err.value.message
    assert str(err.value).startswith(f"{tmp_path / 'bad.md'}:{line}: ")


def test_a_heading_only_document_is_findable_by_its_headings():
    text = "# Release notes\n\n## Version 2.4\n\n## Version 2.5 ##\n"
    doc = Document("notes.md", "Release notes", text)
    assert _sections(text) == [("Release notes", ["Release notes"]),
                               ("Release notes > Version 2.4", ["Version 2.4"]),
                               ("Release notes > Version 2.5", ["Version 2.5"])]
    chunks = MarkdownChunker(include_headings=False).chunk([doc])
    assert [c.text for c in chunks] == ["Release notes", "Version 2.4", "Version 2.5"]
    assert [text[s:e] for c in chunks for s, e in c.spans] == [
        "Release notes", "Version 2.4", "Version 2.5"]
    assert all(tokenize(c.text) for c in chunks)
    # A document with text keeps the old rule: a heading without text makes no section.
    assert [h for h, _ in _sections("# A\n\n## Empty\n\n## Full\n\nText.\n")] == ["A > Full"]


def test_crlf_and_a_byte_order_mark_read_like_lf():
    lf = "Title\n=====\n\n```\n# code\n```\n\nOne sentence. Two\nwrapped.\n"
    for variant, shift in ((lf.replace("\n", "\r\n"), None), ("\ufeff" + lf, 1),
                           (lf.replace("\n", "\r"), 0)):
        got = parse_sections(Document("d", "D", variant))
        assert [(h, [u.text for u in us]) for h, us in got] == _sections(lf)
        for _, units in got:
            for u in units:
                assert " ".join(variant[u.start:u.end].split()) == " ".join(u.text.split())
        if shift is not None:
            assert [u.start for _, us in got for u in us] == [
                u.start + shift for _, us in parse_sections(Document("d", "D", lf)) for u in us]
    assert [s.title for s in outline(Document("d", "D", "\ufeff# Title\r\n\r\nx\r\n"))] == [
        "Title"]
    assert find_section(Document("d", "D", lf.replace("\n", "\r\n")), "title")


@pytest.mark.parametrize("inline, shown", [
    ("Kept for **14 days** and `purged`.", "Kept for 14 days and purged."),
    ("See [the guide](guide.md) and ![a diagram](d.png).", "See the guide and a diagram."),
    ("A *b* _c_ <span>d</span> &amp; \\*e\\*", "A b c d & *e*"),
    ("Set `a  b` then\nwrap", "Set a b then wrap"),
])
def test_plain_renders_inline_markup(inline, shown):
    assert plain(inline) == shown


def test_blocks_give_exact_offsets_and_setext_body():
    text = "Title\n=====\n\nText\n"
    head, para = blocks(text)
    assert (head.kind, head.level, head.title, head.line, text[head.body:]) == (
        "heading", 1, "Title", 1, "\nText\n")
    assert (para.kind, text[para.start:para.end]) == ("paragraph", "Text")
