"""BEIR folder readers (beir.py) on files as users and the public datasets write them: what
BEIR's GenericDataLoader / ir_datasets / trec_eval accept is accepted, and what would be read
into a different dataset than meant (duplicate ids, conflicting judgements) is refused, naming
file and every line. Property tests (Hypothesis) over generated folders."""

from __future__ import annotations

import codecs
import json
import logging
import re

import pytest
from conftest import jsonl, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragexp.config.build import Stages
from ragexp.data.beir import BeirFormatError, read_corpus, read_qrels, read_queries
from ragexp.data.datasets import BeirDataset
from ragexp.data.readers import shown
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import WholeDocumentChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever

FAST = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))
# Ids as BEIR datasets have them: no tabs or line breaks (a qrels line could not hold them).
ID = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp", "Zs")), min_size=1,
             max_size=12)
ENDINGS = st.sampled_from(["\n", "\r\n"])


def _write(path, records, ending="\n", bom=False, ascii_only=True, blank=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(r, ensure_ascii=ascii_only) + ending + (ending if blank else "")
                   for r in records)
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + body.encode("utf-8"))
    return path


# ---------------------------------------------------------------- the example of issue #8

DOCS = [{"_id": "d1", "title": "Zebras", "text": "zebra herds migrate across the plains"},
        {"_id": "d2", "title": "Penguins", "text": "emperor penguins huddle for warmth"},
        {"_id": "d1", "title": "Tides", "text": "the moon causes tides"}]
QUERIES = [{"_id": "q1", "text": "where do zebra herds migrate"},
           {"_id": "q2", "text": "how do penguins keep warm"},
           {"_id": "q1", "text": "what causes tides"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n"


def test_duplicate_ids_are_refused_naming_every_line(tmp_path):
    # Loaded silently before: the index held both d1 texts, the ranking kept one score per id
    # (MRR 1.000 -> 0.750) and per_question.csv listed q1 twice.
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(DOCS + [DOCS[1] | {"x": 1}]),
                                          "queries.jsonl": jsonl(QUERIES), "qrels/test.tsv": QRELS})
    with pytest.raises(BeirFormatError) as err:
        BeirDataset(path=str(root))
    assert str(err.value) == (f"{root / 'corpus.jsonl'}: 2 duplicate _id(s): 'd1' at lines 1, 3; "
                              f"'d2' at lines 2, 4: each record needs its own id")
    write_tree(root, {"corpus.jsonl": jsonl(DOCS[:2])})
    with pytest.raises(BeirFormatError) as err:
        BeirDataset(path=str(root))
    assert str(err.value) == (f"{root / 'queries.jsonl'}: 1 duplicate _id(s): 'q1' at lines "
                              f"1, 3: each record needs its own id")


def test_the_same_data_with_distinct_ids_scores_rr_one(tmp_path):
    """The right value of the example: with d3/q3 under their own ids, BM25 puts each query's
    only matching document first (by hand: no other document shares a term), so RR@10 = 1 for each."""
    docs = DOCS[:2] + [DOCS[2] | {"_id": "d3"}]
    queries = QUERIES[:2] + [QUERIES[2] | {"_id": "q3"}]
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(docs),
                                          "queries.jsonl": jsonl(queries),
                                          "qrels/test.tsv": QRELS + "q3\td3\t1\n"})
    ds = BeirDataset(path=str(root))
    result = run_experiment(ds, Stages(WholeDocumentChunker(), HashEmbedder, BM25Retriever,
                                       NoReranker(), LexicalSignal(),
                                       cache=EmbeddingCache(str(tmp_path / "c"))), progress=False)
    assert list(result.per_question["id"]) == ["q1", "q2", "q3"]
    assert result.metrics["rr_at_10"] == 1.0
    assert len(result.chunks) == 3


@FAST
@given(ids=st.lists(ID, min_size=1, max_size=8), data=st.data())
def test_every_duplicate_id_is_named_with_all_its_lines(tmp_path_factory, ids, data):
    extra = data.draw(st.lists(st.sampled_from(ids), max_size=4))
    order = data.draw(st.permutations(ids + extra))
    path = _write(tmp_path_factory.mktemp("c") / "corpus.jsonl",
                  [{"_id": i, "text": f"text {n}"} for n, i in enumerate(order)])
    lines_of: dict[str, list[int]] = {}
    for n, i in enumerate(order, start=1):
        lines_of.setdefault(i, []).append(n)
    dups = {i: nums for i, nums in lines_of.items() if len(nums) > 1}
    if not dups:
        assert [d.doc_id for d in read_corpus(path)] == list(order)
        return
    with pytest.raises(BeirFormatError) as err:
        read_corpus(path)
    message = str(err.value)
    assert f"{len(dups)} duplicate _id(s)" in message
    for i, nums in list(dups.items())[:20]:
        assert f"{shown(i)} at lines {', '.join(map(str, nums))}" in message


