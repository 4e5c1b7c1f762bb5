"""The shipped corpus has the shape the experiment needs (read from the raw files)."""

from __future__ import annotations

import re

FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text: str):
    """(line number, line) of lines outside code fences and tables."""
    in_fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or line.lstrip().startswith("|"):
            continue
        yield n, line


def test_at_least_15_documents(docs):
    assert len(docs) >= 15


def test_at_least_60_chunks_at_default_chunking(chunks):
    assert len(chunks) >= 60
    assert len({c.chunk_id for c in chunks}) == len(chunks)


def test_headings_two_and_three_levels_deep(docs):
    h2 = sum(1 for d in docs.values() for _, ln in _prose_lines(d.text) if ln.startswith("## "))
    h3 = sum(1 for d in docs.values() for _, ln in _prose_lines(d.text) if ln.startswith("### "))
    assert h2 >= 15 and h3 >= 5
    with_h3 = [d for d in docs.values()
               if any(ln.startswith("### ") for _, ln in _prose_lines(d.text))]
    assert len(with_h3) >= 3


def test_every_document_has_a_title(docs):
    for doc_id, doc in docs.items():
        assert doc.text.startswith("# "), doc_id
        assert doc.title and doc.title != doc_id


def test_at_least_20_distinct_identifiers(docs):
    ids = {m for d in docs.values() for m in re.findall(r"\bBD-\d{4}\b", d.text)}
    assert len(ids) >= 20


def test_code_fences_and_tables_present(docs):
    fenced = [d for d in docs.values() if any(FENCE.match(ln) for ln in d.text.splitlines())]
    tables = [d for d in docs.values()
              if re.search(r"^\|.*\|\n\|[-:| ]+\|$", d.text, flags=re.M)]
    assert len(fenced) >= 3
    assert len(tables) >= 3
    for d in fenced:  # every fence is closed
        assert sum(1 for ln in d.text.splitlines() if FENCE.match(ln)) % 2 == 0, d.doc_id


def test_prose_lines_are_hard_wrapped(docs):
    long = [f"{d.doc_id}:{n} ({len(ln)} cols)" for d in docs.values()
            for n, ln in _prose_lines(d.text) if len(ln) > 100]
    assert not long, long
    # ... and wrapped for real: some paragraphs continue on the next line.
    wrapped = sum(1 for d in docs.values() for (n, a), (m, b)
                  in zip(_prose_lines(d.text), list(_prose_lines(d.text))[1:])
                  if m == n + 1 and a.strip() and b.strip() and not b.lstrip().startswith(
                      ("#", "-", "*")) and not re.match(r"\s*\d+[.)]", b))
    assert wrapped >= 20
