"""Text readers (readers.py), the markdown corpus and the golden set on files as users write them:
byte-order marks, CRLF, Latin-1, binary files, unusual but valid JSON; property tests over
generated files (Hypothesis) plus the examples of issue #8."""

from __future__ import annotations

import codecs
import json
import os

import pytest
from cli_runs import run_here
from conftest import jsonl, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragexp.data.golden import GoldenError, check_golden, load_corpus, load_golden, main
from ragexp.data.readers import InputError, decode, parse_json, read_text, shown

FAST = settings(max_examples=40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
# Text without NUL and without lone surrogates (which no UTF-8 file can hold).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))
ENDINGS = st.sampled_from(["\n", "\r\n", "\r"])


def _no_raw_bytes(message: str) -> None:
    """An error message that pastes no file content: printable, short, no escaped byte runs."""
    assert message.isprintable() and len(message) < 400, message
    assert "\\x" not in message


# ---------------------------------------------------------------- decode

@FAST
@given(text=TEXT, ending=ENDINGS, bom=st.booleans())
def test_decode_accepts_utf8_any_line_ending_and_a_bom(text, ending, bom):
    lines = text.replace("\r", "").split("\n")
    data = (codecs.BOM_UTF8 if bom else b"") + ending.join(lines).encode("utf-8")
    assert decode(data, "f.txt") == "\n".join(lines)


@FAST
@given(prefix=TEXT, junk=st.binary(min_size=1, max_size=8), suffix=TEXT)
def test_decode_names_line_and_byte_offset_of_the_first_bad_byte(prefix, junk, suffix):
    data = prefix.encode("utf-8") + junk + suffix.encode("utf-8")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return  # the junk happened to be UTF-8
    # Independent: the longest prefix that decodes ends at the first bad byte.
    offset = max(n for n in range(len(data) + 1) if _decodes_as_prefix(data[:n]))
    with pytest.raises(InputError) as err:
        decode(data, "doc.md")
    assert err.value.line == data[:offset].count(b"\n") + 1
    assert f"byte offset {offset} " in err.value.message
    _no_raw_bytes(str(err.value))


def _decodes_as_prefix(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_latin1_file_names_file_line_and_offset(tmp_path):
    path = tmp_path / "café.md"
    path.write_bytes("# Title\n\nLe café est prêt.\n".encode("latin-1"))
    with pytest.raises(InputError) as err:
        read_text(path)
    offset = len(b"# Title\n\nLe caf")  # the first 'é'
    assert str(err.value).startswith(f"{path}:3: not UTF-8 text: byte 0xe9 at byte offset "
                                     f"{offset} ")


def test_binary_file_is_refused_without_pasting_it(tmp_path):
    path = tmp_path / "logo.md"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    with pytest.raises(InputError) as err:
        read_text(path)
    assert "byte offset 0 " in str(err.value)
    _no_raw_bytes(str(err.value))
    # Valid UTF-8 holding a NUL byte is binary too.
    path.write_bytes(b"abc\ndef\x00ghi")
    with pytest.raises(InputError, match=r"logo\.md:2: NUL byte at byte offset 7"):
        read_text(path)


@pytest.mark.parametrize("codec,name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_utf16_and_utf32_files_are_named_as_such(tmp_path, codec, name):
    path = tmp_path / "doc.md"
    path.write_bytes("# Title\n".encode(codec))  # Python writes the byte-order mark
    with pytest.raises(InputError, match=rf"is {name} text .*iconv -f {name} -t UTF-8"):
        read_text(path)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_named_as_such(tmp_path, codec):
    """Not "a binary file": every other byte NUL is ASCII text in UTF-16 without its BOM."""
    path = tmp_path / "corpus.jsonl"
    text = '{"_id": "d1", "text": "Größe of the café, 東京"}\n' * 50
    path.write_bytes(text.encode(codec))
    name = codec.upper().replace("-LE", "LE").replace("-BE", "BE")
    with pytest.raises(InputError, match=rf"looks like {name} text without a byte-order mark"
                       rf".*iconv -f {name} -t UTF-8"):
        read_text(path)
    # UTF-8 with a few NULs is still a binary file, not UTF-16
    path.write_bytes(text.encode() + b"\x00\x00")
    with pytest.raises(InputError, match="NUL byte at byte offset"):
        read_text(path)


def test_shown_escapes_and_caps():
    assert shown("a\x00b\ud800") == repr("a\x00b\ud800")
    assert len(shown("x" * 10_000)) <= 60 and shown("x" * 10_000).endswith("...")
    assert shown(list(range(1000))).endswith("...")


# ---------------------------------------------------------------- JSON lines

@FAST
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10), ascii_only=st.booleans())
def test_parse_json_reads_any_valid_json_value(value, ascii_only):
    # ensure_ascii=True writes astral characters as surrogate-pair escapes: valid, kept.
    line = json.dumps(value, ensure_ascii=ascii_only)
    assert parse_json(line, "f.jsonl", 3) == value


def test_parse_json_refuses_a_lone_surrogate_and_invalid_json():
    assert parse_json('"\\ud83d\\ude00"', "f.jsonl", 1) == "\U0001F600"
    with pytest.raises(InputError, match=r"f\.jsonl:4: a string holds a lone UTF-16 surrogate"):
        parse_json('{"text": "a\\ud800b"}', "f.jsonl", 4)
    with pytest.raises(InputError, match=r"f\.jsonl:2: invalid JSON at column 9"):
        parse_json('{"a": 1,}', "f.jsonl", 2)
    with pytest.raises(InputError, match="nested too deeply"):
        parse_json("[" * 100_000, "f.jsonl", 1)


# ---------------------------------------------------------------- markdown corpus

@FAST
@given(body=TEXT, ending=ENDINGS, bom=st.booleans())
def test_markdown_corpus_reads_any_utf8_file(tmp_path_factory, body, ending, bom):
    root = tmp_path_factory.mktemp("corpus")
    lines = ["# Größte Stadt", "", *body.replace("\r", "").split("\n")]
    (root / "a.md").write_bytes((codecs.BOM_UTF8 if bom else b"")
                                + ending.join(lines).encode("utf-8"))
    doc = load_corpus(root)["a.md"]
    assert doc.text == "\n".join(lines)
    assert doc.title == "Größte Stadt"


def test_golden_check_on_a_latin1_or_binary_file_prints_one_line_no_traceback(tmp_path):
    corpus = write_tree(tmp_path / "corpus", {"good.md": "# Good\n\nText.\n"})
    write_tree(tmp_path / "golden", {"g.jsonl": ""})
    for name, data in (("latin.md", "# Caf\xe9\n".encode("latin-1")),
                       ("image.md", bytes(range(256)) * 8)):
        (corpus / name).write_bytes(data)
        proc = run_here(main, ["check", "--corpus", str(corpus), "--golden",
                               str(tmp_path / "golden")])
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        offset = 5 if name == "latin.md" else 128  # 'é' after "# Caf"; 0x80 in range(256)
        lineno = data[:offset].count(b"\n") + 1
        assert line.startswith(f"error: {corpus / name}:{lineno}: not UTF-8 text: byte "
                               f"0x{data[offset]:02x} at byte offset {offset} ")
        _no_raw_bytes(line)
        (corpus / name).unlink()


# ---------------------------------------------------------------- golden set

GUIDE = "# Guide\n\nA worker holds a lease for thirty seconds.\n"
GOOD = {"id": "t-01", "kind": "factual", "question": "How long is a lease held?",
        "answer": "Thirty seconds.",
        "evidence": [{"doc": "guide.md", "quote": "holds a lease for thirty seconds"}]}


@FAST
@given(qids=st.lists(TEXT.filter(lambda s: s.strip()), min_size=1, max_size=6, unique=True),
       texts=st.lists(TEXT.filter(lambda s: s.strip()), min_size=6, max_size=6),
       ending=ENDINGS, bom=st.booleans(), blank=st.booleans(), ascii_only=st.booleans())
def test_golden_reads_any_valid_file(tmp_path_factory, qids, texts, ending, bom, blank,
                                     ascii_only):
    tmp = tmp_path_factory.mktemp("g")
    corpus = write_tree(tmp / "corpus", {"guide.md": GUIDE})
    records = [GOOD] + [{"id": f"u{q}", "kind": "unanswerable", "question": t, "extra": [1]}
                        for q, t in zip(qids, texts)]
    body = ending.join(json.dumps(r, ensure_ascii=ascii_only) + (ending if blank else "")
                       for r in records)
    (tmp / "g.jsonl").write_bytes((codecs.BOM_UTF8 if bom else b"") + body.encode("utf-8"))
    queries = load_golden(tmp / "g.jsonl", load_corpus(corpus))
    assert [(q.qid, q.text) for q in queries] == [("t-01", GOOD["question"])] + [
        (f"u{q}", t) for q, t in zip(qids, texts)]


def test_golden_line_separators_inside_json_strings_do_not_split_lines(tmp_path):
    # U+2028 and U+0085 are line breaks for str.splitlines() but valid raw inside JSON strings.
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    odd = {"id": "u\u2028x", "kind": "unanswerable", "question": "Why\u0085not\u2028so?"}
    write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD]).replace("\n", "")
                                     + "\n" + json.dumps(odd, ensure_ascii=False) + "\n"})
    (_, q2) = load_golden(tmp_path / "golden", load_corpus(corpus))
    assert (q2.qid, q2.text) == (odd["id"], odd["question"])