# ---------------------------------------------------------------- what is accepted

@FAST
@given(rows=st.lists(st.tuples(ID | st.integers(min_value=0, max_value=10**12),
                               st.none() | st.just("missing") | TEXT, TEXT, st.booleans()),
                     min_size=1, max_size=6, unique_by=lambda r: str(r[0])),
       ending=ENDINGS, bom=st.booleans(), ascii_only=st.booleans(), blank=st.booleans())
def test_corpus_reads_what_beir_writes(tmp_path_factory, rows, ending, bom, ascii_only, blank):
    records = []
    for rid, title, text, extra in rows:
        rec = {"_id": rid, "text": text}
        if title != "missing":
            rec["title"] = title
        if extra:
            rec["metadata"] = {"url": "https://example.org", "year": 2020}
        records.append(rec)
    path = _write(tmp_path_factory.mktemp("c") / "corpus.jsonl", records, ending, bom,
                  ascii_only, blank)
    docs = read_corpus(path)
    assert [(d.doc_id, d.title, d.text) for d in docs] == [
        (str(rid), title if isinstance(title, str) and title != "missing" else "", text)
        for rid, title, text, _ in rows]


def test_json_integer_ids_match_qrels_strings_and_queries_keep_metadata(tmp_path, caplog):
    root = tmp_path / "beir"
    _write(root / "corpus.jsonl", [{"_id": 1, "text": "alpha beta"}, {"_id": "01", "text": "g"}])
    _write(root / "queries.jsonl", [{"_id": 7, "text": "alpha", "metadata": {"kind": "semantic"}},
                                    {"_id": "007", "text": "g", "metadata": "not an object"}])
    write_tree(root, {"qrels/test.tsv": "7\t1\t1\n007\t01\t1\n"})
    ds = BeirDataset(path=str(root))
    assert [(q.qid, q.kind) for q in ds.queries()] == [("7", "semantic"), ("007", "general")]
    assert ds.qrels([]) == {"7": {"1": 1}, "007": {"01": 1}}


@FAST
@given(judged=st.dictionaries(st.tuples(ID, ID), st.integers(-1, 3), min_size=1, max_size=8),
       header=st.booleans(), trec=st.booleans(), ending=ENDINGS, bom=st.booleans(),
       repeat=st.booleans())
def test_qrels_header_optional_beir_or_trec_columns(tmp_path_factory, judged, header, trec,
                                                    ending, bom, repeat):
    items = list(judged.items()) + (list(judged.items())[:1] if repeat else [])
    lines = ["query-id\tcorpus-id\tscore"] if header else []
    lines += [f"{q} Q0 {d} {g}" if trec else f"{q}\t{d}\t{g}" for (q, d), g in items]
    path = tmp_path_factory.mktemp("q") / "test.tsv"
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + ending.join(lines).encode("utf-8"))
    expected: dict[str, dict[str, int]] = {}
    for (q, d), g in judged.items():
        expected.setdefault(q, {})[d] = g
    assert read_qrels(path, {d for _, d in judged}) == expected


def test_qrels_naming_unknown_queries_warns_with_count_and_first_ids(tmp_path, caplog):
    unknown = [f"x{n:02d}" for n in range(7)]
    qrels = QRELS + "".join(f"{q}\td1\t1\n" for q in unknown)
    root = write_tree(tmp_path / "beir", {"corpus.jsonl": jsonl(DOCS[:2]),
                                          "queries.jsonl": jsonl(QUERIES[:2]),
                                          "qrels/test.tsv": qrels})
    with caplog.at_level(logging.WARNING, logger="ragexp.data.beir"):
        ds = BeirDataset(path=str(root))
    assert [q.qid for q in ds.queries()] == ["q1", "q2"]
    (message,) = [r.getMessage() for r in caplog.records if "not in queries.jsonl" in
                  r.getMessage()]
    assert "7 query-id(s)" in message
    assert "'x00', 'x01', 'x02', 'x03', 'x04', ..." in message and "x05" not in message


# ---------------------------------------------------------------- what is refused

