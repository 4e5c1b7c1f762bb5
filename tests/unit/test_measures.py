"""The measure registry: ir_measures names parse into measures whose keys map back to the same
names, unknown names and bad depths are refused with the values named, and families that the
random differential in test_metrics.py cannot reach (P@k on a short list) match trec_eval."""

from __future__ import annotations

import ir_measures
import pytest
from ir_measures import Qrel, ScoredDoc

from ragexp.evaluation import measures
from ragexp.evaluation.measures import (
    DEFAULT,
    FAMILIES,
    check_depth,
    from_key,
    of_run,
    parse,
    parse_all,
)


def test_default_is_todays_set_plus_r_at_100():
    assert [m.name for m in DEFAULT] == [
        "Success@1", "Success@3", "Success@5", "Success@10", "R@1", "R@3", "R@5", "R@10",
        "R@100", "RR@10", "nDCG@10"]
    assert [m.key for m in DEFAULT] == [
        "success_at_1", "success_at_3", "success_at_5", "success_at_10", "r_at_1", "r_at_3",
        "r_at_5", "r_at_10", "r_at_100", "rr_at_10", "ndcg_at_10"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("cutoff", [1, 10, 1000])
def test_names_print_back_and_keys_map_back(family, cutoff):
    m = parse(f"{family}@{cutoff}")
    assert m.name == f"{family}@{cutoff}" and m.cutoff == cutoff
    assert str(ir_measures.parse_measure(m.name)) == m.name  # the name is ir_measures' own
    assert "@" not in m.key and m.key == m.key.lower()
    back = from_key(m.key)
    assert (back.name, back.key, back.cutoff) == (m.name, m.key, m.cutoff)


@pytest.mark.parametrize("name, says", [
    ("MRR@10", "unknown measure 'MRR@10'"),
    ("ndcg@10", "did you mean nDCG@10"),
    ("nDCG", "give a cutoff"),
    ("nDCG@0", "cutoff must be >= 1"),
    ("nDCG@-1", "unknown measure"),
    ("nDCG(dcg=exp-log2)@10", "unknown measure"),
    ("", "unknown measure"),
])
def test_bad_names_are_refused_naming_the_known_families(name, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")) as err:
        parse(name)
    if "unknown" in says:
        for family in ("Success@k", "R@k", "P@k", "RR@k", "AP@k", "nDCG@k"):
            assert family in str(err.value)


def test_lists_refuse_duplicates_and_emptiness():
    with pytest.raises(ValueError, match="nDCG@10 listed more than once"):
        parse_all(["nDCG@10", "R@5", "nDCG@10"])
    with pytest.raises(ValueError, match="the list is empty"):
        parse_all([])
    assert [m.key for m in parse_all(" RR@10 ")] == ["rr_at_10"]


@pytest.mark.parametrize("k", [0, -1, 5, 9])
def test_depth_below_the_deepest_cutoff_is_refused_naming_both(k):
    ms = parse_all(["Success@1", "R@10", "nDCG@10"])
    with pytest.raises(ValueError) as err:
        check_depth(k, ms)
    assert f"k={k}" in str(err.value) and "10" in str(err.value)
    assert ("R@10" in str(err.value)) or ("nDCG@10" in str(err.value))


def test_depth_at_or_beyond_the_deepest_cutoff_passes():
    ms = parse_all(["Success@1", "R@10", "nDCG@10"])
    check_depth(10, ms)
    check_depth(1000, ms)
    with pytest.raises(ValueError, match="k=10 is below the deepest measure cutoff 100"):
        measures.resolve(["R@100"], 10)


def test_stage_reads_must_fit_the_ranking():
    measures.check_reads(10, {"answer.n_chunks": 10, "abstain.signal.top_k": 1})
    for n in (0, -1, 11):
        with pytest.raises(ValueError, match=f"answer.n_chunks={n} must be between 1 and "
                                             f"the ranking depth k=10"):
            measures.check_reads(10, {"answer.n_chunks": n})


def test_a_runs_measures_come_back_from_params_or_columns():
    names = ["nDCG@10", "RR@10", "R@100", "AP@20"]
    # MLflow stores a list param as its Python repr.
    assert [m.name for m in of_run({"measures": str(names)})] == names
    cols = ["id", "kind", "first_relevant_rank", "ndcg_at_10", "rr_at_10", "r_at_100",
            "ap_at_20", "abstain_signal", "refused", "top_item", "answered", "answer"]
    assert [m.name for m in of_run(columns=cols)] == names
    with pytest.raises(ValueError, match="names no measures"):
        of_run({}, ["id", "reciprocal_rank"])


def test_measure_functions_refuse_a_non_positive_cutoff():
    with pytest.raises(ValueError, match="cutoff must be >= 1"):
        measures.Measure("R@0", "r_at_0", FAMILIES["R"].fn, 0)


def _trec(ms, qrels, ranking):
    qrel_rows = [Qrel(q, d, g) for q, rel in qrels.items() for d, g in rel.items()]
    run_rows = [ScoredDoc(q, d, s) for q, sc in ranking.items() for d, s in sc.items()]
    out: dict = {}
    for m in ir_measures.pytrec_eval.iter_calc([ir_measures.parse_measure(x.name) for x in ms],
                                               qrel_rows, run_rows):
        out.setdefault(m.query_id, {})[str(m.measure)] = m.value
    return out


def test_short_rankings_match_trec_eval():
    # Lists shorter than the cutoff: P@k still divides by k, AP@k and R@k by the relevant count.
    from ragexp.evaluation.metrics import per_query

    ranking = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 1.0}}
    qrels = {"q1": {"a": 1, "c": 2, "z": 1}, "q2": {"x": 0, "y": 0}}
    ms = parse_all(["P@5", "P@20", "AP@10", "R@10", "Success@10", "nDCG@20", "RR@10"])
    ours = per_query(ranking, qrels, ms)
    ref = _trec(ms, qrels, ranking)
    for q in qrels:
        for m in ms:
            assert ours[q][m.key] == pytest.approx(ref[q][m.name], abs=1e-9), (q, m.name)
    assert ours["q1"]["p_at_5"] == pytest.approx(2 / 5)


