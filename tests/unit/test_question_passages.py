"""What every question generator gets from the shared pipeline (``generate.passages``,
``generate.generation``): passages a site repeats on its pages (navigation, footers, boilerplate)
are not sampled, and the summary line says how many."""

from __future__ import annotations

import json

import pytest

from ragexp.cli.main import main
from ragexp.data import golden
from ragexp.errors import MissingInput
from ragexp.generate.generation import Settings, generate
from ragexp.generate.known_item import KnownItemGenerator
from ragexp.generate.passages import passages_of, repeated
from ragexp.records import Document

NAV = ("- [Home](DEPTHindex.md)\n- [Guides](DEPTHguides.md)\n- [API reference](DEPTHapi.md)\n"
       "- [Contact the team](DEPTHcontact.md)\n")
FOOTER = "Copyright YEAR Example Corp. All rights reserved. Follow us on X LinkedIn and Mastodon."
SHARED = ("Support answers within two working days; write to the support desk with the "
          "request id.")
TOPICS = ["The lease renews every thirty seconds while the worker holds the job.",
          "A queue drains when its consumers acknowledge each message they receive.",
          "Snapshots are written to the ledger folder once an hour by default.",
          "The gateway refuses a payload larger than the configured byte limit."]


def site() -> list[Document]:
    """Four pages of a docs site: each a navigation list (its links relative to the page's
    depth), one paragraph of its own, and a footer whose year differs; pages 0 and 1 share a
    whole paragraph (``SHARED``)."""
    docs = []
    for i, topic in enumerate(TOPICS):
        depth = "../" * (i % 2)
        shared = f"\n\n{SHARED}" if i < 2 else ""
        text = (f"{NAV.replace('DEPTH', depth)}\n# Page {i}\n\n{topic} Operators read it on the "
                f"status page of the cluster.{shared}\n\n{FOOTER.replace('YEAR', str(2020 + i))}\n")
        docs.append(Document(f"p{i}.md", f"Page {i}", text))
    return docs


def test_navigation_footers_and_shared_paragraphs_are_not_sampled():
    """The issue's docs site: half of the drawn passages were navigation or footer text
    repeated on every page. Here 4 pages x (navigation, own paragraph, footer) plus a paragraph
    on two pages: 14 passages, of which the 4 navigation lists (same words, other link
    targets), the 4 footers (same words, another year) and the 2 copies of the shared paragraph
    are repeated; the 4 pages' own paragraphs are sampled."""
    docs = site()
    passages = passages_of(docs)
    assert len(passages) == 14
    skipped = repeated(passages, docs)
    kept = [p for p in passages if p.pid not in skipped]
    assert len(skipped) == 10
    assert sorted(p.text.split(" Operators")[0] for p in kept) == sorted(TOPICS)


def test_a_line_on_half_of_the_pages_or_fewer_is_no_boilerplate():
    """A footer on 2 of 4 pages is not on most pages: both copies are still skipped (the same
    text in two documents); a footer line on 2 pages whose year differs is sampled."""
    docs = [Document(d.doc_id, d.title, d.text.replace("Copyright", "Written") if i >= 2
                     else d.text) for i, d in enumerate(site())]
    passages = passages_of(docs)
    footers = {p.pid for p in passages if "Example Corp" in p.text}
    assert len(footers) == 4
    # two copyright lines (2020, 2021) and two "Written" lines (2022, 2023): each form on 2 of
    # 4 pages, no more than half, and no two with the same text
    assert not footers & repeated(passages, docs)


def test_the_summary_line_says_how_many_repeated_passages_were_skipped(tmp_path, capsys):
    corpus = tmp_path / "site"
    corpus.mkdir()
    for doc in site():
        (corpus / doc.doc_id).write_text(doc.text)
    out = tmp_path / "q.jsonl"
    assert main(["questions", "generate", "--n", "4", "--out", str(out), "dataset=markdown",
                 f"dataset.corpus_dir={corpus}", "draws=1", "progress=false"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert "; 10 repeated passages not sampled;" in summary, summary
    records = [json.loads(line) for line in out.read_text().splitlines()]
    passages = passages_of(site())
    own = {(p.doc_id, p.start, p.end) for p in passages if p.pid not in repeated(passages,
                                                                                site())}
    assert len(records) == 4
    assert {(r["passage"]["doc"], r["passage"]["start"], r["passage"]["end"])
            for r in records} == own
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0


def test_a_corpus_of_repeated_passages_only_says_so(tmp_path):
    docs = [Document(f"{n}.md", n, f"# {n}\n\n{SHARED}\n") for n in ("a", "b")]
    with pytest.raises(MissingInput) as caught:
        generate(docs, KnownItemGenerator(), Settings(n=1), tmp_path / "q.jsonl",
                 progress=False)
    assert str(caught.value) == ("the corpus has no passage of 8+ words to write questions "
                                 "from (2 documents, 2 passages, 2 of them repeated across "
                                 "documents)")
    assert not (tmp_path / "q.jsonl").exists()
