"""``ragexp questions generate`` with the known_item generator: same seed same bytes, the drawn
terms' frequencies against the definition (chi-square over many draws), every file passes
``golden check``, a cut-off file continues to the same bytes, the sample is stratified, and bad
input fails in one line with nothing written; no number, function word or glued word is drawn
unless the passage is about it, and the noise term is off by default."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from ragexp.cli.main import main
from ragexp.cli.questions import compose
from ragexp.data import golden
from ragexp.generate import known_item
from ragexp.generate.generation import corpus_of
from ragexp.generate.passages import Job, passages_of, sample_order
from ragexp.records import Document

QUIET = ["progress=false"]


def generate(out, *args: str) -> int:
    return main(["questions", "generate", "--out", str(out), *args, *QUIET])


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_same_seed_same_bytes_and_golden_check_passes(tmp_path, capsys):
    a, b, c = tmp_path / "a" / "ki.jsonl", tmp_path / "b" / "ki.jsonl", tmp_path / "c.jsonl"
    a.parent.mkdir(), b.parent.mkdir()
    for out, seed in ((a, "0"), (b, "0"), (c, "1")):
        assert generate(out, "--n", "60", "--seed", seed) == 0
    assert a.read_bytes() == b.read_bytes()
    assert lines(a)[0]["question"] != lines(c)[0]["question"] or \
        [r["passage"] for r in lines(a)] != [r["passage"] for r in lines(c)]
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith("asked ") and "kept 60" in summary
    assert golden.main(["check", "--golden", str(a)]) == 0
    rec = lines(a)[0]
    assert rec["source"] == "generated" and rec["kind"] == "known_item" and rec["seed"] == 0
    assert rec["generator"]["name"] == "known_item" and rec["model"] is None
    assert set(rec["passage"]) == {"doc", "section", "start", "end", "draw"}


def test_a_cut_off_file_continues_to_the_same_bytes(tmp_path, capsys):
    whole, cut = tmp_path / "w" / "ki.jsonl", tmp_path / "c" / "ki.jsonl"
    whole.parent.mkdir(), cut.parent.mkdir()
    assert generate(whole, "--n", "50") == 0
    assert generate(cut, "--n", "20") == 0
    cut.write_bytes(cut.read_bytes()[:-40])  # Ctrl-C in the middle of line 20
    assert generate(cut, "--n", "50") == 0
    assert cut.read_bytes() == whole.read_bytes()
    out = capsys.readouterr().out.splitlines()[-1]
    assert "kept 31" in out and "holds 50" in out  # 19 whole lines survived the cut


def test_a_corpus_too_small_for_n_says_why_the_file_is_short(tmp_path, capsys):
    """A trial asked for 500 questions of two short documents and got 3 without a word of why:
    every job (passages x draws) was asked."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "k.md").write_text("# Kettles\n\nThe copper kettle in the east kitchen is "
                                 "descaled every Thursday with citric acid.\n")
    (corpus / "l.md").write_text("# Ladders\n\nThe aluminium stepladder is inspected each "
                                 "quarter by the facilities team.\n")
    n_passages = len(passages_of(golden.load_corpus(corpus).values()))
    out = tmp_path / "q.jsonl"
    assert generate(out, "--n", "500", "dataset=markdown", f"dataset.corpus_dir={corpus}",
                    "draws=2") == 0
    captured = capsys.readouterr()
    held = len(lines(out))
    assert 0 < held < 500 and f"holds {held} questions" in captured.out
    assert f"asked {2 * n_passages}," in captured.out
    assert captured.err == (f"warning: {out} holds fewer than --n 500: every job was asked "
                            f"({n_passages} passages of 8+ words x draws=2); add documents, "
                            f"raise draws or ask for fewer\n")
    assert generate(tmp_path / "r.jsonl", "--n", str(held), "dataset=markdown",
                    f"dataset.corpus_dir={corpus}", "draws=2") == 0
    assert capsys.readouterr().err == ""  # as many as the corpus gives: no warning


