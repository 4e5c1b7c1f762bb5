"""``embedder=precomputed``: every check of the folder fails in one line naming the file and the
row or id; rows not L2-normalised are normalised with a warning saying how many; and a run on
vectors precomputed by the hash embedder scores exactly as the hash embedder's own run."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from ragexp.config import build, schema
from ragexp.data import shipped
from ragexp.errors import InvalidValue
from ragexp.evaluation import measures
from ragexp.index.embedders import HashEmbedder
from ragexp.index.precomputed import PrecomputedEmbedder, PrecomputedError
from ragexp.records import Chunk
from ragexp.run.pipeline import run_experiment

schema.register()
CHUNKS = [Chunk(f"d{i}", f"d{i}", f"text of document {i}") for i in range(4)]
QUESTIONS = {"q1": "what is one", "q2": "what is two"}


def _cfg(*overrides):
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _unit(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _folder(path, passages=None, ids=None, queries=None, qids=None):
    path.mkdir(exist_ok=True)
    np.save(path / "passages.npy", _unit(4, 8) if passages is None else passages)
    (path / "passages.txt").write_text("\n".join(ids or [c.chunk_id for c in CHUNKS]) + "\n")
    if queries is not False:
        np.save(path / "queries.npy", _unit(2, 8, 1) if queries is None else queries)
        (path / "queries.txt").write_text("\n".join(qids or list(QUESTIONS)) + "\n")
    return path


def _error(tmp_path, **files) -> str:
    with pytest.raises(PrecomputedError) as info:
        emb = PrecomputedEmbedder(str(_folder(tmp_path / "v", **files)))
        emb.bind(CHUNKS, QUESTIONS)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_vectors_are_served_by_id_through_the_chunk_text(tmp_path):
    passages, queries = _unit(4, 8), _unit(2, 8, 1)
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v", passages, queries=queries)))
    emb.bind(CHUNKS[::-1], QUESTIONS)  # any chunk order: rows follow ids, not positions
    texts = [CHUNKS[2].text, CHUNKS[0].text]
    assert np.array_equal(emb.embed(texts, "passage"), passages[[2, 0]])
    assert np.array_equal(emb.embed([QUESTIONS["q2"]], "query"), queries[[1]])
    assert emb.identity.backend == "precomputed" and emb.identity.dim == 8
    with pytest.raises(PrecomputedError, match="embedder.queries"):
        emb.embed(["a question nobody precomputed"], "query")


@pytest.mark.parametrize("files,expected", [
    ({"ids": ["d0", "d1", "d2"]}, "has 4 rows but"),
    ({"ids": ["d0", "d1", "d1", "d3"]}, "1 duplicate ids: d1 (lines 2 and 3)"),
    ({"ids": ["d0", "", "d2", "d3"]}, "empty id on line 2"),
    ({"passages": _unit(4, 8).astype(np.float64)}, "holds float64; need float32"),
    ({"passages": _unit(4, 8)[0]}, "has shape (8,)"),
    ({"queries": _unit(2, 6)}, "gives 6-d vectors but passages.npy holds 8-d"),
    ({"queries": False}, "has no queries.npy/queries.txt"),
    ({"ids": ["d0", "d1", "d2", "dX"]}, "1 of the run's 4 passages have no row in"),
    ({"qids": ["q1", "q9"]}, "1 of the run's 2 questions have no row"),
])
def test_a_malformed_folder_fails_in_one_line_naming_it(tmp_path, files, expected):
    assert expected in _error(tmp_path, **files)


@pytest.mark.parametrize("value,what", [(np.nan, "NaN or inf in row 2 (id 'd2')"),
                                        (np.inf, "NaN or inf in row 2 (id 'd2')"),
                                        (0.0, "row 2 (id 'd2') is all zero")])
def test_a_bad_row_is_named(tmp_path, value, what):
    passages = _unit(4, 8)
    passages[2] = 0.0
    passages[2, 3] = value
    assert what in _error(tmp_path, passages=passages)


def test_ids_the_run_does_not_hold_are_named(tmp_path):
    passages = _unit(6, 8)
    ids = [c.chunk_id for c in CHUNKS] + ["ghost1", "ghost2"]
    assert "names 2 ids the run does not hold: 'ghost1', 'ghost2'" in _error(
        tmp_path, passages=passages, ids=ids)


def test_an_unknown_passage_id_in_place_of_a_known_one_names_both(tmp_path):
    message = _error(tmp_path, ids=["d0", "d1", "nope", "d3"])
    assert "1 of the run's 4 passages have no row in" in message and "'d2'" in message
    assert "names 1 ids the run does not hold: 'nope'" in message


def test_ids_alike_on_screen_but_not_in_code_points_are_told_apart(tmp_path):
    """A chunk id written NFC by the corpus and NFD in passages.txt (or a question id in
    queries.txt): both named with their code points, not printed alike."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    chunks = [*CHUNKS[:3], Chunk(nfc, nfc, "coffee")]
    with pytest.raises(PrecomputedError) as info:
        PrecomputedEmbedder(str(_folder(tmp_path / "w", ids=["d0", "d1", "d2", nfd]))).bind(
            chunks, QUESTIONS)
    assert (f"{nfd!r} is not the known {nfc!r}: the same characters in other code points "
            f"(U+0063 U+0061 U+0066 U+0065 U+0301, NFD, against U+0063 U+0061 U+0066 "
            f"U+00E9, NFC: Unicode normalisation)") in str(info.value)
    with pytest.raises(PrecomputedError, match=r"1 of the run's 2 questions have no row .*"
                                               r"is not the known 'qe\u0301'.*, NFC, against "
                                               r"U\+0071 U\+0065 U\+0301, NFD"):
        PrecomputedEmbedder(str(_folder(tmp_path / "x", qids=["q1", "qe\u0301"]))).bind(
            CHUNKS, {"q1": "what is one", "q\u00e9": "what is two"})


