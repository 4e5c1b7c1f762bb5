"""``tools.corpora``: ConditionalQA pages as markdown and its questions as golden quotes (both
upstream layouts, a folder and a bare git directory), Cranfield as a BEIR folder and a markdown
view; every written question file passes ``questions check``."""

from __future__ import annotations

import json
import subprocess

import pytest

from ragexp.data import beir, golden
from tools import corpora

PAGE = ["<h1>Who can apply</h1>", "<p>You can apply if you&#8217;re over 18.</p>",
        "<p>You must live in the UK.</p>", "<li>a passport</li>", "<li>a birth certificate</li>",
        "<h2>Fees</h2>", "<tr><td>Adult</td><td>&#163;80</td></tr>",
        "<tr><td>Child</td><td>&#163;50</td></tr>", "<p>You must live in the UK.</p>"]
QUESTIONS = [
    {"url": "https://www.gov.uk/apply-thing", "scenario": "I am 30.", "question": "Can I apply?",
     "not_answerable": False, "answers": [["yes", []]], "id": "dev-0",
     "evidences": ["<p>You can apply if you&#8217;re over 18.</p>", "<li>a passport</li>",
                   "<p>You must live in the UK.</p>"]},
    {"url": "https://www.gov.uk/apply-thing", "scenario": "My son is 9.",
     "question": "What is the fee?", "not_answerable": False, "answers": [["£50", []]],
     "id": "dev-1", "evidences": ["<h2>Fees</h2>", "<tr><td>Child</td><td>&#163;50</td></tr>"]},
    {"url": "https://www.gov.uk/apply-thing", "scenario": "I live abroad.",
     "question": "Can my dog apply?", "not_answerable": True, "answers": [], "id": "dev-2",
     "evidences": []},
]
MARKDOWN = """# Apply for a thing

## Who can apply

You can apply if you’re over 18.

You must live in the UK.

- a passport
- a birth certificate

### Fees

| Adult | £80 |
|---|---|
| Child | £50 |

You must live in the UK.
"""


def upstream(root):
    (root / "v1_0").mkdir(parents=True)
    (root / "v1_0" / "documents.json").write_text(json.dumps(
        [{"title": "Apply for a thing", "url": QUESTIONS[0]["url"], "contents": PAGE}]))
    (root / "v1_0" / "dev.json").write_text(json.dumps(QUESTIONS))
    return root


def per_page(root):
    folder = root / "HybridContextQA" / "data" / "docs_dev"
    folder.mkdir(parents=True)
    (folder / "Apply for a thing.txt").write_text("\n".join(["Apply for a thing", *PAGE]))
    (folder / "Other page.txt").write_text("Other page\n<p>Nothing here.</p>")
    (root / "HybridContextQA" / "data" / "dev.json").write_text(json.dumps(QUESTIONS))
    return root


def bare(root):
    """The folder committed into a bare git repository (as the search tool's fetch leaves it)."""
    work = root.parent / "work"
    root.rename(work)
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(work), *cmd], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root)], check=True)
    return root


@pytest.mark.parametrize("layout", [upstream, per_page, lambda r: bare(upstream(r))])
def test_conditionalqa_pages_and_questions(tmp_path, layout):
    src = layout(tmp_path / "src")
    counts = corpora.convert_conditionalqa(corpora.Source(src), tmp_path / "out")
    assert (tmp_path / "out" / "corpus" / "apply-thing.md").read_text() == MARKDOWN
    rows = [json.loads(x) for x in (tmp_path / "out" / "questions.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["yes_no", "span", "unanswerable"]
    assert rows[0]["question"] == "I am 30. Can I apply?"
    # the line found twice in the page is left out; the heading becomes a section label
    assert rows[0]["evidence"] == [
        {"doc": "apply-thing.md", "quote": "You can apply if you’re over 18."},
        {"doc": "apply-thing.md", "quote": "a passport"}]
    assert rows[1]["evidence"] == [{"doc": "apply-thing.md", "section": "Fees"},
                                   {"doc": "apply-thing.md", "quote": "Child | £50"}]
    assert "evidence" not in rows[2] and rows[1]["answer"] == "£50"
    assert counts == {"pages": 1, "questions": 3, "evidence_dropped": 1, "questions_dropped": 0}
    assert golden.main(["check", "--corpus", str(tmp_path / "out" / "corpus"), "--golden",
                        str(tmp_path / "out" / "questions.jsonl")]) == 0


SMART_DOCS = """.I 1
.T
flow past a plate .
.A
smith
.B
j. ae. 1958
.W
flow past a plate .
  the boundary layer on a plate
was measured .
.I 2
.T
heat transfer .
.W
heat transfer in hypersonic flow .
"""
SMART_QUERIES = """.I 001
.W
what is the boundary layer
on a plate .
.I 004
.W
how is heat transferred .
"""
QRELS = "1 1 2\n1 2 -1\n2 2 1\n2 1 4\n"


def test_cranfield_as_beir_and_markdown(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "cran.all.1400").write_text(SMART_DOCS)
    (src / "cran.qry").write_text(SMART_QUERIES)
    (src / "cranqrel").write_text(QRELS)
    out = tmp_path / "out"
    assert corpora.convert_cranfield(corpora.Source(src), out) == {
        "documents": 2, "queries": 2, "judged_queries": 2, "judgements": 3}
    docs = beir.read_corpus(out / "beir" / "corpus.jsonl")
    assert [(d.doc_id, d.title) for d in docs] == [("1", "flow past a plate ."),
                                                    ("2", "heat transfer .")]
    assert docs[0].text == "flow past a plate . the boundary layer on a plate was measured ."
    # cranqrel numbers queries by position (1, 2), not by cran.qry's .I (001, 004); gain 5 - g
    assert beir.read_qrels(out / "beir" / "qrels" / "test.tsv", {"1", "2"}) == {
        "1": {"1": 3}, "2": {"2": 4, "1": 1}}
    queries = beir.read_queries(out / "beir" / "queries.jsonl")
    assert [q["_id"] for q in queries] == ["1", "2"]
    rows = [json.loads(x) for x in (out / "questions.jsonl").read_text().splitlines()]
    assert rows[1]["evidence"] == [{"doc": "2.md"}, {"doc": "1.md"}]  # best grade first
    assert (out / "corpus" / "2.md").read_text() == "# heat transfer .\n\nheat transfer in " \
                                                    "hypersonic flow .\n"
    assert golden.main(["check", "--corpus", str(out / "corpus"), "--golden",
                        str(out / "questions.jsonl")]) == 0


def test_a_copy_without_the_files_is_one_line_exit_2(tmp_path, capsys):
    assert corpora.main(["convert", "cranfield", "--from", str(tmp_path), "--out",
                         str(tmp_path / "out")]) == 2
    assert "cran.all.1400" in capsys.readouterr().err
