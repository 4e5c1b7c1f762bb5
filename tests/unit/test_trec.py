"""TREC run/qrels files: round trip, read by ir_measures (trec_eval) as we meant them, errors."""

from __future__ import annotations

import random

import ir_measures
import pytest
from ir_measures import RR, R, nDCG

from ragexp.data.trec import (
    TrecFormatError,
    format_run,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)


def random_case(seed: int, n_queries: int = 30, n_docs: int = 40):
    rng = random.Random(seed)
    docs = [f"d{i:03d}" if i % 3 else str(i) for i in range(n_docs)]  # "3" and "d003" both ids
    run, qrels = {}, {}
    for q in range(n_queries):
        qid = f"{q:03d}"  # leading zeros must survive
        # coarse scores so ties are common: the tie rule decides the order
        run[qid] = {d: float(rng.randint(0, 5)) for d in rng.sample(docs, rng.randint(1, 30))}
        qrels[qid] = {d: rng.choice([0, 0, 1, 2]) for d in rng.sample(docs, rng.randint(1, 8))}
    return run, qrels


@pytest.mark.parametrize("seed", range(5))
def test_round_trip_keeps_ids_scores_and_ties(tmp_path, seed):
    run, qrels = random_case(seed)
    assert read_run(write_run(run, tmp_path / "run.trec", tag="t")) == run
    assert read_qrels(write_qrels(qrels, tmp_path / "qrels.trec")) == qrels


@pytest.mark.parametrize("seed", range(5))
def test_trec_eval_reads_our_files_as_the_dicts_they_came_from(tmp_path, seed):
    run, qrels = random_case(seed)
    measures = [nDCG @ 10, RR @ 10, R @ 5]
    from_files = ir_measures.calc_aggregate(
        measures, ir_measures.read_trec_qrels(str(write_qrels(qrels, tmp_path / "q.trec"))),
        ir_measures.read_trec_run(str(write_run(run, tmp_path / "r.trec"))))
    from_dicts = ir_measures.calc_aggregate(measures, qrels, run)
    assert from_files == pytest.approx(from_dicts)


def test_ranks_follow_trec_eval_order():
    text = format_run({"q": {"a": 1.0, "b": 1.0, "c": 2.0}})
    assert [ln.split()[2:4] for ln in text.splitlines()] == [["c", "1"], ["b", "2"], ["a", "3"]]


@pytest.mark.parametrize("body, message", [
    ("q Q0 d 1 0.5\n", ":1: expected 6 columns"),
    ("q Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n", ":2: item 'd' listed twice for query 'q' (first at line 1)"),
    # two systems' runs concatenated: the message did not say the second line is another run's
    ("q Q0 d 1 0.5 bm25\nq Q0 e 2 0.4 bm25\nq Q0 d 1 0.9 dense\n",
     ":3: item 'd' listed twice for query 'q' (first at line 1); the file holds two runs, tag "
     "'bm25' from line 1 and 'dense' from line 3: one file per run"),
    ("q Q0 d 1 high t\n", ":1: score 'high' is not a finite number"),
    ("q Q0 d 1 nan t\n", ":1: score 'nan' is not a finite number"),
    ("\n\n", "no run lines"),
])
def test_bad_run_files_name_file_and_line(tmp_path, body, message):
    path = tmp_path / "run.trec"
    path.write_text(body)
    with pytest.raises(TrecFormatError, match=str(path).replace("\\", "\\\\")) as err:
        read_run(path)
    assert message in str(err.value)


def test_a_run_of_two_tags_is_merged_as_trec_eval_merges_it_and_said(tmp_path, caplog):
    # disjoint items: read as one run (trec_eval does too), which was silent
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 a 1 2 bm25\nq1 Q0 b 2 1 bm25\nq1 Q0 c 1 3 dense\nq2 Q0 a 1 1 bm25\n")
    with caplog.at_level("WARNING", logger="ragexp.data.trec"):
        assert read_run(path) == {"q1": {"a": 2.0, "b": 1.0, "c": 3.0}, "q2": {"a": 1.0}}
    assert (f"{path} holds 2 run tags ('bm25' from line 1, 'dense' from line 3): read as one "
            f"run, every line merged") in caplog.text
    caplog.clear()
    path.write_text("q1 Q0 a 1 2 bm25\nq2 Q0 a 1 1 bm25\n")
    with caplog.at_level("WARNING", logger="ragexp.data.trec"):
        read_run(path)
    assert not caplog.records


def test_crlf_bom_and_tabs_are_read(tmp_path):
    path = tmp_path / "run.trec"
    path.write_bytes("\ufeffq1\tQ0\td1\t1\t2.5\tx\r\nq1 Q0 d2 2 1 x\r\n".encode("utf-8"))
    assert read_run(path) == {"q1": {"d1": 2.5, "d2": 1.0}}


def test_non_utf8_names_line_and_offset(tmp_path):
    path = tmp_path / "qrels.trec"
    raw = b"q1 0 d1 1\nq2 0 caf\xe9 1\n"
    path.write_bytes(raw)
    offset = raw.index(b"\xe9")
    with pytest.raises(TrecFormatError,
                       match=rf"qrels.trec:2: not UTF-8 text: byte 0xe9 at byte offset {offset} "):
        read_qrels(path)


def test_bad_qrels(tmp_path):
    path = tmp_path / "qrels.trec"
    path.write_text("q1 0 d1 yes\n")
    with pytest.raises(TrecFormatError, match=":1: grade 'yes' is not an integer"):
        read_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d1 0\n")
    with pytest.raises(TrecFormatError, match=":2: .* judged twice"):
        read_qrels(path)


def test_ids_with_whitespace_cannot_be_written():
    with pytest.raises(ValueError, match="holds whitespace"):
        format_run({"q 1": {"d": 1.0}})