def test_question_ids_the_run_does_not_score_are_ignored_with_one_info_line(tmp_path, caplog):
    queries = _unit(3, 8, 1)
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v", queries=queries,
                                          qids=["q1", "q2", "q7"])))
    with caplog.at_level(logging.INFO, logger="ragexp.index.precomputed"):
        emb.bind(CHUNKS, QUESTIONS)
    said = [r.getMessage() for r in caplog.records if "queries.txt" in r.getMessage()]
    assert len(said) == 1 and "1 of its 3 questions are not among the run's 2" in said[0]
    assert np.array_equal(emb.embed([QUESTIONS["q2"]], "query"), queries[[1]])


def test_document_ids_with_chunks_need_chunking_none(tmp_path):
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v")))
    split = [Chunk(f"{c.doc_id}#{n}", c.doc_id, f"{c.text} part {n}") for c in CHUNKS
             for n in range(2)]
    # it said "made 4 chunks of 2 documents" of a corpus whose other documents made no chunk
    with pytest.raises(PrecomputedError, match=r"the chunking names its 8 chunks otherwise "
                                               r"\(e\.g\. '.+#0'\): document ids need "
                                               r"chunking=none"):
        emb.bind(split, QUESTIONS)


def test_rows_not_normalised_are_normalised_with_a_count(tmp_path, caplog):
    passages = _unit(4, 8) * np.array([[1.0], [3.0], [1.0], [0.5]], dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="ragexp.index.precomputed"):
        emb = PrecomputedEmbedder(str(_folder(tmp_path / "v", passages)))
    said = [r.getMessage() for r in caplog.records if "not L2-normalised" in r.getMessage()]
    assert len(said) == 1 and "2 of 4 rows were not L2-normalised" in said[0]  # once, logged
    emb.bind(CHUNKS, QUESTIONS)
    got = emb.embed([c.text for c in CHUNKS], "passage")
    want = passages.astype(np.float64) / np.linalg.norm(passages.astype(np.float64), axis=1,
                                                        keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_rows_whose_float32_square_overflows_or_underflows_are_normalised_not_refused(tmp_path):
    """Values of 1e25 square to inf in float32 and 1e-25 to 0: both rows are finite and
    non-zero, so they are rescaled by their float64 norms (numpy's, as the reference), beside
    a NaN and a zero row that are refused."""
    passages = _unit(4, 8)
    passages[1] *= np.float32(1e25)
    passages[3] *= np.float32(1e-25)
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v", passages)))
    assert emb.files["passage"].normalised == 2
    as64 = passages.astype(np.float64)
    np.testing.assert_allclose(emb.files["passage"].vectors,
                               as64 / np.linalg.norm(as64, axis=1, keepdims=True), atol=1e-6)
    nan = passages.copy()
    nan[3, 0] = np.nan  # NaN in a row that also underflows
    (tmp_path / "nan").mkdir()
    assert "NaN or inf in row 3 (id 'd3')" in _error(tmp_path / "nan", passages=nan)


def test_a_named_query_embedder_must_match_the_dimension(tmp_path):
    folder = _folder(tmp_path / "v", _unit(4, 512), queries=False)
    cfg = _cfg("embedder=precomputed", f"embedder.path={folder}", "embedder.queries=hash",
               f"cache_dir={tmp_path}")
    emb = build.embedder(cfg)
    emb.bind(CHUNKS, QUESTIONS)
    want = HashEmbedder(512).embed(["a brand new question"], "query")
    assert np.array_equal(emb.embed(["a brand new question"], "query"), want)
    cfg.embedder.path = str(_folder(tmp_path / "small", queries=False))
    with pytest.raises(Exception, match="gives 512-d vectors but passages.npy holds 8-d"):
        build.embedder(cfg)
    cfg.embedder.queries = "nonesuch"
    with pytest.raises(InvalidValue, match="embedder.queries=nonesuch: no embedder option"):
        build.embedder(cfg)


@pytest.mark.slow
def test_a_run_on_precomputed_hash_vectors_scores_as_the_hash_run(tmp_path):
    """Differential: the same vectors, once computed and once read from files."""
    base = ["chunking=none", "reranker=none", f"cache_dir={tmp_path / 'cache'}",
            "progress=false", "reuse_stages=false"]
    hashed = _cfg("embedder=hash", *base)
    folder, dataset = _hash_folder(tmp_path / "vectors", hashed)
    scores = {}
    for cfg in (hashed, _cfg("embedder=precomputed", f"embedder.path={folder}", *base)):
        result = run_experiment(dataset, build.build(cfg), k=cfg.k,
                                measures=measures.resolve(cfg.measures, cfg.k), progress=False)
        scores[cfg.embedder.name] = {k: v for k, v in result.metrics.items()
                                     if k.startswith(("ndcg", "rr_", "r_at"))}
    assert scores["hash"] and scores["precomputed"] == scores["hash"]


def test_a_folder_without_passages_fails_at_composition(tmp_path):
    from ragexp.config import validation

    with pytest.raises(validation.ConfigRangeError,
                       match=r"embedder.path=\S+ lacks passages.npy, passages.txt"):
        validation.validate(_cfg("embedder=precomputed", f"embedder.path={tmp_path}"))
    validation.validate(_cfg("embedder=precomputed", f"embedder.path={_folder(tmp_path / 'v')}"))


def test_serving_binds_no_questions_and_names_the_way_to_embed_new_ones(tmp_path):
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v")))
    emb.bind(CHUNKS, {})  # as serving.Engine's Resources bind it
    assert emb.embed([CHUNKS[1].text], "passage").shape == (1, 8)
    with pytest.raises(PrecomputedError, match="needs embedder.queries=NAME"):
        emb.embed(["how do I restart the broker?"], "query")


def test_a_non_npy_file_and_a_file_for_a_folder_are_named_as_such(tmp_path):
    folder = _folder(tmp_path / "v")
    (folder / "passages.npy").write_text("d0,0.1,0.2\n")
    with pytest.raises(PrecomputedError) as info:
        PrecomputedEmbedder(str(folder))
    assert str(info.value) == f"{folder}/passages.npy is not a .npy matrix (write it with np.save)"
    with pytest.raises(PrecomputedError, match="is a file, not a folder"):
        PrecomputedEmbedder(str(folder / "passages.txt"))


def _refusal(*overrides) -> str:
    from ragexp.config import validation

    with pytest.raises(validation.ConfigRangeError) as info:
        validation.validate(_cfg("embedder=precomputed", *overrides))
    lines = str(info.value).splitlines()
    assert len(lines) == 2  # "invalid config:" and one problem
    return lines[1].strip()


def _float64(folder):
    np.save(folder / "passages.npy", _unit(4, 8).astype(np.float64))


def _not_npy(folder):
    (folder / "queries.npy").write_text("q1 0.1 0.2\n")


def _three_ids(folder):
    (folder / "passages.txt").write_text("d0\nd1\nd2\n")


def _duplicate(folder):
    (folder / "queries.txt").write_text("q1\nq1\n")


def _blank(folder):
    (folder / "passages.txt").write_text("d0\n\nd2\nd3\n")


def _wide_queries(folder):
    np.save(folder / "queries.npy", _unit(2, 6))


def _no_queries_txt(folder):
    (folder / "queries.txt").unlink()


def _no_queries(folder):
    (folder / "queries.txt").unlink()
    (folder / "queries.npy").unlink()


# Each case is also a folder the embedder itself refuses (differential: composition refuses
# only what the job would), with the same words.
FOLDERS = [
    (_float64, [], "passages.npy holds float64; need float32"),
    (_not_npy, [], "queries.npy is not a .npy matrix (write it with np.save)"),
    (_three_ids, [], "passages.npy has 4 rows but"),
    (_duplicate, [], "queries.txt: 1 duplicate ids: q1 (lines 1 and 2)"),
    (_blank, [], "passages.txt: empty id on line 2"),
    (_wide_queries, [], "queries.npy gives 6-d vectors but passages.npy holds 8-d ones"),
    (_no_queries_txt, [], "lacks queries.txt"),
    (_no_queries, [], "has no queries.npy/queries.txt: add them, or embed"),
    (None, ["embedder.queries=hash"], "embedder.queries=hash and "),
]


@pytest.mark.parametrize("spoil,more,message", FOLDERS, ids=[m for *_, m in FOLDERS])
def test_composition_refuses_what_the_embedder_would_naming_the_key(tmp_path, spoil, more,
                                                                    message):
    folder = _folder(tmp_path / "v")
    if spoil:
        spoil(folder)
    line = _refusal(f"embedder.path={folder}", *more)
    assert line.startswith(("embedder.path=", "embedder.queries=")) and message in line
    with pytest.raises(Exception) as info:  # Hydra wraps the constructor's PrecomputedError
        build.embedder(_cfg("embedder=precomputed", f"embedder.path={folder}", *more,
                            f"cache_dir={tmp_path}"))
    assert message in str(info.value)


def test_composition_refuses_a_path_that_is_no_folder(tmp_path):
    assert _refusal(f"embedder.path={tmp_path / 'nowhere'}") == \
        f"embedder.path={tmp_path / 'nowhere'}: no such folder"
    (tmp_path / "f.npy").write_text("x")
    assert "is a file, not a folder" in _refusal(f"embedder.path={tmp_path / 'f.npy'}")


@pytest.mark.slow
def test_composition_checks_the_query_embedder_s_option_and_dimension(tmp_path):
    """hash declares ``dim`` 512; an option file under --config-dir (hash16) another; a
    fastembed model its catalogue dimension (bge-small: 384), read without loading it."""
    small = _folder(tmp_path / "small", queries=False)  # 8-d passages
    assert "embedder.queries=hash gives 512-d vectors (its embedder.dim) but" in _refusal(
        f"embedder.path={small}", "embedder.queries=hash")
    assert "embedder.queries=nonesuch: no embedder option" in _refusal(
        f"embedder.path={small}", "embedder.queries=nonesuch")
    assert "embedder.queries=precomputed is itself precomputed" in _refusal(
        f"embedder.path={small}", "embedder.queries=precomputed")
    wide = _folder(tmp_path / "wide", _unit(4, 512), queries=False)
    from ragexp.config import validation

    validation.validate(_cfg("embedder=precomputed", f"embedder.path={wide}",
                             "embedder.queries=hash"))
    with pytest.raises(validation.ConfigRangeError, match="gives 384-d vectors"):
        validation.validate(_cfg("embedder=precomputed", f"embedder.path={wide}",
                                 "embedder.queries=minilm"))


def _hash_folder(folder, cfg, drop=()):
    """Hash vectors of every chunk and every question of ``cfg``'s whole dataset (all splits),
    less the questions ``drop``."""
    dataset = instantiate(cfg.dataset)
    chunks = build.build(cfg).chunker.chunk(dataset.documents())
    queries = [q for q in dataset.queries() if q.qid not in drop]
    folder.mkdir()
    hasher = HashEmbedder(512)
    np.save(folder / "passages.npy", hasher.embed([c.text for c in chunks]))
    (folder / "passages.txt").write_text("".join(f"{c.chunk_id}\n" for c in chunks))
    np.save(folder / "queries.npy", hasher.embed([q.text for q in queries], "query"))
    (folder / "queries.txt").write_text("".join(f"{q.qid}\n" for q in queries))
    return folder, dataset


@pytest.mark.slow
def test_one_folder_of_every_question_serves_the_dev_run_and_its_test_confirmation(
        tmp_path, mlflow_store):
    """split=auto scores the dev questions and ``ragexp confirm`` the test ones: both runs read
    one queries.npy of all the questions; a scored question without a row is still named."""
    from workspaces import record_run

    base = ["reranker=none", f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    folder, dataset = _hash_folder(tmp_path / "vectors", _cfg("embedder=hash", *base))
    runs = [record_run("embedder=precomputed", f"embedder.path={folder}", f"split={s}", *base)
            for s in ("auto", "test")]
    assert [r["status"] for r in runs] == ["FINISHED", "FINISHED"]
    from ragexp.data import split

    cfg = _cfg("embedder=hash", *base)
    dev = split.select(dataset, "dev", cfg.split_seed, cfg.split_test_share).queries()
    lost, _ = _hash_folder(tmp_path / "lost", cfg, drop={dev[0].qid})
    with pytest.raises(PrecomputedError, match=f"1 of the run's {len(dev)} questions have no "
                                               f"row in .*'{dev[0].qid}'"):
        record_run("embedder=precomputed", f"embedder.path={lost}", "split=dev", *base)


def test_a_beir_query_without_test_qrels_is_ignored(tmp_path, mlflow_store):
    from conftest import jsonl, write_tree
    from workspaces import record_run

    beir = write_tree(tmp_path / "beir", {
        "corpus.jsonl": jsonl([{"_id": f"d{i}", "title": t, "text": f"{t} have stripes {i}."}
                               for i, t in enumerate(["Zebras", "Tigers", "Bees"])]),
        "queries.jsonl": jsonl([{"_id": "q1", "text": "Why do zebras have stripes?"},
                                {"_id": "q2", "text": "Why do bees hum?"}]),
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td0\t1\n"})
    base = ["dataset=beir", f"dataset.path={beir}", "reranker=none", "progress=false",
            f"cache_dir={tmp_path / 'cache'}"]
    folder = tmp_path / "vectors"
    folder.mkdir()
    hasher = HashEmbedder(512)
    passages = {"d0": "Zebras have stripes 0.", "d1": "Tigers have stripes 1.",
                "d2": "Bees have stripes 2."}
    np.save(folder / "passages.npy", hasher.embed(list(passages.values())))
    (folder / "passages.txt").write_text("d0\nd1\nd2\n")
    np.save(folder / "queries.npy", hasher.embed(["Why do zebras have stripes?",
                                                  "Why do bees hum?"], "query"))
    (folder / "queries.txt").write_text("q1\nq2\n")
    run = record_run("embedder=precomputed", f"embedder.path={folder}", "chunking=none", *base)
    assert run["status"] == "FINISHED"


def test_chunks_of_one_text_keep_their_own_vectors_in_a_run(tmp_path, mlflow_store):
    """Two BEIR passages of one text, each with its own row: the run reads each by its id. Read
    by text (as before), ``b`` got ``z``'s row, ranked third behind ``c`` and ``z``, and RR@10
    read 1/3 where ``b``'s own row is the question's vector (RR@10 1)."""
    from conftest import jsonl, write_tree
    from workspaces import record_run

    same = {"title": "Broker", "text": "The broker restarts on its own."}
    beir = write_tree(tmp_path / "beir", {
        "corpus.jsonl": jsonl([{"_id": "z", **same}, {"_id": "b", **same},
                               {"_id": "c", "title": "Disk", "text": "Disks fill up."}]),
        "queries.jsonl": jsonl([{"_id": "q1", "text": "Does the broker restart?"}]),
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\tb\t1\n"})
    folder = tmp_path / "vectors"
    folder.mkdir()
    np.save(folder / "passages.npy", np.array([[1, 0, 0], [0, 1, 0], [0.6, 0.8, 0]],
                                              dtype=np.float32))
    (folder / "passages.txt").write_text("z\nb\nc\n")
    np.save(folder / "queries.npy", np.array([[0, 1, 0]], dtype=np.float32))
    (folder / "queries.txt").write_text("q1\n")
    run = record_run("dataset=beir", f"dataset.path={beir}", "chunking=none", "reranker=none",
                     "retriever=dense", "progress=false", f"cache_dir={tmp_path / 'cache'}",
                     "embedder=precomputed", f"embedder.path={folder}")
    assert run["status"] == "FINISHED" and run["rr_at_10"] == 1.0


def test_a_text_of_two_rows_names_no_vector_and_questions_of_one_text_are_refused(tmp_path):
    chunks = [Chunk("d0", "d0", "same text"), Chunk("d1", "d1", "same text"), *CHUNKS[2:]]
    emb = PrecomputedEmbedder(str(_folder(tmp_path / "v")))
    emb.bind(chunks, QUESTIONS)
    rows = emb.files["passage"].vectors
    assert np.array_equal(emb.passage_vectors(["d1", "d0", "d3"]), rows[[1, 0, 3]])
    with pytest.raises(PrecomputedError, match="1 passage texts belong to chunks with "
                                               "different precomputed vectors, so a text "
                                               "names no one vector: 'same text'"):
        emb.embed(["same text"], "passage")
    assert np.array_equal(emb.embed([CHUNKS[2].text], "passage"), rows[[2]])
    same = np.repeat(_unit(1, 8), 2, axis=0)  # one vector under two ids: one text, one row
    alike = PrecomputedEmbedder(str(_folder(tmp_path / "w", passages=np.vstack([same, same]))))
    alike.bind(chunks, QUESTIONS)
    assert np.array_equal(alike.embed(["same text"], "passage"), same[:1])

    with pytest.raises(PrecomputedError, match=r"queries.txt: 'q1' \(line 1\), 'q2' \(line 2\)"
                                               r" have the same text \('what is it'\) but "
                                               r"different rows of queries.npy"):
        emb.bind(CHUNKS, {"q1": "what is it", "q2": "what is it"})


def test_a_nan_row_is_refused_before_any_run_exists(tmp_path, mlflow_store):
    from workspaces import record_run

    from ragexp.tracking import store as tracking

    passages = _unit(4, 8)
    passages[1, 2] = np.nan
    folder = _folder(tmp_path / "v", passages)
    with pytest.raises(PrecomputedError, match=r"embedder.path=\S+: \S+passages.npy: NaN or "
                                               r"inf in row 1 \(id 'd1'\)"):
        record_run("embedder=precomputed", f"embedder.path={folder}", "progress=false",
                   f"cache_dir={tmp_path / 'cache'}")
    experiments = tracking.client().search_experiments()
    assert not tracking.client().search_runs([e.experiment_id for e in experiments])


@pytest.mark.slow
def test_the_cli_refuses_a_malformed_folder_with_exit_2_and_creates_nothing(tmp_path):
    from cli_runs import run_app

    folder = _folder(tmp_path / "v")
    (folder / "passages.npy").write_text("not numpy\n")
    proc = run_app(tmp_path, "embedder=precomputed", f"embedder.path={folder}",
                   f"hydra.run.dir={tmp_path / 'out'}", migrated=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"embedder.path={folder}: {folder}/passages.npy is not a .npy matrix" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "mlflow.db").exists()


def test_rows_read_are_np_load_s_bits_in_either_memory_order(tmp_path):
    """The rows read past the header are the bytes ``np.load`` returns, for a C- and a
    Fortran-ordered file alike (np.save writes the transpose's rows for the latter)."""
    from ragexp.index import precomputed

    x = _unit(300, 8, 3)
    for order in ("C", "F"):
        folder = _folder(tmp_path / order, np.asarray(x, order=order),
                         ids=[f"d{i}" for i in range(300)])
        precomputed._read.cache_clear()
        got = PrecomputedEmbedder(str(folder)).files["passage"].vectors
        assert np.array_equal(got, np.load(folder / "passages.npy"))
        assert got.flags.writeable and got.flags.f_contiguous == (order == "F")


def test_a_truncated_matrix_is_named_with_the_bytes_it_lacks(tmp_path):
    folder = _folder(tmp_path / "v")
    npy = folder / "passages.npy"
    npy.write_bytes(npy.read_bytes()[:-40])  # the last 10 floats cut off
    with pytest.raises(PrecomputedError) as info:
        PrecomputedEmbedder(str(folder))
    assert str(info.value) == (f"{npy} is truncated: its header declares a (4, 8) float32 matrix "
                       f"(128 bytes after the header) but it holds 88")


def test_a_big_endian_matrix_is_refused_unread(tmp_path):
    assert "holds >f4; need float32" in _error(tmp_path, passages=_unit(4, 8).astype(">f4"))


def test_a_wrong_dtype_is_named_before_the_ids_and_the_ids_before_the_rows(tmp_path):
    """Errors come in the order shape/dtype, ids, rows, whichever the folder holds."""
    rows = _unit(4, 8)
    rows[1] = np.nan
    assert "holds float64" in _error(tmp_path, passages=rows.astype(np.float64), ids=["d0"])
    assert "has 4 rows but" in _error(tmp_path, passages=rows, ids=["d0"])
    assert "NaN or inf in row 1" in _error(tmp_path, passages=rows)


@pytest.mark.parametrize("ids,distinct", [(["a", "b", "c"], True), (["a", "b", "a"], False),
                                          ([], True), (["x"] * 5, False)])
def test_distinct_ids_are_told_apart_even_when_their_hashes_collide(monkeypatch, ids, distinct):
    """``_distinct`` answers from the ids' hashes when those are all different and falls back
    to comparing the ids themselves when two hashes are equal: a hash that maps every id to one
    value (every pair collides) must still tell distinct ids from repeated ones."""
    import builtins

    from ragexp.index import precomputed

    assert precomputed._distinct(ids) is distinct
    monkeypatch.setattr(builtins, "hash", lambda _: 7)
    assert precomputed._distinct(ids) is distinct


def test_duplicates_among_many_ids_are_found_as_a_set_finds_them():
    """Against ``set`` on 200,000 random ids, with and without one id repeated."""
    from ragexp.index import precomputed

    rng = np.random.default_rng(5)
    ids = [f"doc-{v}" for v in rng.choice(10**9, size=200_000, replace=False)]
    assert precomputed._distinct(ids) is (len(set(ids)) == len(ids)) is True
    ids[123_456] = ids[7]
    assert precomputed._distinct(ids) is (len(set(ids)) == len(ids)) is False


def test_a_byte_order_mark_is_no_part_of_the_first_id_and_a_blank_last_line_is_named(tmp_path):
    """A trial: a passages.txt written with a BOM failed at bind ("names 1 ids the run does not
    hold: '\\ufeffd0'"), and one ending in a blank line read as one id too many."""
    folder = _folder(tmp_path / "v")
    txt = folder / "passages.txt"
    txt.write_text("\ufeff" + txt.read_text(), encoding="utf-8")
    emb = PrecomputedEmbedder(str(folder))
    emb.bind(CHUNKS, QUESTIONS)
    assert emb.files["passage"].ids[0] == "d0"
    txt.write_text("d0\nd1\nd2\nd3\n\n")
    with pytest.raises(PrecomputedError, match="passages.txt: empty id on line 5$"):
        PrecomputedEmbedder(str(folder))


def test_an_id_file_that_is_not_utf8_is_named(tmp_path):
    """A trial: a UTF-16 passages.txt ended in a UnicodeDecodeError traceback."""
    folder = _folder(tmp_path / "v")
    txt = folder / "passages.txt"
    txt.write_text(txt.read_text(), encoding="utf-16")
    with pytest.raises(PrecomputedError) as info:
        PrecomputedEmbedder(str(folder))
    assert str(info.value) == (f"{txt} is not UTF-8 text (byte 0: invalid start byte): write "
                               f"one id per line in UTF-8")


@pytest.mark.slow
def test_a_sweep_counts_and_names_jobs_refused_before_their_run_exists(tmp_path):
    """A job whose folder is refused after the skip check but before its run is created (a NaN
    row: ``stages.check_vectors``) is a failed job of its sweep: counted, printed with no run,
    the parent FAILED and exit 1 (it once left no status file: "1 finished", exit 0). When no
    job finished, the sweep compares nothing and writes no page, without a traceback."""
    import shutil

    from cli_runs import run_app
    from mlflow.tracking import MlflowClient
    from workspaces import store_uri

    good, _ = _hash_folder(tmp_path / "good", _cfg("embedder=hash"))
    bad = []
    for name, row in (("bad", 3), ("worse", 5)):
        shutil.copytree(good, tmp_path / name)
        rows = np.load(good / "passages.npy")
        rows[row, 0] = np.nan
        np.save(tmp_path / name / "passages.npy", rows)
        bad.append(tmp_path / name)
    base = ["-m", "embedder=precomputed", "reranker=none"]
    procs = {}
    for sweep, paths in (("mixed", [good, bad[0]]), ("all", bad)):
        procs[sweep] = run_app(tmp_path, *base, f"embedder.path={','.join(map(str, paths))}",
                               f"hydra.sweep.dir={tmp_path / sweep}")
    c = MlflowClient(store_uri(tmp_path))
    parents = {r.data.tags["ragexp.sweep_dir"]: r for r in c.search_runs(
        [e.experiment_id for e in c.search_experiments()], "tags.`ragexp.role` = 'sweep'")}
    for sweep, (finished, failed) in {"mixed": (1, 1), "all": (0, 2)}.items():
        proc, out = procs[sweep], procs[sweep].stdout
        assert proc.returncode == 1, (sweep, proc.stderr[-2000:])
        assert f"{failed} job(s) did not finish" in proc.stderr
        counts = f"{failed} failed" + (f", {finished} finished" if finished else "")
        assert f"sweep done: {counts} (parent run" in out, (sweep, out[-2000:])
        lines = [ln for ln in out.splitlines() if ln.strip().startswith("FAILED")]
        assert len(lines) == failed, (sweep, lines)
        assert all("NaN or inf in row" in ln and "no run: the job failed before its run was "
                   "created" in ln for ln in lines), lines
        parent = parents[str(tmp_path / sweep)]
        assert parent.info.status == "FAILED"
        assert json.loads(parent.data.tags["ragexp.jobs"]) == (
            {"failed": failed, "finished": finished} if finished else {"failed": failed})
        assert "Traceback" not in proc.stdout + proc.stderr
    assert "no comparison and no report.html: no job of this sweep finished" in procs["all"].stdout
    assert "report.html" in procs["mixed"].stdout