def test_a_file_is_continued_only_with_its_own_settings(tmp_path, capsys):
    out = tmp_path / "ki.jsonl"
    assert generate(out, "--n", "5") == 0
    before = out.read_bytes()
    assert generate(out, "--n", "10", "--seed", "7") == 2
    assert "other settings" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_file_is_continued_only_from_its_own_corpus(tmp_path, capsys):
    """As another seed is refused, so is another corpus, or the same one changed: the message
    says what the file was written from (documents, sha256, what it quotes) and what to do; a
    file written before the corpus was recorded is refused when it quotes documents the corpus
    lacks. Nothing is written."""
    folders = {}
    for name, words_ in (("one", ("kettle", "ladder")), ("two", ("lantern", "hammock"))):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        for w in words_:
            (folders[name] / f"{w}.md").write_text(f"# {w}\n\nThe {w} in the east wing is "
                                                  f"inspected every Thursday by the {w} team.\n")
    out = tmp_path / "q.jsonl"

    def run(folder) -> int:
        return generate(out, "--n", "4", "dataset=markdown", f"dataset.corpus_dir={folder}",
                        "dataset.name=mine")

    assert run(folders["one"]) == 0
    written = corpus_of(list(golden.load_corpus(folders["one"]).values()))
    assert lines(out)[0]["corpus"] == written
    before = out.read_bytes()
    capsys.readouterr()
    other = corpus_of(list(golden.load_corpus(folders["two"]).values()))
    assert run(folders["two"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --out {out} was written from another corpus (2 documents, sha256 "
        f"{written['sha256']}; its questions quote kettle.md, ladder.md) than dataset 'mine' "
        f"(2 documents, sha256 {other['sha256']}); dataset 'mine' lacks kettle.md, ladder.md: "
        f"continue it with the dataset it was written from, its documents unchanged, or give "
        f"another --out")
    (folders["one"] / "kettle.md").write_text("# kettle\n\nThe kettle was moved to the west "
                                             "wing and is inspected on Fridays now.\n")
    assert run(folders["one"]) == 2
    assert "was written from another corpus (2 documents, sha256 " in capsys.readouterr().err
    assert out.read_bytes() == before
    out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "corpus"}) + "\n"
                           for r in lines(out)))  # a file written before the corpus was recorded
    assert run(folders["two"]) == 2
    assert "(its questions quote kettle.md, ladder.md) than dataset 'mine'" in \
        capsys.readouterr().err


def test_popular_and_discriminative_draws_follow_the_definition():
    """p(t|q) = (1 - lam) p(t|d) + lam p(t), checked by chi-square on 20,000 draws, with the
    expected probabilities worked out here by hand from the counts."""
    docs = [Document("d", "d", "alpha alpha alpha beta gamma"),
            Document("e", "e", "beta delta delta delta delta")]
    collection = known_item.collection_model(docs)
    # cf: alpha 3, beta 2, gamma 1, delta 4 over |C| = 10 terms
    assert collection == {"alpha": .3, "beta": .2, "delta": .4, "gamma": .1}
    passage = known_item.terms(docs[0].text)
    lam = 0.2
    inv = 1 / .3 + 1 / .2 + 1 / .1
    expected = {
        "popular": {"alpha": .8 * 3 / 5 + lam * .3, "beta": .8 * 1 / 5 + lam * .2,
                    "gamma": .8 * 1 / 5 + lam * .1, "delta": lam * .4},
        "discriminative": {"alpha": .8 * (1 / .3) / inv + lam * .3,
                           "beta": .8 * (1 / .2) / inv + lam * .2,
                           "gamma": .8 * (1 / .1) / inv + lam * .1, "delta": lam * .4}}
    n = 20_000
    for strategy, want in expected.items():
        model = known_item.query_model(passage, collection, strategy, lam)
        assert model == pytest.approx(want)
        drawn = Counter(known_item.draw_terms(np.random.default_rng(3), model, n))
        vocab = sorted(want)
        result = stats.chisquare([drawn[t] for t in vocab], [n * want[t] for t in vocab])
        assert result.pvalue > 1e-3, (strategy, drawn)


