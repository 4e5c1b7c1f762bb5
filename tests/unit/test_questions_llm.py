"""``ragexp questions generate --generator llm`` against the fake OpenAI-compatible server: each
bad reply (not JSON, a missing field, a quote in no document or in a heading, a leaked answer,
a duplicate, a kind not asked for, a near-miss the corpus answers) lands in its drop reason,
timeouts and 429 with Retry-After are retried, token counts match the server's log, each kind
is asked with its own prompt, and the file passes ``golden check``."""

from __future__ import annotations

import json

import bm25s
import numpy as np
import pytest
from fake_llm import KEY, STRAY, TOPICS, GenerationFake

from ragexp.cli.main import main
from ragexp.data import golden, shipped
from ragexp.generate.filters import Filters
from ragexp.generate.llm_questions import (KIND_PROMPTS, LLMGenerator, messages,
                                           parse_reply)
from ragexp.generate.passages import Passage, passages_of
from ragexp.index.bm25 import FLOAT32_TIE
from ragexp.text.analysis import tokenize

@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for doc, topic in TOPICS.items():
        (folder / f"{doc}.md").write_text(
            f"# {doc.title()}\n\nThe {topic} of {doc} follows the rule numbered {len(doc)}0 "
            f"in the {doc} handbook. Operators change it with the {doc}_{len(topic)} key.\n")
    return folder


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY, "sk-test")
    server = GenerationFake(slow_s=1.5).start()
    yield server
    server.stop()


def run(fake, corpus, out, *extra: str) -> int:
    return main(["questions", "generate", "--generator", "llm", "--n", "50", "--out", str(out),
                 "--kinds", "factual", "unanswerable", "dataset=markdown",
                 f"dataset.corpus_dir={corpus}", f"llm.base_url={fake.url}",
                 f"llm.api_key_env={KEY}", "llm.model=fake", "llm.timeout=0.5",
                 "llm.max_retries=2", "llm.concurrency=4", "draws=1", "progress=false", *extra])


def test_each_bad_reply_lands_in_its_drop_reason(fake, corpus, tmp_path, capsys):
    out = tmp_path / "gen.jsonl"
    assert run(fake, corpus, out, "llm.price_in_per_mtok=1", "llm.price_out_per_mtok=2",
               "generator.round_trip=false") == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    head = summary.split(";")[0]
    assert head == ("asked 13, kept 5, dropped 8 (answer_leaked: 1, answered_in_corpus: 1, "
                    "duplicate: 1, kind_not_asked: 1, missing_field: 1, not_json: 1, "
                    "quote_in_heading: 1, quote_not_found: 1)")
    written = [json.loads(line) for line in out.read_text().splitlines()]
    docs = {r["passage"]["doc"].removesuffix(".md") for r in written}
    assert docs - {"ok", "dup"} == {"retry", "slowpoke", "busy", "nearmiss"}
    assert len(docs & {"ok", "dup"}) == 1  # whichever came second is the duplicate
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0
    near = next(r for r in written if r["kind"] == "unanswerable")
    assert near["evidence"] == [] and near["model"] == "fake"
    assert all(len(r["prompt_sha256"]) == 64 and r["source"] == "generated" for r in written)
    # tokens and cost against the server's own log
    served = [e for e in fake.log if e["status"] == 200]
    t_in, t_out = sum(e["tokens_in"] for e in served), sum(e["tokens_out"] for e in served)
    assert f"{len(fake.attempts)} calls, {t_in} tokens in, {t_out} out" in summary
    assert f"${(t_in * 1 + t_out * 2) / 1e6:.4f}" in summary
    # retries: the unusable reply was asked again once with the parse error; the garbled twice
    retried = [e for e in fake.log if e["question"] in ("retry", "garbled")]
    assert len(retried) == 4
    assert sum("could not be used (not_json" in key for _, key in fake.attempts) == 2


def test_timeouts_and_429_are_retried(fake, corpus, tmp_path, capsys):
    assert run(fake, corpus, tmp_path / "gen.jsonl") == 0
    for doc, gap in (("busy", 0.9), ("slowpoke", 0.5)):  # Retry-After: 1; the 0.5 s timeout
        first, second = sorted((e for e in fake.log if e["question"] == doc),
                               key=lambda e: e["t"])
        assert second["status"] == 200 and second["t"] - first["t"] >= gap, doc
    assert "2 retries" in capsys.readouterr().out


def test_a_rerun_continues_without_asking_again(fake, corpus, tmp_path, capsys):
    out = tmp_path / "gen.jsonl"
    assert run(fake, corpus, out, "--n", "2") == 0
    asked = {e["question"] for e in fake.log if e["role"] == "generate"}
    before = out.read_bytes()
    fake.log.clear()
    assert run(fake, corpus, out) == 0
    assert out.read_bytes().startswith(before)
    kept_first = {json.loads(line)["passage"]["doc"].removesuffix(".md")
                  for line in before.decode().splitlines()}
    assert not kept_first & {e["question"] for e in fake.log if e["role"] == "generate"}
    assert kept_first <= asked


