"""What every question generator gets from the shared pipeline (``generate.passages``,
``generate.generation``): passages a site repeats on its pages (navigation, footers, boilerplate)
are not sampled, and the summary line says how many; every identical copy of a question's
evidence in other documents is labelled."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragexp.cli.main import main
from ragexp.data import golden
from ragexp.errors import MissingInput
from ragexp.generate.generation import Settings, generate
from ragexp.generate.known_item import KnownItemGenerator
from ragexp.generate.passages import passages_of, repeated
from ragexp.records import Document
from ragexp.text import markdown
from ragexp.text.analysis import split_sentences

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
    assert records and {(r["passage"]["doc"], r["passage"]["start"], r["passage"]["end"])
                        for r in records} <= own
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


class FirstSentence:
    """A generator that quotes its passage's first sentence, for the pipeline's own rules."""

    name, kinds, model, prompt_sha256 = "first_sentence", ("general",), None, None

    def settings(self) -> dict:
        return {"name": self.name}

    def prepare(self, docs, passages) -> None:
        pass

    def write(self, batch, seed: int) -> list[dict | str]:
        return [{"question": f"question {job.index} please", "kind": "general",
                 "answer": split_sentences(job.passage.text)[0],
                 "evidence": [{"doc": job.passage.doc_id,
                               "quote": split_sentences(job.passage.text)[0]}]}
                for job in batch]


def holders(docs: list[Document], quote: str) -> set[str]:
    """The documents whose text, front matter aside, holds ``quote``: ``questions check``'s own
    ``find_quote``, document by document."""
    return {d.doc_id for d in docs
            if any(s.start >= markdown.text_start(d.text) for s in golden.find_quote(d, quote))}


def assert_every_copy_labelled(records: list[dict], docs: list[Document]) -> None:
    assert records
    for rec in records:
        quotes = {ev["quote"] for ev in rec["evidence"]}
        for quote in quotes:
            labelled = [ev["doc"] for ev in rec["evidence"] if ev["quote"] == quote]
            assert len(labelled) == len(set(labelled))
            assert set(labelled) == holders(docs, quote), (rec["id"], quote)


SENTENCES = ["Workers renew their lease every thirty seconds.",
             "The ledger keeps one snapshot an hour.",
             "Operators page the on-call engineer for a stuck queue.",
             "A nack sends the job back to its queue at once.",
             "Gateways refuse payloads above the byte limit."]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.lists(st.integers(0, len(SENTENCES) - 1), min_size=2, max_size=3),
                         min_size=1, max_size=3), min_size=2, max_size=4),
       st.booleans())
def test_no_question_is_labelled_in_one_of_two_documents_holding_its_evidence(layout, front):
    """Documents made of paragraphs drawn from a few sentences (so sentences recur across
    documents, once or twice in one), a paragraph of its own in each, front matter quoting a
    sentence in some: every quote of every question written is labelled in exactly the documents
    whose text holds it, and the file passes ``questions check``."""
    docs = []
    for i, paragraphs in enumerate(layout):
        meta = f"---\nsummary: {SENTENCES[i % len(SENTENCES)]}\n---\n" if front and i % 2 else ""
        body = "\n\n".join(" ".join(SENTENCES[j] for j in para) for para in paragraphs)
        own = ("alpha", "bravo", "charlie", "delta")[i]
        docs.append(Document(f"d{i}.md", f"D{i}", f"{meta}# Doc {i}\n\n{body}\n\nDocument {own} "
                                                   f"keeps a paragraph of its very own here.\n"))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "q.jsonl"
        generate(docs, FirstSentence(), Settings(n=40, draws=1), out, progress=False)
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert_every_copy_labelled(records, docs)
        by_id = {d.doc_id: d for d in docs}
        assert golden.check_golden(out, by_id)[1] == []


def test_known_item_labels_a_shared_sentence_in_every_document(tmp_path):
    """The handbook-like case through the command: a sentence in three documents, inside
    paragraphs that differ; every known-item question quoting it names all three."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shared = "Restart the broker with brindlectl restart after changing the lease timeout."
    for i, topic in enumerate(TOPICS[:3]):
        (corpus / f"t{i}.md").write_text(f"# Topic {i}\n\n{topic} {shared}\n\nThe page numbered "
                                         f"{i} ends with this closing sentence of its own.\n")
    out = tmp_path / "q.jsonl"
    assert main(["questions", "generate", "--n", "12", "--out", str(out), "dataset=markdown",
                 f"dataset.corpus_dir={corpus}", "progress=false"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    docs = list(golden.load_corpus(corpus).values())
    assert_every_copy_labelled(records, docs)
    with_shared = [r for r in records if any(ev["quote"] == shared for ev in r["evidence"])]
    assert with_shared and all(sorted(ev["doc"] for ev in r["evidence"]
                                      if ev["quote"] == shared) == ["t0.md", "t1.md", "t2.md"]
                               for r in with_shared)
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0
