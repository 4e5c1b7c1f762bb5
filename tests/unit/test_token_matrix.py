"""``TokenMatrix.build`` analyses each distinct whitespace piece once (``text.pieces``), yet its
terms, offsets and vocabulary order must be those of ``text.tokenize`` applied text by text, bit
for bit: on the handbook, SciFact-like scientific text, Unicode of every kind, a synthetic
corpus, and random text (Hypothesis)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragexp.text import analysis, tokens
from ragexp.text.analysis import piece_terms, pieces, terms_of_pieces, tokenize
from ragexp.text.tokens import TokenMatrix


def reference(texts: list[str]) -> tuple[list[str], list[int], list[int]]:
    """The matrix as ``build`` made it before pieces: ``tokenize`` per text, each term's id by
    first appearance, one ``setdefault`` per token."""
    index: dict[str, int] = {}
    ids, offsets = [], [0]
    for text in texts:
        ids += [index.setdefault(t, len(index)) for t in tokenize(text)]
        offsets.append(len(ids))
    return list(index), ids, offsets


def assert_same_as_reference(texts: list[str]) -> TokenMatrix:
    got = TokenMatrix.build(texts)
    vocab, ids, offsets = reference(texts)
    assert got.vocab == vocab
    assert got.ids.dtype == np.int32 and got.ids.tolist() == ids
    assert got.offsets.dtype == np.int64 and got.offsets.tolist() == offsets
    assert [got[i] for i in range(len(texts))] == [tokenize(t) for t in texts]
    return got


SCIFACT_LIKE = [
    "Exposure to 2.5 μM rapamycin reduced mTORC1 activity by 37.2% (p < 0.001; n = 48).",
    "TNF-α and IL-1β levels rose 3-fold in CD4+ T-cells; IL-6/IL-10 ratio was 0.45 ± 0.12.",
    "β-amyloid(1-42) aggregates at 37 °C; Aβ42 oligomers were 10–20 nm (Fig. 2B, S3).",
    "SARS-CoV-2 RNA was detected in 12/150 (8.0%) samples; COVID-19 ICU stay 5.5 d.",
    "The Na+/K+-ATPase α1 subunit; Ca²⁺ influx; 5×10⁶ cells/mL; HbA1c ≥ 6.5%;",
    "doi:10.1016/j.cell.2019.05.031 (PMID 31178118), NCT04280705, rs429358 APOE-ε4.",
    "Patients (n=1,024; age 65.3±7.1 y) received 0.5mg/kg/day; χ² = 4.21, OR 1.8 [95% CI 1.1-2.9].",
    "Hypothesis: BRCA1/2 mutation carriers' risk is e.g. ~45-65% by age 70 — not ≤ 10 %.",
    "Fe₂O₃ nanoparticles (≈ 20 nm) vs. Fe3O4; pH 7.4; log₁₀ CFU; ΔG = -3.2 kcal·mol⁻¹.",
]

UNICODE = [
    "東京タワーは東京にあります。大阪城も有名です。",
    "서울은 한국의 수도입니다. ภาษาไทยไม่มีช่องว่าง ລາວ ខ្មែរ မြန်မာ",
    "Ångström café naïve façade Zürich größte STRASSE İstanbul ıi Σίσυφος ΣΑΣ σς",
    "ﬁnal ﬂow ﬀ ﬃ Ⅻ ＢＤ－１２３４ ｶﾀｶﾅ ①②③ ㎏ ℃",
    "co\u00adoperate zero\u200bwidth join\u200dme word\u2060joiner bidi\u200emark\ufeffbom",
    "e\u0301 a\u0308 n\u0303 ǰ̣ o\u0323\u0302 ̀leading mark",
    "no\u00a0break\u2009thin\u3000ideographic\u2028line\u2029para\x1cfs\x1f\tend\r\n",
    "Москва — столица России; Київ; Беларусь; Ελλάδα; עברית; العربية; हिन्दी",
    "mixed ASCII brindle.toml max_payload_bytes BD-2110 café‐bar 3.14 v2.0.1 a-b_c.d",
    "", "   ", "the of and", "...", "a", "I", "THE END.",
]


def test_no_whitespace_character_can_be_inside_a_word():
    """``pieces`` splits at ``str.isspace``: sound only if no such character is a letter,
    mark, digit or joiner (the characters words are made of), in any script."""
    inside = regex.compile(rf"{analysis._WORD}|{analysis._JOIN}")
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert len(spaces) > 20 and not [c for c in spaces if inside.fullmatch(c)]


def test_handbook_chunks_give_tokenizes_terms(chunks):
    got = assert_same_as_reference([c.text for c in chunks])
    assert len(got.vocab) > 1000 and got.lengths().min() >= 0


def test_scientific_and_unicode_text_give_tokenizes_terms():
    assert_same_as_reference(SCIFACT_LIKE + UNICODE + SCIFACT_LIKE[::-1])


def test_a_synthetic_corpus_gives_tokenizes_terms(tmp_path):
    import json

    from tools import synth

    folder = synth.generate(tmp_path / "s", 2000, 10, seed=3)
    texts = [json.loads(line)["text"] for line in (folder / "corpus.jsonl").open()]
    assert_same_as_reference(texts)


def test_blocks_of_the_expansion_join_exactly(monkeypatch):
    """Piece ids expand into term ids a block at a time: blocks of 1, 2 and 7 occurrences cut
    texts, empty texts and pieces of 0, 1 and several terms everywhere."""
    texts = ["the BD-2110 fails", "", "of", "東京 tower", "x.y.z the", "", "Error BD-2110"] * 3
    want = TokenMatrix.build(texts)
    for block in (1, 2, 7):
        monkeypatch.setattr(tokens, "_BLOCK", block)
        got = assert_same_as_reference(texts)
        assert got.ids.tolist() == want.ids.tolist()


def test_many_pieces_at_once_equal_one_at_a_time():
    """``terms_of_pieces`` stems plain ASCII words in one stemmer call: the same stems as
    ``stem_word`` one word at a time (py_rust_stemmers' two entry points)."""
    for ascii in (True, False):
        batch = sorted({p for t in SCIFACT_LIKE + UNICODE for p in pieces(t)[0]
                        if pieces(t)[1] == ascii})
        batch += ["running", "the", "flies", "ponies", "generously", "x1", "2024", "a-b"]
        assert terms_of_pieces(batch, ascii) == [piece_terms(p, ascii) for p in batch]


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60) | st.text(
    st.sampled_from(list("aZß-_.İıﬁＡ東京タワーภาไ어é\u0301\u00ad Дд12 ,!?。\u00a0\u3000\t")),
    max_size=40) | st.text(st.sampled_from(list("abcxyz the of -._0123 ")), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, max_size=8))
@example(["Hello hello HELLO", "hello — привет", "hello"])
@example(["ǰ̣ Σ ς", "ﬁ fi FI", "I İ ı"])
def test_any_texts_give_tokenizes_terms(texts):
    # memos cold, then warm: neither may change a term
    analysis._general_word_terms.cache_clear()
    analysis._ascii_word_terms.cache_clear()
    assert_same_as_reference(texts)
    assert_same_as_reference(texts)


@pytest.mark.parametrize("texts", [[], [""], ["the of"]])
def test_corpora_without_terms(texts):
    got = assert_same_as_reference(texts)
    assert got.vocab == [] and len(got) == len(texts)
