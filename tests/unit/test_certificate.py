"""The certificate of a sweep's question sets (``evaluation.certificate``, ``decide.sources``)
on fixed per-question tables: split-half agreement and tau between sources against
``scipy.stats.kendalltau`` and a bootstrap written here, pairs told apart against scipy's
permutation test and statsmodels' Holm, tiny sets, all-tied configurations, identical and
inverted sources, determinism and the JSON artifact's schema."""

from __future__ import annotations

import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from ragexp.decide import sources
from ragexp.evaluation import certificate as figures
from ragexp.records import Document, Query, Span


def tau(x, y) -> float:
    return float(sps.kendalltau(x, y).statistic)


def matrix(seed: int, k: int = 5, n: int = 30) -> np.ndarray:
    """(k, n) scores in [0, 1]: configuration i a little better than i - 1, with noise."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, n)
    return np.clip(base + 0.04 * np.arange(k)[:, None] + rng.normal(0, 0.15, (k, n)), 0, 1)


def tables(hand: np.ndarray, generated: np.ndarray | None = None,
           runs: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Per-question tables of ``len(hand)`` runs: the hand questions' scores ``hand`` (runs x
    questions) and, when given, the generated ones' (nDCG@10 and RR@10 alike)."""
    runs = runs or [f"run{i}" for i in range(len(hand))]
    out = {}
    for i, r in enumerate(runs):
        rows = [{"id": f"h{j:03d}", "kind": "factual" if j % 3 else "semantic", "source": "hand",
                 "ndcg_at_10": v, "rr_at_10": v} for j, v in enumerate(hand[i])]
        if generated is not None:
            rows += [{"id": f"g{j:03d}", "kind": "known_item", "source": "generated",
                      "ndcg_at_10": v, "rr_at_10": v} for j, v in enumerate(generated[i])]
        out[r] = pd.DataFrame(rows)
    return out


def test_split_half_is_the_median_and_percentiles_of_scipys_tau_over_seeded_halves():
    s = matrix(1)
    got = figures.split_half(s, splits=50, seed=7)
    rng = np.random.default_rng(7)  # the documented draws, one permutation per split
    taus = []
    for _ in range(50):
        perm = rng.permutation(s.shape[1])
        half = s.shape[1] // 2
        taus.append(tau(s[:, perm[:half]].mean(1), s[:, perm[half:2 * half]].mean(1)))
    assert got.median == pytest.approx(np.median(taus), abs=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(taus, [5, 95])), abs=1e-12)
    assert (got.defined, got.total) == (50, 50)


def test_bootstrap_tau_matches_a_bootstrap_written_here():
    a, b = matrix(2, n=25), matrix(3, n=40)
    got = figures.bootstrap_tau(a, b, resamples=300, seed=4)
    rng = np.random.default_rng(4)
    taus = []
    for _ in range(300):
        ia = rng.integers(0, 25, 25)
        ib = rng.integers(0, 40, 40)
        taus.append(tau(a[:, ia].mean(1), b[:, ib].mean(1)))
    taus = np.array(taus)
    taus = taus[~np.isnan(taus)]
    assert got.median == pytest.approx(tau(a.mean(1), b.mean(1)), abs=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(taus, [2.5, 97.5])),
                                                abs=1e-12)


def test_pairs_told_apart_are_scipys_sign_flip_p_adjusted_by_holm():
    s = matrix(5, k=4, n=20)
    got = figures.ordered_pairs(s, "nDCG@10")
    pairs = list(combinations(range(4), 2))
    p = [sps.permutation_test((s[i] - s[j],), np.mean, permutation_type="samples",
                              n_resamples=10_000, random_state=0).pvalue for i, j in pairs]
    holm = multipletests(p, method="holm")[1]
    want = {pair: int(np.sign((s[pair[0]] - s[pair[1]]).mean())) if q < 0.05 else 0
            for pair, q in zip(pairs, holm)}
    assert got == want and any(want.values())
    assert figures.power(got) == pytest.approx(sum(map(bool, want.values())) / 6)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_set_of_one_two_or_three_questions_has_not_enough_signal(n):
    cert = sources.certify(tables(matrix(6, k=3, n=n), matrix(7, k=3, n=n)), "nDCG@10")
    for s in cert.sources.values():
        assert s.n == n and s.verdict == figures.NO_SIGNAL
        assert f"{n} question(s), fewer than {figures.MIN_QUESTIONS}" in s.why
    half = cert.sources["hand"].rankings["nDCG@10"].split_half
    assert math.isnan(half.median) == (n == 1)
    json.dumps(sources.to_json(cert, {}), allow_nan=False)  # NaN is written as null
    assert sources.lines(cert, {})


def test_configurations_that_all_tie_have_no_ranking_and_not_enough_signal():
    same = np.tile(np.linspace(0, 1, 20), (4, 1))
    cert = sources.certify(tables(same), "nDCG@10")
    [hand] = cert.sources.values()
    r = hand.rankings["nDCG@10"]
    assert math.isnan(r.split_half.median) and r.split_half.defined == 0
    assert r.power == 0 and len(r.tied) == 4
    assert hand.verdict == figures.NO_SIGNAL and "every configuration ties" in hand.why
    assert not cert.pairs  # one source