@pytest.mark.parametrize("line,fragment", [
    ('{"id": "u1", "kind": "unanswerable", "question": "a\\udc00"}', "lone UTF-16 surrogate"),
    ('{"id": 7.0, "kind": "unanswerable", "question": "q?"}',
     "'id' must be a non-empty string or an integer"),  # 7 is "7", as in every reader
    ('{"id": "  ", "kind": "unanswerable", "question": "q?"}', "'id' must be a non-empty"),
    ('["u1", "unanswerable"]', "expected a JSON object"),
    ('[{"id": "u1", "kind": "unanswerable", "question": "q?"}]',
     "expected a JSON object; a JSON Lines file holds one whole JSON object per line"),
    ('{"id": "u1", "kind": "unanswerable", "question": ""}', "missing or empty 'question'"),
])
def test_golden_refuses_with_file_and_line(tmp_path, capsys, line, fragment):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    write_tree(tmp_path / "golden", {"g.jsonl": jsonl([GOOD]) + "\r\n" + line + "\r\n"})
    _, problems = check_golden(tmp_path / "golden", load_corpus(corpus))
    assert [str(p) for p in problems if fragment in p.message] == [
        p for p in map(str, problems) if p.startswith(f"{tmp_path / 'golden' / 'g.jsonl'}:3:")]
    assert problems
    with pytest.raises(GoldenError):
        load_golden(tmp_path / "golden", load_corpus(corpus))
    assert main(["check", "--corpus", str(corpus), "--golden", str(tmp_path / "golden")]) == 1
    assert "g.jsonl:3:" in capsys.readouterr().err


