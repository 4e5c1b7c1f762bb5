"""``data.sizes``: the document counts composition reads before a corpus is loaded. A line count
must never fall below what the BEIR reader reads (composition refuses on it), whatever the line
ends, and must follow the file when it changes."""

from __future__ import annotations

import json

import pytest

from ragexp.data import beir, sizes

RECORDS = [json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) for i in range(7)]
LAYOUTS = {
    "lf": "\n".join(RECORDS) + "\n",
    "no final line end": "\n".join(RECORDS),
    "crlf": "\r\n".join(RECORDS) + "\r\n",
    "old mac cr": "\r".join(RECORDS) + "\r",
    "blank lines": "\n\n".join(RECORDS) + "\n\n",
    "one line": RECORDS[0],
}


@pytest.mark.parametrize("buffer", [sizes.BUFFER, 7])  # 7 bytes: CRLF pairs straddle reads
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_line_count_bounds_what_the_beir_reader_reads(layout, buffer, tmp_path, monkeypatch):
    monkeypatch.setattr(sizes, "BUFFER", buffer)
    path = tmp_path / f"{layout}-{buffer}.jsonl"
    path.write_bytes(LAYOUTS[layout].encode())
    count = sizes.jsonl_lines(path)
    documents = beir.read_corpus(path)
    assert len(documents) == (1 if layout == "one line" else len(RECORDS))
    assert count >= len(documents)
    if layout != "blank lines" and not (layout == "crlf" and buffer == 7):
        # independent reference: Python's universal-newline split of the text
        assert count == len(LAYOUTS[layout].replace("\r\n", "\n").replace("\r", "\n")
                             .splitlines())


def test_an_empty_file_has_no_lines_and_a_changed_file_is_counted_again(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"")
    assert sizes.jsonl_lines(path) == 0
    path.write_text("a\nb\n")
    assert sizes.jsonl_lines(path) == 2
    path.write_text("a\nb\nc\n")  # size and mtime change: not the memo of the 2-line file
    assert sizes.jsonl_lines(path) == 3


def test_markdown_documents_are_the_files_load_corpus_reads(tmp_path):
    from ragexp.data.golden import load_corpus

    for name in ("a.md", "sub/b.md", "sub/deeper/c.md", "notes.txt", "d.markdown", "E.MD",
                 "folder.md/f.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("# T\n\nText.\n")
    assert sizes.markdown_documents(tmp_path) == len(load_corpus(tmp_path)) == 5
    assert sizes.markdown_documents(tmp_path / "nowhere") == 0