@pytest.mark.parametrize("line,fragment", [
    ('{"_id": 1.0, "text": "t"}', "_id must be a non-empty string or an integer, got 1.0"),
    ('{"_id": true, "text": "t"}', "got true"),  # as the JSON says, not Python's True
    ('{"_id": false, "text": "t"}', "got false"),
    ('{"_id": null, "text": "t"}', "got null"),
    ('{"_id": "", "text": "t"}', "got ''"),
    ('{"_id": ["d9"], "text": "t"}', 'got ["d9"]'),
    ('{"_id": "d9", "text": null}', "'text' must be a string, got null"),
    ('{"_id": "d9", "text": 42}', "'text' must be a string, got 42"),
    ('{"_id": "d9", "text": "t", "title": 3}', "'title' must be a string or null, got 3"),
    ('{"_id": "d9"}', "missing field(s) text"),
    ('["d9", "t"]', "expected a JSON object, got list"),
    # a JSON array of the records, on one line or pretty-printed: said to be one, not just
    # "Expecting value" at column 2
    ('[{"_id": "d9", "text": "t"}]', "got list; a JSON Lines file holds one whole JSON object "
                                     "per line, not a JSON array"),
    ('[', "invalid JSON at column 2: Expecting value; a JSON Lines file holds one whole"),
    (' {', "nor an object spread over lines (`jq -c '.[]' FILE`"),
    ('{"_id": "d9", "text": "t"', "invalid JSON at column 26"),
    ('{"_id": "d9", "text": "t}', "invalid JSON at column 23: Unterminated string starting there"),
    ('{"_id": "d9", "text": "bad \\udc80 half"}', "lone UTF-16 surrogate"),
])
def test_corpus_line_refused_with_file_and_line(tmp_path, line, fragment):
    path = tmp_path / "corpus.jsonl"
    path.write_text(jsonl(DOCS[:2]) + "\r\n" + line + "\r\n", encoding="utf-8")
    with pytest.raises(BeirFormatError) as err:
        read_corpus(path)
    assert str(err.value).startswith(f"{path}:4: ")
    assert fragment in str(err.value)


def test_not_utf8_and_empty_files_are_refused(tmp_path):
    path = tmp_path / "queries.jsonl"
    head = jsonl(QUERIES[:1]).encode() + b'{"_id": "q2", "text": "caf'
    path.write_bytes(head + b'\xe9"}\n')
    with pytest.raises(BeirFormatError, match=rf"queries\.jsonl:2: not UTF-8 text: byte 0xe9 at "
                                              rf"byte offset {len(head)} "):
        read_queries(path)
    path.write_text("\n\n")
    with pytest.raises(BeirFormatError, match=r"queries\.jsonl: no records"):
        read_queries(path)


@pytest.mark.parametrize("line,fragment", [
    ("q1\td1", "expected 3 tab-separated columns"),
    ("q1\td1\t1\tx\ty", "got 5"),
    ("q1\td1\t1.0", "score '1.0' is not an integer"),
    ("q1\td1\t1_000", "score '1_000' is not an integer"),
    ("q1\td1\t\u0661", "is not an integer"),  # an Arabic-Indic digit: Python's int() takes it
    ("q1\td1\t", "score '' is not an integer"),
    ("\td1\t1", "empty query-id"),
    ("q1\td1\t0", "('q1', 'd1') judged 0 here and 1 at line 2"),
    ("q1\td9\t1", "corpus-id 'd9' is not in corpus.jsonl"),
])
def test_qrels_line_refused_with_file_and_line(tmp_path, line, fragment):
    path = tmp_path / "test.tsv"
    path.write_text(QRELS + line + "\n", encoding="utf-8")
    with pytest.raises(BeirFormatError) as err:
        read_qrels(path, {"d1", "d2"})
    assert str(err.value).startswith(f"{path}:4: ")
    assert fragment in str(err.value)


def test_a_bad_first_line_is_not_taken_for_a_header(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\thigh\n", encoding="utf-8")
    with pytest.raises(BeirFormatError, match=r"test\.tsv:1: score 'high' is not an integer"):
        read_qrels(path, {"d1"})


def test_echoed_ids_are_capped_and_escaped(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\t" + "\x1b[2J" + "d" * 10_000 + "\t1\n", encoding="utf-8")
    with pytest.raises(BeirFormatError) as err:
        read_qrels(path, {"d1"})
    assert len(str(err.value)) < len(str(path)) + 200
    assert "\x1b" not in str(err.value) and re.search(r"\\x1b\[2Jd+\.\.\.", str(err.value))
