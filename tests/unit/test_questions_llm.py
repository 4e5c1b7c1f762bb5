"""``ragexp questions generate --generator llm`` against the fake OpenAI-compatible server: each
bad reply (not JSON, a missing field, a quote in no document or in a heading, a leaked answer,
a duplicate, a kind not asked for, a near-miss the corpus answers) lands in its drop reason,
timeouts and 429 with Retry-After are retried, token counts match the server's log, each kind
is asked with its own prompt, and the file passes ``golden check``."""

from __future__ import annotations

import json

import pytest
from fake_llm import KEY, TOPICS, GenerationFake

from ragexp.cli.main import main
from ragexp.data import golden, shipped
from ragexp.generate.filters import Filters
from ragexp.generate.llm_questions import (KIND_PROMPTS, LLMGenerator, messages,
                                           parse_reply)
from ragexp.generate.passages import Passage

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
    assert run(fake, corpus, out, "llm.price_in_per_mtok=1", "llm.price_out_per_mtok=2") == 0
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
def handbook_fake(monkeypatch):
    """The fake writing from every handbook passage, quoting faq.md's headings."""
    monkeypatch.setenv(KEY, "sk-test")
    server = GenerationFake(modes={"faq": "heading"}).start()
    yield server
    server.stop()


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
    out = run_handbook(handbook_fake, tmp_path / "gen.jsonl")
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