def test_golden_file_not_utf8_is_a_problem_naming_the_byte_and_the_rest_is_still_read(tmp_path):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    golden = write_tree(tmp_path / "golden", {"a.jsonl": jsonl([GOOD])})
    head = b'{"id": "u1", "kind": "unanswerable", "question": "Caf'
    (golden / "b.jsonl").write_bytes(head + b'\xe9?"}\n')
    queries, problems = check_golden(golden, load_corpus(corpus))
    assert [q.qid for q in queries] == ["t-01"]
    (problem,) = problems
    assert str(problem).startswith(f"{golden / 'b.jsonl'}:1: not UTF-8 text: byte 0xe9 at byte "
                                   f"offset {len(head)} ")


def test_golden_problem_echoes_are_capped_and_escaped(tmp_path):
    corpus = write_tree(tmp_path / "corpus", {"guide.md": GUIDE})
    huge = "\x1b[31m" + "x" * 100_000
    bad = {**GOOD, "evidence": [{"doc": huge, "quote": huge}]}
    write_tree(tmp_path / "golden", {"g.jsonl": jsonl([bad])})
    _, problems = check_golden(tmp_path / "golden", load_corpus(corpus))
    for p in problems:
        assert len(p.message) < 300 and "\x1b" not in p.message


def test_a_file_name_that_is_not_utf8_is_refused_by_name(tmp_path):
    # Linux file names are bytes; a Latin-1 name decodes to lone surrogates, which no CSV,
    # TREC file or MLflow tag could hold later.
    corpus = write_tree(tmp_path / "corpus", {"good.md": "# Good\n"})
    fd = os.open(os.fsencode(corpus) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"# Cafe\n")
    os.close(fd)
    with pytest.raises(InputError) as err:
        load_corpus(corpus)
    assert "caf\\udce9.md" in str(err.value) and "file name is not UTF-8" in str(err.value)
    str(err.value).encode("utf-8")  # the message itself is printable anywhere
