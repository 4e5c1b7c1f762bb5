"""The chunking strategies of issue #23 item 3: ``sentences`` (a real sentence splitter),
``semantic`` (Kamradt's percentile boundary) and ``parent_child`` (children retrieved, parents
read and judged). Every chunk keeps exact source offsets, so the span rule still judges them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS, GOLDEN, jsonl, write_tree
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from workspaces import record_run

from ragexp.config import schema, validation
from ragexp.config.build import Stages
from ragexp.data.datasets import BeirDataset, MarkdownDataset
from ragexp.data.relevance import span_qrels
from ragexp.index.cache import EmbeddingCache
from ragexp.index.embedders import HashEmbedder
from ragexp.index.stagestore import StageStore
from ragexp.records import Chunk, Document, Query, Span, ordered
from ragexp.run.app import CONF_DIR
from ragexp.run.pipeline import run_experiment
from ragexp.serving.engine import Engine
from ragexp.stages.abstain import LexicalSignal
from ragexp.stages.chunking import MarkdownChunker, Unit
from ragexp.stages.parent_child import ParentChildChunker, read_through, section_parents
from ragexp.stages.ranking import chunked
from ragexp.stages.rerankers import NoReranker
from ragexp.stages.retrievers import BM25Retriever
from ragexp.stages.semantic_chunking import (
    SemanticChunker,
    boundaries,
    neighbour_distances,
    segment,
)
from ragexp.stages.sentence_chunking import SentenceChunker, sentence_windows
from ragexp.text.analysis import split_sentences
from ragexp.text.sentences import sentence_spans
from ragexp.tracking.store import config_hash

schema.register()
HASH = {"_target_": "ragexp.index.embedders.HashEmbedder", "dim": 512}

# Hand-split: what a reader takes for the sentences of each text.
SPLITS = {
    "Use a tool, e.g. the CLI, first. It works.": ["Use a tool, e.g. the CLI, first.",
                                                   "It works."],
    "Dr. Smith approved it. Then we left.": ["Dr. Smith approved it.", "Then we left."],
    "The U.S. team won. Everyone cheered.": ["The U.S. team won.", "Everyone cheered."],
    "Upgrade to v1.2 before Friday. The old one fails.": ["Upgrade to v1.2 before Friday.",
                                                          "The old one fails."],
    "The timeout is 3.5 s by default. Raise it if needed.": ["The timeout is 3.5 s by default.",
                                                             "Raise it if needed."],
    "Call `a.b()` first. Then call `Client.Run()`.": ["Call `a.b()` first.",
                                                       "Then call `Client.Run()`."],
    "See https://example.com/a.b?x=1.2 for details. It has more.": [
        "See https://example.com/a.b?x=1.2 for details.", "It has more."],
    "Read https://x.org/docs. Then ask.": ["Read https://x.org/docs.", "Then ask."],
    "A hard\nwrapped sentence. Next one!": ["A hard\nwrapped sentence.", "Next one!"],
    "1. Install it. 2. Run it.": ["1. Install it.", "2. Run it."],
    "  Leading space. Is it kept? No.  ": ["Leading space.", "Is it kept?", "No."],
    "See Fig. 3 for details. Then go.": ["See Fig. 3 for details.", "Then go."],
    "Ask J. R. Smith today. He knows.": ["Ask J. R. Smith today.", "He knows."],
    "Mr. Brown left. He was late.": ["Mr. Brown left.", "He was late."],
    "Ver. 2 is out. Get it.": ["Ver. 2 is out.", "Get it."],
    "Set it to e.g. 10 ms. Then restart.": ["Set it to e.g. 10 ms.", "Then restart."],
    "It was 5. Then 6 came.": ["It was 5.", "Then 6 came."],
    "Steps: 1. Open it. 2. Close it.": ["Steps: 1. Open it.", "2. Close it."],
    "Wait 4 ms. Then retry.": ["Wait 4 ms.", "Then retry."],
    "Plan A. Then plan B.": ["Plan A.", "Then plan B."],
    "It holds 3.5 GB per queue. Call it.": ["It holds 3.5 GB per queue.", "Call it."],
    "See section 4.2. It explains.": ["See section 4.2.", "It explains."],
    "Set retries to 3. The default is 5.": ["Set retries to 3.", "The default is 5."],
    "Run it (see the docs). Then stop.": ["Run it (see the docs).", "Then stop."],
    "Use brindle.toml. It is read first.": ["Use brindle.toml.", "It is read first."],
    "Error BD-4007 means skew. Fix the clock.": ["Error BD-4007 means skew.", "Fix the clock."],
    "Vitamin C. Then D.": ["Vitamin C.", "Then D."],
    "Use approx. 5 workers. Fine.": ["Use approx. 5 workers.", "Fine."],
    # Added with #23 (sentencex alone breaks after "Ms." and "approx."; masked since):
    "The safety officer is Ms. Lindqvist. Call her.": ["The safety officer is Ms. Lindqvist.",
                                                       "Call her."],
    "It takes approx. ten minutes. Then stop.": ["It takes approx. ten minutes.", "Then stop."],
    "Ask Ms. Ode or Mrs. Lund. They know.": ["Ask Ms. Ode or Mrs. Lund.", "They know."],
    # The one the splitter gets wrong (a one-letter unit before a full stop):
    "Back off 2 s then 4 s. The quote sits here.": ["Back off 2 s then 4 s.",
                                                    "The quote sits here."],
}
KNOWN_WRONG = {"Back off 2 s then 4 s. The quote sits here."}


@pytest.mark.parametrize("text", sorted(set(SPLITS) - KNOWN_WRONG))
def test_sentence_spans_are_exact_offsets_of_the_hand_split(text):
    assert [text[s:e] for s, e in sentence_spans(text)] == SPLITS[text]


def test_the_splitter_beats_the_analysers_regex_on_the_hard_cases():
    """The measurement behind the choice (docs/config.md): sentencex with code, URLs, list
    numbers, "Ms." and "approx." masked splits 31 of the 32 texts as a reader does; the regex
    the other stages use (a break at ``.!?`` before a capital or a digit) 21: it breaks after
    "Dr.", "Mr.", "Ms.", "Mrs." (before a capital), "Fig.", "Ver.", "approx.", "e.g." before a
    number, an initial and a list number, as read off the pattern ("approx. ten": no break
    before a lower-case word)."""
    flat = lambda parts: [" ".join(p.split()) for p in parts]  # noqa: E731
    ours_wrong = {t for t, want in SPLITS.items()
                  if [t[s:e] for s, e in sentence_spans(t)] != want}
    regex_wrong = {t for t, want in SPLITS.items() if flat(split_sentences(t)) != flat(want)}
    assert ours_wrong == KNOWN_WRONG
    assert regex_wrong == {"Dr. Smith approved it. Then we left.", "1. Install it. 2. Run it.",
                           "See Fig. 3 for details. Then go.", "Ask J. R. Smith today. He knows.",
                           "Mr. Brown left. He was late.", "Ver. 2 is out. Get it.",
                           "Set it to e.g. 10 ms. Then restart.", "Use approx. 5 workers. Fine.",
                           "Steps: 1. Open it. 2. Close it.",
                           "The safety officer is Ms. Lindqvist. Call her.",
                           "Ask Ms. Ode or Mrs. Lund. They know."}
    assert (len(SPLITS) - len(ours_wrong), len(SPLITS) - len(regex_wrong)) == (31, 21)


def test_sentence_windows_by_hand():
    assert sentence_windows(7, 3, 1) == [range(0, 3), range(2, 5), range(4, 7)]
    assert sentence_windows(8, 3, 1) == [range(0, 3), range(2, 5), range(4, 7), range(6, 8)]
    assert sentence_windows(2, 3, 1) == [range(0, 2)]
    assert sentence_windows(4, 2, 0) == [range(0, 2), range(2, 4)]
    assert sentence_windows(0, 3, 1) == []


SEVEN = ["Dr. Lee runs the broker.", "It holds 3.5 GB per queue.", "Call `q.ack()` after work.",
         "Retries back off, e.g. by 2 s each.", "The quote sits here in sentence five.",
         "Version v2.1 fixed it.", "That is all."]


def _doc(body: str, doc_id: str = "guide.md") -> Document:
    return Document(doc_id, "Guide", body)


def test_sentence_chunks_hold_whole_sentences_with_exact_spans():
    text = "# Guide\n\n" + " ".join(SEVEN[:4]) + "\n" + " ".join(SEVEN[4:]) + "\n"
    doc = _doc(text)
    chunks = SentenceChunker(sentences=3, overlap_sentences=1, include_headings=False).chunk([doc])
    want = [SEVEN[0:3], SEVEN[2:5], SEVEN[4:7]]
    assert [c.text.split("\n") for c in chunks] == want
    for c, sentences in zip(chunks, want):
        start = text.index(sentences[0])
        end = text.index(sentences[-1]) + len(sentences[-1])
        assert c.spans == ((start, end),)  # neighbours one space or line break apart merge
        assert c.heading == "Guide"
    # A quote in sentence five is judged relevant in the two windows that hold it.
    quote = text.index(SEVEN[4])
    q = Query("q", "where", evidence=(Span(doc.doc_id, quote, quote + len(SEVEN[4])),))
    assert span_qrels([q], chunks) == {"q": {"guide.md#1": 1, "guide.md#2": 1}}


def test_list_items_split_into_their_sentences_and_a_fence_stays_whole():
    text = ("# Steps\n\n- First item. Still the first.\n- Second item.\n\n"
            "```python\nx = a.b()\n```\n")
    chunks = SentenceChunker(sentences=1, overlap_sentences=0, include_headings=False).chunk(
        [_doc(text)])
    assert [c.text for c in chunks] == ["- First item.", "Still the first.", "- Second item.",
                                        "```python\nx = a.b()\n```"]
    for c in chunks:
        (s, e), = c.spans
        assert text[s:e] == c.text


def test_sentence_chunker_refuses_an_overlap_as_large_as_the_chunk():
    with pytest.raises(ValueError, match="overlap_sentences"):
        SentenceChunker(sentences=3, overlap_sentences=3)


def test_neighbour_distances_and_the_percentile_rule_by_hand():
    v = np.array([[1, 0], [1, 0], [0, 1], [0, 0]], dtype=np.float32)
    assert neighbour_distances(v).tolist() == [0.0, 1.0, 1.0]  # same, orthogonal, zero row
    # Sorted 0.1 0.2 0.3 0.9: P50 = 0.25 (half-way between 0.2 and 0.3) cuts at 0.9 and 0.3;
    # P95 = 0.3 + 0.85 * (0.9 - 0.3) = 0.81 (rank 0.95 * 3 = 2.85) cuts at 0.9 only. Both
    # sections are pooled into one distribution for the document.
    d = [np.array([0.1, 0.9]), np.array([0.2, 0.3])]
    assert [b.tolist() for b in boundaries(d, 50)] == [[False, True], [False, True]]
    assert [b.tolist() for b in boundaries(d, 95)] == [[False, True], [False, False]]
    assert boundaries([np.zeros(0)], 95)[0].tolist() == []


def _units(*words: int) -> list[Unit]:
    return [Unit(f"u{i}", 10 * i, 10 * i + 5, w) for i, w in enumerate(words)]


def test_segment_respects_min_and_max_words_by_hand():
    u = _units(10, 10, 10, 10)
    cut = np.array([False, True, False])  # a boundary between units 1 and 2
    names = lambda groups: [[x.text for x in g] for g in groups]  # noqa: E731
    assert names(segment(u, cut, 15, 100)) == [["u0", "u1"], ["u2", "u3"]]
    assert names(segment(u, cut, 25, 100)) == [["u0", "u1", "u2", "u3"]]  # 20 words < min
    assert names(segment(u, cut, 25, 25)) == [["u0", "u1"], ["u2", "u3"]]  # 30 words > max
    assert names(segment(u, np.zeros(3, bool), 0, 10)) == [["u0"], ["u1"], ["u2"], ["u3"]]


BROKER = ["The broker stores each partition replica on the broker disk.",
          "A partition leader broker copies every replica of the partition.",
          "When a broker fails, a replica of each partition becomes leader.",
          "Each broker reports partition replica lag to the controller broker.",
          "The broker keeps partition replica files in the broker data folder.",
          "A slow broker falls behind and its partition replica is dropped."]
PASTA = ["Boil the pasta and chop the tomato and basil for the sauce.",
         "Fry garlic, add tomato, then basil, and pour it over the pasta.",
         "Fresh basil and ripe tomato make the pasta sauce sweet.",
         "Salt the pasta water before the tomato and basil go in.",
         "Serve the pasta hot with more basil and tomato on top.",
         "Leftover pasta with tomato and basil keeps for two days."]


def _two_topics() -> Document:
    return _doc("# Notes\n\n" + " ".join(BROKER + PASTA) + "\n")


@pytest.mark.parametrize("buffer", [0, 1])
def test_semantic_boundary_falls_at_the_topic_change(buffer, tmp_path):
    chunker = SemanticChunker(HASH, breakpoint_percentile=95, min_words=0, max_words=500,
                              buffer=buffer, include_headings=False, cache_dir=str(tmp_path))
    chunks = chunker.chunk([_two_topics()])
    assert [c.text.split("\n") for c in chunks] == [BROKER, PASTA]


def test_semantic_chunks_keep_within_max_and_above_min_words(tmp_path):
    doc = _two_topics()
    small = SemanticChunker(HASH, breakpoint_percentile=0, min_words=25, max_words=40,
                            include_headings=False, cache_dir=str(tmp_path)).chunk([doc])
    words = [len(c.text.split()) for c in small]
    assert max(words) <= 40
    assert min(words[:-1]) >= 25  # only the section's last chunk may be short
    sentences = [s for c in small for s in c.text.split("\n")]
    assert sentences == BROKER + PASTA  # nothing lost, nothing repeated, in order
    for c in small:
        (s, e), = c.spans
        assert " ".join(doc.text[s:e].split()) == " ".join(c.text.split())


@pytest.mark.slow
@pytest.mark.parametrize("buffer", [0, 1])
def test_semantic_boundary_with_minilm_on_plain_prose(buffer, tmp_path):
    """Natural sentences with few shared words: MiniLM, not word overlap, finds the change.
    Without a buffer the one boundary is at the change; with Kamradt's buffer of one sentence
    either side, the second topic enters the window one sentence early, and the boundary may
    fall there (here it does: 1 - cos of (s3 s4 s5, s4 s5 s6) is the largest distance)."""
    first = ["Our queue service keeps messages until a worker acknowledges them.",
             "If a worker crashes, its unacknowledged messages are delivered again.",
             "Operators watch the queue backlog to decide when to add more workers.",
             "Each queued message carries an id so duplicate deliveries can be detected.",
             "A message that fails five times moves to a dead-letter queue.",
             "Workers pull messages from the queue in batches to save round trips."]
    second = ["The orchard planted forty apple trees along the southern slope.",
              "Bees from a nearby farm pollinate the apple blossoms every spring.",
              "In autumn the pickers fill wooden crates with ripe fruit.",
              "Cider pressed from the fallen apples is sold at the village market.",
              "Old apple trees are pruned in winter so the fruit gets more sun.",
              "The orchard's best apples win prizes at the county fair."]
    embedder = {"_target_": "ragexp.index.embedders.FastEmbedEmbedder", "model": "minilm-int8",
                "cache_dir": str(tmp_path)}
    doc = _doc("# Notes\n\n" + " ".join(first + second) + "\n")
    chunks = SemanticChunker(embedder, breakpoint_percentile=95, min_words=0, max_words=500,
                             buffer=buffer, include_headings=False,
                             cache_dir=str(tmp_path)).chunk([doc])
    cut = len(first) - buffer
    assert [c.text.split("\n") for c in chunks] == [(first + second)[:cut],
                                                    (first + second)[cut:]]


def test_semantic_sentence_vectors_go_through_the_embedding_cache(tmp_path):
    chunker = SemanticChunker(HASH, cache_dir=str(tmp_path))
    first = chunker.chunk([_two_topics()])
    again = SemanticChunker(HASH, min_words=10, cache_dir=str(tmp_path)).chunk([_two_topics()])
    assert first and again
    cache = EmbeddingCache(str(tmp_path / "embeddings"))
    texts = [" ".join((BROKER + PASTA)[max(0, i - 1):i + 2]) for i in range(12)]
    cache.embed(HashEmbedder(), texts, "passage", progress=False)
    assert (cache.hits, cache.misses) == (12, 0)  # every combined sentence was stored


def test_stage_keys_hold_every_setting_of_the_new_chunkers(tmp_path):
    ds = MarkdownDataset(str(CORPUS), str(GOLDEN))
    store = StageStore(root=None)
    key = lambda chunker: chunked(ds, chunker, store, docs=[_two_topics()])[1]  # noqa: E731
    assert key(SentenceChunker(6, 1)) != key(SentenceChunker(5, 1))
    assert key(SentenceChunker(6, 1)) == key(SentenceChunker(6, 1))
    hash256 = {**HASH, "dim": 256}
    semantic = SemanticChunker(HASH, cache_dir=str(tmp_path / "a"))
    assert key(semantic) == key(SemanticChunker(HASH, cache_dir=str(tmp_path / "b")))
    assert key(semantic) != key(SemanticChunker(hash256))
    minilm = {"_target_": "ragexp.index.embedders.FastEmbedEmbedder", "model": "minilm-int8"}
    assert key(SemanticChunker({**minilm, "cache_dir": "/a"})) == key(
        SemanticChunker({**minilm, "cache_dir": "/b"}))
    assert key(semantic) != key(SemanticChunker(HASH, breakpoint_percentile=90))
    assert key(ParentChildChunker(MarkdownChunker(40, 10))) != key(
        ParentChildChunker(MarkdownChunker(30, 10)))


SECTIONS = ("# Guide\n\nIntro words here. More intro.\n\n## Install\n\n"
            + " ".join(f"Install step {i} runs." for i in range(12))
            + "\n\n## Run\n\nRun it. Then stop it.\n\n## Install\n\nAgain install.\n")


def test_parents_are_whole_sections_with_exact_spans():
    doc = _doc(SECTIONS)
    chunker = ParentChildChunker(MarkdownChunker(max_words=10, overlap_words=0))
    children = chunker.chunk([doc])
    parents = chunker.parents([doc], children)
    assert set(parents) == {c.chunk_id for c in children}
    by_id = {p.chunk_id: p for p in parents.values()}
    assert sorted(by_id) == ["guide.md#Guide", "guide.md#Guide/Install",
                             "guide.md#Guide/Install@2", "guide.md#Guide/Run"]
    # The two "Install" sections are two parents (two section units), each its own body: one
    # parent gave a child of the second the first's eleven steps to read
    first = SECTIONS.index("Install step 0")
    last = SECTIONS.index("Install step 11 runs.") + len("Install step 11 runs.")
    again = SECTIONS.index("Again install.")
    install, second = by_id["guide.md#Guide/Install"], by_id["guide.md#Guide/Install@2"]
    assert install.spans == ((first, last),)
    assert install.text == "Guide > Install\n" + SECTIONS[first:last]
    assert (second.spans, second.text) == (((again, again + len("Again install.")),),
                                           "Guide > Install\nAgain install.")
    for child in children:  # every child lies inside its parent's spans
        parent = parents[child.chunk_id]
        assert all(any(ps <= s and e <= pe for ps, pe in parent.spans) for s, e in child.spans)
        assert child.heading == parent.heading


def test_a_passage_without_headings_is_one_parent():
    doc = Document("p1", "Zebras", "Zebras migrate. They cross rivers in herds.")
    (parent,) = section_parents([doc]).values()
    assert (parent.chunk_id, parent.text, parent.spans) == (
        "p1#Zebras", "Zebras\nZebras migrate. They cross rivers in herds.", ((0, 43),))


def test_read_through_gives_each_parent_once_in_best_child_order():
    p1, p2 = Chunk("P1", "d", "one"), Chunk("P2", "d", "two")
    kids = [Chunk(i, "d", i) for i in ("a", "b", "c", "orphan")]
    parent_of = {"a": p1, "b": p2, "c": p1}
    assert [c.chunk_id for c in read_through(kids, parent_of)] == ["P1", "P2", "orphan"]


@pytest.fixture(scope="module")
def parent_run(tmp_path_factory):
    ds = MarkdownDataset(str(CORPUS), str(GOLDEN))
    chunker = ParentChildChunker(MarkdownChunker(max_words=40, overlap_words=10))
    cache = EmbeddingCache(str(tmp_path_factory.mktemp("emb")))
    return ds, run_experiment(ds, Stages(chunker, lambda: HashEmbedder(), BM25Retriever,
                                         NoReranker(), LexicalSignal(), cache=cache),
                              progress=False)


def test_parent_child_is_judged_at_the_parents_by_their_best_child(parent_run, golden):
    """Recomputed independently: BM25 scores every child, each parent takes its best child's
    score, and the span rule judges the parents."""
    ds, run = parent_run
    parent_of = ParentChildChunker().parents(ds.documents(), run.chunks)
    parents = list({p.chunk_id: p for p in parent_of.values()}.values())
    qrels = span_qrels(golden, parents)
    every = BM25Retriever(run.resources).search({q.qid: q.text for q in golden}, len(run.chunks))
    answerable = [q for q in golden if q.answerable]
    hits, recalls = {k: [] for k in (1, 5, 10)}, []
    for q in answerable:
        best: dict[str, tuple[float, str]] = {}  # a parent takes its best child's place:
        for cid, score in every[q.qid].items():  # its score, ties to the higher id (trec_eval's)
            pid = parent_of[cid].chunk_id
            best[pid] = max(best.get(pid, (float("-inf"), "")), (score, cid))
        top = sorted(best, key=best.get, reverse=True)
        assert ordered(run.judged[q.qid])[:10] == top[:10]
        for k in hits:
            hits[k].append(any(p in qrels[q.qid] for p in top[:k]))
        recalls.append(len(set(top[:10]) & set(qrels[q.qid])) / len(qrels[q.qid]))
    for k in hits:
        assert run.metrics[f"success_at_{k}"] == pytest.approx(np.mean(hits[k]))
    assert run.metrics["r_at_10"] == pytest.approx(np.mean(recalls))
    assert run.metrics["index.parents"] == len(parents) < run.metrics["index.chunks"]


def test_parent_child_answers_cite_parents(parent_run):
    ds, run = parent_run
    parent_ids = {p.chunk_id for p in ParentChildChunker().parents(
        ds.documents(), run.chunks).values()}
    cited = [c for line in run.per_question["cited"] for c in str(line).split() if c]
    assert cited and set(cited) <= parent_ids
    assert 0 < run.metrics["answer.citation_precision"] <= 1


@pytest.mark.parametrize("chunker", [SentenceChunker(2, 0), SemanticChunker(HASH),
                                     ParentChildChunker(MarkdownChunker(10, 0))],
                         ids=["sentences", "semantic", "parent_child"])
def test_every_strategy_runs_on_a_beir_folder(chunker, tmp_path):
    corpus = [{"_id": "zebra", "title": "Zebras", "text": "Zebras migrate every year. They "
               "cross the Mara river in herds of thousands. Dr. Lee counted 3.5 thousand."},
              *({"_id": f"f{i}", "title": "", "text": f"Filler {i} about tides. Penguins swim."}
                for i in range(8))]
    root = write_tree(tmp_path / "beir", {
        "corpus.jsonl": jsonl(corpus), "queries.jsonl": jsonl([{"_id": "q", "text": "zebra river"}]),
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq\tzebra\t1\n"})
    chunker = SemanticChunker(HASH, cache_dir=str(tmp_path)) if isinstance(
        chunker, SemanticChunker) else chunker
    run = run_experiment(BeirDataset(path=str(root)), Stages(
        chunker, lambda: HashEmbedder(), BM25Retriever, NoReranker(), LexicalSignal(),
        cache=EmbeddingCache(str(tmp_path / "emb"))), progress=False)
    assert run.metrics["success_at_1"] == 1.0  # the zebra passage ranks first
    assert {c.doc_id for c in run.chunks} == {"zebra", *(f"f{i}" for i in range(8))}


@pytest.mark.parametrize("overrides,message", [
    (["chunking=sentences", "chunking.overlap_sentences=6"],
     "chunking.overlap_sentences=6 is out of range: must be < chunking.sentences (6)"),
    (["chunking=semantic", "chunking.min_words=200"],
     "chunking.min_words=200 is out of range: must be <= chunking.max_words (160)"),
    (["chunking=parent_child", "chunking.children.overlap_words=40"],
     "chunking.children.overlap_words=40 is out of range: must be < chunking.children.max_words"
     " (40)"),
])
def test_sizes_that_contradict_each_other_fail_at_composition(overrides, message):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(cfg)
    assert message in str(info.value)


def test_where_semantic_chunking_keeps_vectors_is_not_part_of_the_config_hash():
    def run_config(cache: str, percentile: float = 95.0) -> dict:
        return {"cache_dir": cache, "k": 100, "chunking": {
            "name": "semantic", "breakpoint_percentile": percentile, "cache_dir": cache,
            "embedder": {"name": "minilm", "model": "minilm-int8", "cache_dir": cache}}}

    data = {"corpus_hash": "c", "golden_hash": "g"}
    same = config_hash(run_config("/a"), data, code="x")
    assert config_hash(run_config("/elsewhere"), data, code="x") == same
    assert config_hash(run_config("/a", 90.0), data, code="x") != same


@pytest.mark.slow
def test_a_served_parent_child_run_answers_from_parents(mlflow_store):
    run_id = record_run("embedder=hash", "retriever=bm25", "reranker=none",
                        "+ablation=chunks_parent_child", "progress=false",
                        f"cache_dir={mlflow_store.folder / 'cache'}")["run_id"]
    engine = Engine.from_run(run_id)
    ans = engine.answer("What does BD-2110 mean?")
    parents = {p.chunk_id: p for p in engine.parents.values()}
    assert not ans.refused and ans.sources
    assert {s.chunk_id for s in ans.sources} <= set(parents)  # sections, not 40-word children
    assert all(not engine.has_chunk(s.chunk_id) for s in ans.sources)
    assert any("BD-2110" in parents[c].text for c in ans.cited_chunks)


def test_parent_child_children_can_size_in_the_embedders_tokens(minilm):
    cfg = {"_target_": "ragexp.stages.parent_child.ParentChildChunker",
           "children": {"_target_": "ragexp.stages.chunking.MarkdownChunker", "max_tokens": 48,
                        "overlap_tokens": 8}}
    chunker = instantiate(cfg)
    assert chunker.needs_tokenizer and not ParentChildChunker().needs_tokenizer
    sized = chunker.with_tokenizer(minilm.tokens())
    doc = _doc(SECTIONS)
    children = sized.chunk([doc])
    assert max(minilm.tokens().lengths([c.text for c in children])) <= 48
    assert len(children) > len(ParentChildChunker(MarkdownChunker(120, 0)).chunk([doc]))
    with pytest.raises(ValueError, match="max_tokens"):
        chunker.with_tokenizer(None)