def test_two_identical_sources_agree_fully():
    # every question orders the runs alike: each resample does too
    s = np.tile(np.linspace(0.1, 0.9, 5)[:, None], (1, 30)) + np.linspace(0, 0.05, 30)
    cert = sources.certify(tables(s, s), "nDCG@10")
    [pair] = cert.pairs
    g = pair.measures["nDCG@10"]
    assert (g.tau.median, g.tau.low, g.tau.high) == (1.0, 1.0, 1.0)
    assert g.inversions == () and g.winner_agrees and g.tied_agree
    assert pair.disagrees is False and not sources.flag_lines(cert)
    assert cert.sources["hand"].verdict == figures.DECIDES


def test_an_inverted_source_has_tau_minus_one_lists_its_inversions_and_is_not_used():
    s = np.tile(np.linspace(0.1, 0.9, 4)[:, None], (1, 30)) + np.linspace(0, 0.05, 30)
    cert = sources.certify(tables(s, s[::-1]), "nDCG@10", "hand")
    [pair] = cert.pairs
    g = pair.measures["nDCG@10"]
    assert (g.tau.median, g.tau.low, g.tau.high) == (-1.0, -1.0, -1.0)
    assert g.tau.median == tau(s.mean(1), s[::-1].mean(1))
    # every pair significant both ways (30 questions alike: p far below 0.05 after Holm)
    assert sorted(g.inversions) == sorted((f"run{j}", f"run{i}")
                                          for i, j in combinations(range(4), 2))
    assert not g.winner_agrees and pair.disagrees
    label = {f"run{i}": f"cfg{i}" for i in range(4)}
    shown = sources.lines(cert, label)
    assert "6 inversions: cfg1 above cfg0 on hand, below on generated; cfg2 above" in shown[3]
    assert shown[-1] == ("generated (30 questions) disagrees with your questions: not used (tau "
                         "-1.00 [-1.00, -1.00] with your questions, below their own split-half "
                         "agreement 1.00)")
    forced = sources.lines(sources.certify(tables(s, s[::-1]), "nDCG@10", "generated"), label)
    assert forced[-1].startswith("warning: generated (30 questions) disagrees with your "
                                 "questions (tau -1.00") and "objective_source=generated" in \
        forced[-1]


def test_the_verdicts_thresholds():
    spread = lambda m: figures.Spread(m, m, m, 1, 1)  # noqa: E731
    assert figures.verdict(11, spread(1.0), 1.0, 1, 5)[0] == figures.NO_SIGNAL
    assert figures.verdict(12, spread(0.49), 1.0, 1, 5)[0] == figures.NO_SIGNAL
    assert figures.verdict(12, spread(0.5), 0.0, 5, 5)[0] == figures.NO_SIGNAL
    assert figures.verdict(12, spread(0.5), 0.1, 3, 5) == (
        figures.DECIDES, "the best told apart from 2 of 4 others")
    assert figures.verdict(12, spread(0.5), 0.1, 4, 5)[0] == figures.TIES


def test_the_same_seed_gives_the_same_certificate():
    t = tables(matrix(8, n=24), matrix(9, n=50))
    one = sources.to_json(sources.certify(t, "nDCG@10"), {})
    assert one == sources.to_json(sources.certify(t, "nDCG@10"), {})


def test_the_json_artifact_and_the_metrics():
    t = tables(matrix(10, n=24), matrix(11, n=60))
    cert = sources.certify(t, "nDCG@10", "hand")
    doc = json.loads(json.dumps(sources.to_json(cert, {"run0": "default"}), allow_nan=False))
    assert set(doc) == {"schema", "objective", "measures", "objective_source", "correction",
                        "alpha", "settings", "labels", "sources", "pairs", "lines"}
    assert doc["measures"] == ["nDCG@10", "RR@10"] and doc["labels"]["run0"] == "default"
    assert doc["settings"] == {"splits": 200, "resamples": 1000, "seed": 0,
                               "min_questions": 12, "split_half_floor": 0.5,
                               "decides_share": 0.5}
    hand = doc["sources"]["hand"]
    assert hand["questions"] == 24 and hand["kinds"] == {"factual": 16, "semantic": 8}
    assert hand["verdict"] in (figures.DECIDES, figures.TIES, figures.NO_SIGNAL)
    m = hand["measures"]["nDCG@10"]
    assert set(m) == {"scored", "split_half", "pairs", "told_apart", "power", "best", "tied",
                      "means"}
    assert set(m["split_half"]) == {"median", "p05", "p95", "defined", "total"}
    assert m["pairs"] == 10 and hand["measures"]["RR@10"]["pairs"] is None  # objective only
    assert m["means"]["run2"] == pytest.approx(matrix(10, n=24)[2].mean())
    [pair] = doc["pairs"]
    assert set(pair["measures"]["nDCG@10"]) == {"kendall_tau", "low", "high", "defined",
                                                "total", "inversions", "winner_agrees",
                                                "tied_agree"}
    metrics = sources.metrics(cert)
    assert all("@" not in k for k in metrics)
    assert metrics["certificate.hand.questions"] == 24
    assert metrics["certificate.hand.kind.semantic"] == 8
    assert metrics["certificate.hand_vs_generated.ndcg_at_10.kendall_tau"] == \
        pair["measures"]["nDCG@10"]["kendall_tau"]
    assert metrics["certificate.hand.ndcg_at_10.split_half_median"] == m["split_half"]["median"]
    assert metrics["certificate.hand.verdict"] == figures.VERDICT_CODES[hand["verdict"]]