def test_an_unreachable_endpoint_is_one_line_and_writes_nothing(corpus, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv(KEY, "sk-test")
    out = tmp_path / "gen.jsonl"
    code = main(["questions", "generate", "--generator", "llm", "--n", "3", "--out", str(out),
                 "dataset=markdown", f"dataset.corpus_dir={corpus}",
                 "llm.base_url=http://127.0.0.1:9/v1", f"llm.api_key_env={KEY}",
                 "llm.max_retries=0", "progress=false"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot reach http://127.0.0.1:9/v1" in err
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("text, why", [
    ('{"question": "q", "answer": "a", "quote": "x", "kind": "factual"}', ""),
    ('```json\n{"question": "q", "answer": "a", "quote": "x", "kind": "f"}\n```', ""),
    ("no json here", "not_json"),
    ('["a list"]', "not_json"),
    ('{"question": "q", "answer": "a", "kind": "factual"}', "missing_field"),
    ('{"question": "q", "answer": 3, "quote": "x", "kind": "factual"}', "missing_field"),
])
def test_parse_reply(text, why):
    value, reason = parse_reply(text)
    assert (value is None) == bool(why) and reason.startswith(why)


HEADING = "How do I rotate TLS certificates without downtime?"  # a heading of the handbook's faq.md


@pytest.fixture
def fake_with(monkeypatch):
    """``fake_with(modes)``: a started ``GenerationFake`` replying by ``modes`` besides
    ``MODES``, stopped after the test."""
    monkeypatch.setenv(KEY, "sk-test")
    started = []

    def start(modes: dict[str, str]) -> GenerationFake:
        started.append(GenerationFake(modes=modes).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def handbook_fake(fake_with):
    """The fake writing from every handbook passage, quoting faq.md's headings."""
    return fake_with({"faq": "heading"})


def run_handbook(fake, out, *extra: str) -> str:
    """Every handbook passage asked once for a factual question; the summary line."""
    code = main(["questions", "generate", "--generator", "llm", "--n", "400", "--out", str(out),
                 "--kinds", "factual", f"llm.base_url={fake.url}", f"llm.api_key_env={KEY}",
                 "llm.model=fake", "llm.concurrency=8", "draws=1", "progress=false", *extra])
    assert code == 0
    return out


def test_a_quote_in_a_heading_is_refused_by_the_check_and_by_the_generator(tmp_path):
    docs = golden.load_corpus(shipped.path("handbook/corpus"))
    found = golden.resolve_quote(docs["faq.md"], HEADING)
    line = docs["faq.md"].text.splitlines().index(f"### {HEADING}") + 1
    assert found.span is None and found.reason == "quote_in_heading"
    assert f"quote lies in the heading at line {line} of faq.md" in found.message
    rec = {"id": "h-1", "kind": "factual", "question": "What is the way to swap the PEM files?",
           "answer": "send SIGHUP", "evidence": [{"doc": "faq.md", "quote": HEADING}]}
    (tmp_path / "q.jsonl").write_text(json.dumps(rec) + "\n")
    _, problems = golden.check_golden(tmp_path / "q.jsonl", docs)
    assert [p.message for p in problems] == [f"h-1: {found.message}"]
    assert Filters(docs, ("factual",)).problem(rec) == "quote_in_heading"


def test_a_file_written_from_heading_quotes_passes_the_check(handbook_fake, tmp_path, capsys):
    out = run_handbook(handbook_fake, tmp_path / "gen.jsonl", "generator.round_trip=false")
    summary = capsys.readouterr().out
    corpus = shipped.path("handbook/corpus")
    docs = golden.load_corpus(corpus)
    faq = docs["faq.md"].text
    # independently: the faq passages whose section's title is written once in faq.md, on a
    # heading line: each reply quoted a heading
    quoted = [json.loads(e["reply"])["quote"] for e in handbook_fake.log
              if e["question"] == "faq" and e["role"] == "generate"]
    in_heading = [q for q in quoted if faq.count(q) == 1 and any(
        ln.lstrip("#").strip() == q and ln.startswith("#") for ln in faq.splitlines())]
    assert HEADING in in_heading
    assert f"quote_in_heading: {len(in_heading)}" in summary
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in written if r["evidence"][0]["quote"] in in_heading]
    assert golden.main(["check", "--corpus", str(corpus), "--golden", str(out)]) == 0


def test_each_kind_is_asked_with_its_own_prompt():
    passage = Passage("a.md", "A > B", 0, 40, "The broker keeps 3 replicas of each ledger.")
    asked = {kind: messages(passage, kind)[1]["content"] for kind in LLMGenerator.kinds}
    assert set(LLMGenerator.kinds) == set(KIND_PROMPTS) == {
        "factual", "procedural", "identifier", "semantic", "unanswerable"}
    for kind, prompt in asked.items():
        assert prompt.endswith(f"Kind asked: {KIND_PROMPTS[kind]}")
        assert not [k for k in KIND_PROMPTS if k != kind and KIND_PROMPTS[k] in prompt]
    assert len(set(KIND_PROMPTS.values())) == len(KIND_PROMPTS)


def test_the_round_trip_keeps_the_question_whose_evidence_bm25_finds(fake_with, tmp_path,
                                                                     capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for doc, topic in (("found", "lease renewal"), ("lost", "segment sealing")):
        (folder / f"{doc}.md").write_text(f"# {doc.title()}\n\nThe {topic} of the broker "
                                          f"follows the rule numbered {len(doc)}0 in the "
                                          f"handbook. Operators change it with a key.\n")
    fake = fake_with({"lost": "stray"})  # found: a question on its passage's words
    kept = {}
    for round_trip in ("true", "false"):
        out = tmp_path / f"{round_trip}.jsonl"
        assert main(["questions", "generate", "--generator", "llm", "--n", "5", "--out",
                     str(out), "--kinds", "factual", "dataset=markdown",
                     f"dataset.corpus_dir={folder}", f"llm.base_url={fake.url}",
                     f"llm.api_key_env={KEY}", "llm.model=fake", "draws=1", "progress=false",
                     f"generator.round_trip={round_trip}"]) == 0
        kept[round_trip] = [json.loads(line) for line in out.read_text().splitlines()]
        head = capsys.readouterr().out.splitlines()[-1].split(";")[0]
        assert head == ("asked 2, kept 1, dropped 1 (round_trip: 1)" if round_trip == "true"
                        else "asked 2, kept 2, dropped 0")
    assert [r["passage"]["doc"] for r in kept["true"]] == ["found.md"]
    assert kept["true"][0]["generator"]["round_trip"] is True
    assert {r["question"] for r in kept["false"]} >= {STRAY}


def reference_found_again(docs: dict, records: list[dict], k: int) -> list[bool | None]:
    """The round trip recomputed with bm25s (lucene, k1 1.5, b 0.75) over the handbook's
    passages, fed ragexp's tokens: per record, whether the passage holding its quote's one
    occurrence scores above 0 and at least the k-th best score; None when the quote is not
    there once, or the two lie within float32 rounding of each other (ragexp stores its
    weights in float32)."""
    passages = passages_of(list(docs.values()))
    ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene", dtype="float64")
    ref.index([tokenize(p.text) for p in passages], show_progress=False)
    out = []
    for rec in records:
        ev = rec["evidence"][0]
        text = docs[ev["doc"]].text
        if text.count(ev["quote"]) != 1:
            out.append(None)
            continue
        start = text.index(ev["quote"])
        end = start + len(ev["quote"])
        known = [t for t in tokenize(rec["question"]) if t in ref.vocab_dict]
        scores = ref.get_scores(known) if known else np.zeros(len(passages))
        held = sorted(scores[scores > 0], reverse=True)
        kth = held[k - 1] if len(held) >= k else 0.0
        mine = [scores[i] for i, p in enumerate(passages) if p.doc_id == ev["doc"]
                and p.start < end and start < p.end]
        near = [s for s in mine if s != kth and abs(s - kth) <= FLOAT32_TIE * kth]
        out.append(None if near else any(s > 0 and s >= kth for s in mine))
    return out


def test_the_round_trip_on_the_handbook_drops_what_bm25s_does_not_find(fake_with, tmp_path,
                                                                       capsys):
    fake = fake_with({})
    out = run_handbook(fake, tmp_path / "gen.jsonl", "generator.round_trip_k=5")
    summary = capsys.readouterr().out
    docs = golden.load_corpus(shipped.path("handbook/corpus"))
    replies = [json.loads(e["reply"]) for e in fake.log if e["role"] == "generate"]
    asked = [{"question": r["question"], "evidence": [
        {"doc": e["question"] + ".md", "quote": r["quote"]}]}
        for r, e in zip(replies, (e for e in fake.log if e["role"] == "generate"))]
    want = reference_found_again(docs, asked, 5)
    once = [w for w, r in zip(want, asked)
            if docs[r["evidence"][0]["doc"]].text.count(r["evidence"][0]["quote"]) == 1]
    assert None not in once and len(once) > 200
    dropped = want.count(False)
    assert 0 < dropped < len(asked)
    assert f"round_trip: {dropped}" in summary
    written = {(r["question"], json.dumps(r["evidence"]))
               for r in map(json.loads, out.read_text().splitlines())}
    assert not written & {(r["question"], json.dumps(r["evidence"]))
                          for r, w in zip(asked, want) if w is False}


@pytest.mark.parametrize("override", ["generator.round_trip_k=0", "generator.round_trip=maybe"])
def test_round_trip_settings_out_of_range_fail_at_composition(override, tmp_path, capsys):
    code = main(["questions", "generate", "--generator", "llm", "--n", "1", "--out",
                 str(tmp_path / "q.jsonl"), override, "progress=false"])
    assert code == 2 and "round_trip" in capsys.readouterr().err
    assert not (tmp_path / "q.jsonl").exists()