def test_evidence_is_the_fewest_sentences_holding_the_drawn_terms():
    sentences = ["Leases last thirty seconds.", "Workers renew leases.", "Queues hold jobs."]
    assert known_item.cover(sentences, {"leases", "renew"}) == ["Workers renew leases."]
    assert known_item.cover(sentences, {"thirty", "jobs"}) == [sentences[0], sentences[2]]
    assert known_item.cover(sentences, {"absent"}) == []


def test_the_sample_order_is_stratified_over_documents(docs):
    passages = passages_of(list(docs.values()))
    order = sample_order(passages, seed=0)
    assert sorted(p.pid for p in order) == sorted(p.pid for p in passages)
    n_docs = len({p.doc_id for p in passages})
    first_round = order[:n_docs]
    assert len({p.doc_id for p in first_round}) == n_docs  # every document once before any twice
    by_doc = Counter(p.doc_id for p in order[:3 * n_docs])
    assert max(by_doc.values()) == 3  # a long document gets no more than a short one, per round


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n 0"),
    (["--kinds", "factual"], "not a kind the known_item generator writes"),
    (["--n", "5", "dataset=markdown", "dataset.corpus_dir=EMPTY"], "no markdown documents"),
    (["--n", "5", "dataset=markdown", "dataset.corpus_dir=SHORT"], "no passage"),
    (["--n", "5", "dataset=beir", "dataset.path=EMPTY"], "EMPTY/corpus.jsonl: no such file: "
     "questions are written from a BEIR folder's corpus.jsonl (its queries and qrels are not "
     "read)"),
    (["--n", "5", "generator=nope"],
     "Could not find 'generator/nope'; options in 'generator': known_item, llm"),
    (["--n", "5", "--generator", "llm", "llm.api_key_env=RAGEXP_UNSET_KEY_VAR"],
     "RAGEXP_UNSET_KEY_VAR"),
    # every question dropped as too short, exit 0 and "add documents, raise draws"
    (["--n", "5", "min_words=10", "max_words=3"],
     "min_words=10 is out of range: must be <= max_words (3)"),
    # a key nothing reads: the runner's "did you mean", every top-level key refused (a run
    # logs +my_note=x with its params; questions generate logs nothing)
    (["--n", "5", "+min_word=3"], "error: invalid config: min_word is not a setting of "
     "questions generate (did you mean min_words?): nothing would read it"),
    (["--n", "5", "+my_note=x"], "my_note is not a setting of questions generate (it takes "
     "dataset, generator, llm, min_words, max_words, draws, batch, source, progress)"),
    (["--n", "5", "+generator.lamb=0.2"], "generator.lamb is not a setting of "
     "ragexp.generate.known_item.KnownItemGenerator (did you mean generator.lam? it takes "
     "strategy, lam, mean_length, min_length, max_length)"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "SHORT").mkdir()
    (tmp_path / "SHORT" / "a.md").write_text("# Title\n\nToo short.\n")
    args = [a.replace("EMPTY", str(tmp_path / "EMPTY")).replace("SHORT", str(tmp_path / "SHORT"))
            for a in args]
    out = tmp_path / "q.jsonl"
    assert generate(out, *args) == 2
    err = capsys.readouterr().err.strip()
    assert message.replace("EMPTY", str(tmp_path / "EMPTY")) in err, err
    assert len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("where", ["missing/q.jsonl", "/proc/ragexp-q.jsonl"])
def test_an_out_that_cannot_be_written_fails_first(tmp_path, capsys, where):
    out = tmp_path / where if not where.startswith("/") else where
    assert generate(out, "--n", "5") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and len(err.splitlines()) == 1