def test_coverage_counts_documents_and_sections_holding_evidence():
    one = Document("a.md", "A", "# A\n\nintro text\n\n## B\n\n## C\n\ncee text\n\n## D\n\ndee\n")
    two = Document("b.md", "B", "plain text, no heading")
    start = one.text.index("cee")
    queries = [Query("q1", "?", evidence=(Span("a.md", start, start + 3),)),
               Query("q2", "?")]
    got = figures.coverage([one, two], queries)
    # sections with text of their own: A, C, D (B holds only its subsection's heading)
    assert (got.docs, got.docs_total, got.sections, got.sections_total) == (1, 2, 1, 3)
    flat = figures.coverage([two], [Query("q", "?", evidence=(Span("b.md", 0, 5),))])
    assert flat.sections is None and "no markdown headings" in flat.note
    assert figures.coverage([one], [Query("q", "?")]).docs is None


def test_a_failed_certificate_is_tagged_and_said_in_one_line(monkeypatch):
    """The sweep's choice is logged before the certificate: a certificate that fails must not
    take the sweep's printed lines with it."""
    from ragexp.decide import selection

    logged = {}
    monkeypatch.setattr(selection.tracking, "log_batch",
                        lambda run, tags=None, **_: logged.update(tags or {}))
    monkeypatch.setattr(sources, "corpus_of", lambda run: None)
    monkeypatch.setattr(sources, "certify", lambda *a, **k: 1 / 0)
    lines = selection._log_certificate("p", tables(matrix(1)), {}, "nDCG@10", "holm", "hand")
    assert lines == ["no certificate of the question sets: ZeroDivisionError: division by zero"]
    assert logged["ragexp.certificate_error"] == "ZeroDivisionError: division by zero"


def test_tied_winners_agree_and_no_signal_checks_nothing():
    """Two sources whose top means tie exactly agree on the winner whatever the tie-break; a
    hand set without signal flags nothing and says so, and a deciding set without signal is
    said to decide nothing."""
    rng = np.random.default_rng(3)
    hand = rng.random((4, 30))
    gen = np.vstack([np.ones(30), np.ones(30), np.zeros(30), np.zeros(30)])
    cert = sources.certify(tables(hand, gen), "nDCG@10")
    pair = cert.pairs[0]
    top_hand = max(range(4), key=lambda i: hand[i].mean())
    assert pair.measures["nDCG@10"].winner_agrees == (top_hand in (0, 1))
    noise = rng.random((4, 8))  # 8 questions: not enough signal
    weak = sources.certify(tables(noise, gen[:, :8][::-1]), "nDCG@10")
    assert weak.sources["hand"].verdict == figures.NO_SIGNAL
    assert weak.pairs[0].disagrees is None and not weak.flagged()
    shown = sources.lines(weak, {})
    assert shown[-2].startswith("no set checked against your questions: they have not enough "
                                "signal (8 question(s), fewer than 12)")
    assert shown[-1].startswith("warning: the deciding questions (hand) have not enough signal")


def test_many_sources_print_only_their_pairs_with_yours():
    """A calibration grid's sets (here 4 sources: 6 pairs) print the pairs with the hand
    questions, and say where the rest are."""
    rng = np.random.default_rng(5)
    hand = rng.random((4, 20))
    t = tables(hand)
    for name in ("g1", "g2", "g3"):
        extra = rng.random((4, 20))
        for i, r in enumerate(t):
            t[r] = pd.concat([t[r], pd.DataFrame(
                [{"id": f"{name}{j:03d}", "kind": "factual", "source": name,
                  "ndcg_at_10": v, "rr_at_10": v} for j, v in enumerate(extra[i])])])
    cert = sources.certify(t, "nDCG@10")
    assert len(cert.pairs) == 6
    shown = sources.lines(cert, {})
    pairs = [line for line in shown if " vs " in line and ": tau " in line]
    assert [line.split(":")[0] for line in pairs] == ["hand vs g1", "hand vs g2", "hand vs g3"]
    assert "(the other 3 pairs of sources: the sweep's certificate.json and certificate.* " \
           "metrics)" in shown
