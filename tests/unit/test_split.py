"""Dev/test split: stratified by source and kind, seeded, the same in every process."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections import Counter

import pytest

from ragexp.data import split
from ragexp.records import Query


def test_split_is_stratified_disjoint_and_covers_every_question(golden):
    side = split.assign(golden, seed=0)
    assert set(side) == {q.qid for q in golden}
    kinds = Counter(q.kind for q in golden)
    test_per_kind = Counter(q.kind for q in golden if side[q.qid] == "test")
    for kind, n in kinds.items():
        assert test_per_kind[kind] == math.floor(0.5 * n + 0.5)
    shares = split.assign(golden, seed=0, test_share=0.25)
    assert sum(v == "test" for v in shares.values()) == sum(
        math.floor(0.25 * n + 0.5) for n in kinds.values())


def test_split_depends_on_the_seed_only(golden):
    a, b = split.assign(golden, seed=0), split.assign(golden, seed=1)
    assert a != b
    assert split.assign(list(reversed(golden)), seed=0) == a  # not on input order


@pytest.mark.slow
def test_split_is_the_same_in_another_process(golden):
    code = ("import json,sys; sys.path.insert(0, 'src'); from ragexp import split; "
            "from ragexp.records import Query; qs=[Query(q, '', k) for q, k in json.load("
            "sys.stdin)]; print(json.dumps(split.assign(qs, 7)))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(
        [[q.qid, q.kind] for q in golden]), capture_output=True, text=True, env=env, check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert json.loads(out.stdout) == split.assign(golden, 7)


def test_adding_a_question_moves_at_most_the_one_at_the_cut():
    qs = [Query(f"q{i}", "", "factual") for i in range(40)]
    before = split.assign(qs, 3)
    after = split.assign([*qs, Query("new", "", "factual")], 3)
    moved = [q for q in before if before[q] != after[q]]
    assert len(moved) <= 1


class Tiny:
    name, unit = "tiny", "chunk"

    def __init__(self):
        self.qs = [Query(f"q{i}", f"text {i}", "a" if i % 2 else "b") for i in range(10)]

    def documents(self):
        return ["doc"]

    def queries(self):
        return self.qs

    def qrels(self, chunks):
        return {q.qid: {"c": 1} for q in self.qs}

    def fingerprint(self):
        return {"corpus_hash": "x"}


def test_split_dataset_filters_questions_and_judgements():
    inner = Tiny()
    dev, test = split.select(inner, "dev", 0), split.select(inner, "test", 0)
    ids_dev, ids_test = {q.qid for q in dev.queries()}, {q.qid for q in test.queries()}
    assert ids_dev.isdisjoint(ids_test) and ids_dev | ids_test == {q.qid for q in inner.qs}
    assert set(dev.qrels([])) == ids_dev and set(test.qrels([])) == ids_test
    assert dev.documents() == ["doc"] and dev.fingerprint() == {"corpus_hash": "x"}
    assert (dev.name, dev.unit) == ("tiny", "chunk")  # delegated
    assert split.select(inner, "all", 0) is inner
    with pytest.raises(ValueError, match="split must be one of dev, test, all, got 'train'"):
        split.select(inner, "train", 0)
    with pytest.raises(split.EmptySplit, match=r"scoring 0 of \d+ questions: split 'test' "
                                              r"\(seed 0, test share 0.0\) holds 0 of"):
        split.select(inner, "test", 0, test_share=0.0)
    with pytest.raises(ValueError, match="split_test_share"):
        split.assign(inner.qs, 0, 1.5)


def test_copies_of_a_question_go_to_one_side_in_any_order():
    # q1 copied as q1b was scored on dev and on test: confirm re-measured what dev chose on
    qs = [Query(f"q{i}", f"question number {i}?", "factual") for i in range(12)]
    plain = split.assign(qs, seed=0)
    copies = [*qs, Query("q1b", "Question  number 1?", "factual"),
              Query("q7b", "question number 7?", "factual"),
              Query("q7c", "question number 7?", "factual")]
    side = split.assign(copies, seed=0)
    assert {k: side[k] for k in plain} == plain  # the copies move no other question
    assert side["q1b"] == side["q1"] and side["q7b"] == side["q7c"] == side["q7"]
    assert split.assign(list(reversed(copies)), seed=0) == side
    other_kind = split.assign([*qs, Query("x", "question number 1?", "procedural")], seed=0)
    assert other_kind["x"] == "test"  # a kind of one question: stratified as before


def _kind_rule(queries, seed, share=0.5):
    """The rule written out here, within one source: per kind, ids ordered by their digest."""
    out = {}
    for kind in {q.kind for q in queries}:
        ids = sorted((q.qid for q in queries if q.kind == kind),
                     key=lambda i: hashlib.sha256(f"{seed}:{kind}:{i}".encode()).hexdigest())
        n_test = math.floor(share * len(ids) + 0.5)
        out.update({i: "test" if r < n_test else "dev" for r, i in enumerate(ids)})
    return out


def test_a_generated_set_of_the_hand_kinds_moves_no_hand_question(golden):
    """Each source is split on its own: a structure-like set asking the hand-written questions'
    kinds leaves every hand-written question where the kind-stratified rule puts it."""
    hand = [q for q in golden if len({x.text for x in golden if x.text == q.text}) == 1]
    assert split.assign(hand, seed=0) == _kind_rule(hand, 0)
    generated = [Query(f"g-{i}", f"what is generated thing {i}?", q.kind, source="generated")
                 for i, q in enumerate(hand * 3)]
    both = split.assign([*hand, *generated], seed=0)
    assert {q.qid: both[q.qid] for q in hand} == _kind_rule(hand, 0)
    assert {q.qid: both[q.qid] for q in generated} == _kind_rule(generated, 0)