def test_a_beir_folder_needs_only_its_corpus_to_write_questions(tmp_path, capsys):
    """Writing questions reads documents only; a BEIR folder without qrels was refused ("qrels
    file not found"), and one whose qrels judged nothing relevant too. With or without its
    queries and qrels, the folder gives the same questions, quoting its passages by id."""
    texts = {f"d{i}": f"The {w} team ships the {w} release every second Tuesday after the "
                      f"review meeting closes." for i, w in enumerate(["alpha", "beta", "gamma"])}
    corpus = "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                     for d, t in texts.items())
    bare, full = tmp_path / "bare", tmp_path / "full"
    for folder in (bare, full):
        folder.mkdir()
        (folder / "corpus.jsonl").write_text(corpus)
    (full / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "alpha"}) + "\n")
    (full / "qrels").mkdir()
    (full / "qrels" / "test.tsv").write_text("q1\td0\t1\n")
    outs = []
    for folder in (bare, full):
        outs.append(tmp_path / f"{folder.name}.jsonl")
        assert generate(outs[-1], "--n", "3", "dataset=beir", f"dataset.path={folder}") == 0
    records = lines(outs[0])
    # ids are named after the file written; the rest is the same
    assert [{**r, "id": ""} for r in records] == [{**r, "id": ""} for r in lines(outs[1])]
    assert len(records) == 3
    for rec in records:
        (ev,) = rec["evidence"]
        assert ev["quote"] in texts[ev["doc"]]


def drawn_terms(docs: list[Document], generator=None, draws: int = 300) -> set[str]:
    """Every term of every known-item query written for the passages of ``docs`` over
    ``draws`` passes (seeds), the generator's defaults unless given."""
    generator = generator or known_item.KnownItemGenerator()
    passages = passages_of(docs)
    generator.prepare(docs, passages)
    out: set[str] = set()
    for draw in range(draws):
        for rec in generator.write([Job(p, draw, "known_item", i)
                                    for i, p in enumerate(passages)], seed=draw):
            if isinstance(rec, dict):
                out.update(rec["question"].split())
    return out


def test_numbers_and_function_words_are_drawn_only_when_the_heading_names_them():
    """The issue's ``13 75 associated endometrial``: the numbers are never drawn from a passage
    that is not about them; under the heading "Error 404" the 404 is drawn, and ``BD-3002`` (an
    identifier: letters and digits) always is; ``within``, ``three``, ``13`` never."""
    docs = [Document("s.md", "Study", "# Study\n\nOf the 75 patients, 13 had associated "
                     "endometrial lesions within the study.\n"),
            Document("e.md", "Errors", "# Errors\n\n## Error 404\n\nThe gateway returns 404 "
                     "within 13 seconds when three brokers reject BD-3002.\n")]
    assert drawn_terms(docs) == {"patients", "associated", "endometrial", "lesions", "study",
                                 "gateway", "returns", "404", "seconds", "brokers", "reject",
                                 "bd-3002"}


def test_text_glued_by_markup_conversion_is_not_drawn():
    """The issue's ``capabilitytop-level`` and ``xlinkedin``: written ``capabilityTop-level``
    and ``XLinkedIn`` (a converter dropped the tag before a capitalised link text), and
    ``capability``, ``top``, ``x`` and ``linkedin`` used on their own elsewhere: not drawn.
    ``LinkedIn`` alone, ``producerToken`` in code, and the lower-case ``capabilitytop`` (no
    dictionary tells it from ``backend``) are drawn."""
    docs = [Document("r.md", "Release", "# Release\n\nThe release adds one capabilityTop-level "
                     "routing for tenants. Follow XLinkedIn for news.\n"),
            Document("o.md", "Other", "# Other\n\nEach capability sits at the top of the list. "
                     "Post on X or LinkedIn; the top capability is routing. Read X and "
                     "LinkedIn.\n"),
            Document("c.md", "Code", "# Code\n\nSet `producerToken` before routing on LinkedIn "
                     "with the top tenants enabled.\n")]
    drawn = drawn_terms(docs, draws=200)
    assert {"capabilitytop-level", "xlinkedin"}.isdisjoint(drawn)
    assert {"release", "adds", "routing", "tenants", "follow", "news", "producertoken",
            "linkedin"} <= drawn
    cf = known_item.word_parts(docs)
    assert cf["xlinkedin"] == 1 and cf["x"] == 2 and cf["linkedin"] == 3
    assert known_item.glued("capabilitytop", docs[0].text, cf)
    assert known_item.glued("xlinkedin", docs[0].text, cf)
    assert not known_item.glued("linkedin", docs[1].text, cf)  # Linked|In: "in" a stopword
    assert not known_item.glued("producertoken", docs[2].text, cf)  # in code
    assert not known_item.glued("capabilitytop", "adds capabilitytop-level", cf)  # no case change