# a key out of its own range is refused once, by its range (the depth rules skip it)
@pytest.mark.parametrize("overrides, says", [
    (["k=5"], "k=5 is below the deepest measure cutoff 100 (R@100)"),
    (["k=0"], "k=0 is out of range: must be >= 1"),
    (["k=-1"], "k=-1 is out of range: must be >= 1"),
    (["k=20", "measures=[nDCG@10,R@50]"], "k=20 is below the deepest measure cutoff 50"),
    (["measures=[nDCG@10,MRR@10]"], "unknown measure 'MRR@10'"),
    (["k=10", "measures=[nDCG@10]", "abstain.signal.top_k=20"],
     "abstain.signal.top_k=20 must be between 1 and the ranking depth k=10"),
    (["answer.n_chunks=0"], "answer.n_chunks=0 is out of range: must be >= 1"),
])
def test_the_entry_point_refuses_before_any_run_is_created(overrides, says, unmade_mlflow_store):
    from workspaces import compose_config

    from ragexp.run.app import run_logged

    db = unmade_mlflow_store.db
    cfg = compose_config("embedder=hash", *overrides)
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        run_logged(cfg)
    assert not db.exists()  # no experiment, no run: nothing was logged


@pytest.mark.parametrize("bad", ["measures=[AP]", "measures=[nDCG@10,MRR@10]"])
def test_a_measure_that_does_not_parse_is_reported_once_not_as_the_objective(bad):
    # it also printed "objective='nDCG@10': measures: unknown measure 'AP'"
    from workspaces import compose_config

    from ragexp.config import validation

    with pytest.raises(validation.ConfigRangeError) as err:
        validation.validate(compose_config("embedder=hash", bad))
    said = str(err.value)
    assert said.count("unknown measure") == 1 and "objective=" not in said


def test_an_objective_outside_the_measures_is_still_refused():
    from workspaces import compose_config

    from ragexp.config import validation

    with pytest.raises(validation.ConfigRangeError, match="objective='AP@10'"):
        validation.validate(compose_config("embedder=hash", "objective=AP@10"))
