"""``tools.docstrings``: real paragraphs from Python docstrings as a BEIR folder (split at blank
lines, short and repeated paragraphs left out, unparsable files skipped), with queries that are
windows of their relevant paragraph, readable by the BEIR reader."""

from __future__ import annotations

import json

import pytest

from ragexp.data.datasets import BeirDataset
from tools import docstrings

LONG = "The broker reassigns every partition of a dead consumer within thirty seconds."


@pytest.fixture
def sources(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.py").write_text(
        f'"""{LONG}\n\nToo short to keep.\n\n   Leases    expire after thirty seconds unless '
        f'the holder renews them in time."""\n\n'
        f'def f():\n    """{LONG}"""\n\n'
        'class C:\n    """Each class docstring paragraph counts the same way as a module one."""'
        '\n',
        encoding="utf-8")
    (root / "b.py").write_text("def broken(:\n", encoding="utf-8")
    (root / "c.py").write_bytes(b'"""\xff\xfe not utf-8 at all, so this file is skipped."""\n')
    return sorted(root.glob("*.py"))


def test_paragraphs_split_collapse_drop_short_and_repeats(sources):
    assert docstrings.paragraphs(sources) == [
        LONG,
        "Leases expire after thirty seconds unless the holder renews them in time.",
        "Each class docstring paragraph counts the same way as a module one."]


def test_write_gives_a_beir_folder_with_windows_of_the_relevant_paragraph(sources, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(docstrings, "source_files", lambda: sources)
    root = docstrings.write(tmp_path / "out", queries=3, seed=1, query_words=5)
    ds = BeirDataset(str(root))
    texts = {d.doc_id: d.text for d in ds.documents()}
    assert sorted(texts.values()) == sorted(docstrings.paragraphs(sources))
    assert set(texts) == {"p0", "p1", "p2"}
    qrels = [line.split("\t") for line in
             (root / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    asked = {q.qid: q.text for q in ds.queries()}
    assert len(qrels) == len(asked) == 3 and len({d for _, d, _ in qrels}) == 3
    for qid, did, grade in qrels:
        assert grade == "1" and len(asked[qid].split()) == 5
        assert asked[qid] in texts[did]
    assert json.loads((root / "source.json").read_text())["paragraphs"] == 3
    again = docstrings.write(tmp_path / "again", queries=3, seed=1, query_words=5)
    assert (again / "queries.jsonl").read_bytes() == (root / "queries.jsonl").read_bytes()
    with pytest.raises(ValueError, match="fewer than the 4 queries"):
        docstrings.write(tmp_path / "more", queries=4)
    assert docstrings.main([str(tmp_path / "cli"), "--queries", "9"]) == 2


def test_source_files_are_this_interpreters_python_files():
    files = docstrings.source_files()
    assert files == sorted(files) and all(f.suffix == ".py" for f in files)
    assert any(f.parts[-2:] == ("json", "decoder.py") for f in files)  # the standard library