def test_the_handbook_has_no_glued_word(docs):
    """docs/questions.md: the case-change rule finds no glued word in the handbook, whose
    compounds (``backend``, ``hostname``) a rule of two collection words run together took."""
    texts = list(docs.values())
    cf = known_item.word_parts(texts)
    passages = passages_of(texts)
    found = {t for p in passages for t in known_item.terms(p.text)
             if not known_item.Drawable(cf, frozenset(), p.text)(t)
             and not known_item.is_number(t) and t not in known_item.FUNCTION_WORDS}
    assert found == set()
    assert {"backend", "hostname"} <= {t for p in passages for t in known_item.terms(p.text)}


def test_the_noise_term_is_off_by_default_and_draws_no_number_when_on():
    """``lam`` defaults to 0 (the composed config too): every query term is a term of its
    passage. With ``lam = 0.5`` the noise is the collection model over drawable terms,
    renormalised: cf alpha 3, beta 2, gamma, lorem and ipsum 1, over 8 terms (the number 42 and
    the function word ``three`` left out, the heading's one-letter ``d`` no term)."""
    docs = [Document("d.md", "d", "# D\n\nalpha alpha alpha beta 42 three gamma beta lorem "
                     "ipsum\n")]
    assert known_item.KnownItemGenerator().lam == 0.0
    assert compose("known_item", []).generator.lam == 0.0
    assert drawn_terms(docs, draws=50) <= set(known_item.terms(docs[0].text)) - {"42", "three"}
    noisy = known_item.KnownItemGenerator(lam=0.5)
    noisy.prepare(docs, passages_of(docs))
    assert noisy._noise == pytest.approx({"alpha": 3 / 8, "beta": 2 / 8, "gamma": 1 / 8,
                                          "lorem": 1 / 8, "ipsum": 1 / 8})


def test_each_set_names_its_source_and_is_continued_only_under_it(tmp_path, capsys):
    """``source=NAME`` labels every question (one source per generator lets a sweep certify
    each set on its own); ``hand``, ``all`` and names that cannot be part of a metric name are
    refused before anything is written, and a file is continued only under its own source."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for w in ("kettle", "ladder", "lantern"):
        (corpus / f"{w}.md").write_text(f"# {w}\n\nThe {w} in the east wing is inspected every "
                                        f"Thursday by the {w} team.\n")
    out = tmp_path / "q.jsonl"
    args = ("--n", "3", "dataset=markdown", f"dataset.corpus_dir={corpus}")
    assert generate(out, *args, "source=structure_v1") == 0
    assert {r["source"] for r in lines(out)} == {"structure_v1"}
    assert golden.load_golden(out, golden.load_corpus(corpus))[0].source == "structure_v1"
    before = out.read_bytes()
    capsys.readouterr()
    for bad in ("hand", "ALL", "two words", "x" * 41):
        assert generate(tmp_path / "r.jsonl", *args, f"source='{bad}'") == 2
        assert f"source={bad!r}: name the generated questions' source" in capsys.readouterr().err
        assert not (tmp_path / "r.jsonl").exists()
    assert generate(out, "--n", "4", *args[2:]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --out {out} holds questions of source 'structure_v1', not 'generated': rerun "
        f"with source=structure_v1 to continue it, or give another --out")
    assert out.read_bytes() == before
