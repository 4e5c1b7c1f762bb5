"""Ids are strings everywhere: per-question tables read back by ``compare`` keep ``1``, ``01`` and
``007`` apart (and ``NA``, ``nan``, ``True`` as written), so the paired test pairs each question
with itself. The example of issue #8 end to end through a temporary MLflow store."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragexp.data.readers import InputError, read_csv
from ragexp.decide import compare
from ragexp.tracking import store as tracking

# Per-question reciprocal rank and nDCG of a run and its baseline, by question id.
RUN = {"1": 1.0, "01": 0.5, "007": 0.5}
BASE = {"1": 0.5, "01": 0.0, "007": 0.5}


def _table(values: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"id": list(values), "kind": ["factual"] * len(values),
                         "first_relevant_rank": [1] * len(values),
                         "rr_at_10": list(values.values()),
                         "ndcg_at_10": list(values.values()),
                         "top_item": ["0042"] * len(values), "answer": ["NA"] * len(values)})


@pytest.fixture(scope="module")
def log_table(module_mlflow_store):
    """``log(table) -> run_id``: a finished run holding ``table`` as its per_question.csv, in
    the module's store."""
    exp = tracking.ensure_experiment("ids")
    return _logger(exp, module_mlflow_store.folder)


def _logger(exp: str, tmp_path):
    def log(table: pd.DataFrame) -> str:
        c = tracking.client()
        run_id = c.create_run(exp).info.run_id
        path = tmp_path / run_id / "per_question.csv"
        path.parent.mkdir()
        table.to_csv(path, index=False)  # as app.log_artifacts writes it
        c.log_artifact(run_id, str(path))
        c.set_terminated(run_id, "FINISHED")
        return run_id

    return log


@pytest.mark.slow  # the MLflow store's schema takes ~20 s to create on a busy machine
def test_paired_test_pairs_1_01_007_with_themselves(log_table):
    run_id, base_id = log_table(_table(RUN)), log_table(_table(BASE))
    df = pd.DataFrame({"run_id": [run_id]})
    tests = compare.baseline_tests(df, base_id, measures=("RR@10",))[run_id]
    overall = next(t for t in tests if t.kind == "all")
    d = np.array([RUN[q] - BASE[q] for q in RUN])  # independent: one pair per question
    assert (overall.measure, overall.n) == ("RR@10", 3)
    tests = [overall]
    assert tests[0].mean_diff == pytest.approx(d.mean()) == pytest.approx(1 / 3)
    # What reading ids as numbers did: 1 and 01 both became 1, merged as a cross product.
    wrong = pd.read_csv(io.StringIO(_table(RUN).to_csv(index=False))).merge(
        pd.read_csv(io.StringIO(_table(BASE).to_csv(index=False))), on="id")
    assert len(wrong) == 5
    assert (wrong["rr_at_10_x"] - wrong["rr_at_10_y"]).mean() == pytest.approx(0.4)
    back = compare.per_question(run_id)
    assert list(back["id"]) == ["1", "01", "007"]
    assert list(back["top_item"]) == ["0042"] * 3 and list(back["answer"]) == ["NA"] * 3


@pytest.mark.slow
def test_repeated_question_in_a_table_is_refused_naming_the_run_and_lines(log_table):
    run_id = log_table(_table(RUN | {"1": 1.0}).pipe(lambda t: pd.concat([t, t.iloc[:1]])))
    with pytest.raises(InputError) as err:
        compare.per_question(run_id)
    assert str(err.value) == (f"per_question.csv of run {run_id}: 1 duplicate id(s): '1' at "
                              f"lines 2, 5")


ODD_IDS = st.sampled_from(["1", "01", "007", "1.0", "1e3", "NA", "N/A", "nan", "NaN", "null",
                           "None", "True", "false", "-0", "+1", " 1", "1 ", "#N/A", "inf"])


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(ODD_IDS | st.text(st.characters(blacklist_categories=("Cs",),
                                                    blacklist_characters="\0\r"), min_size=1)
                    .filter(lambda s: s.strip()), min_size=1, max_size=8, unique=True),
       values=st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=8, max_size=8),
       crlf=st.booleans())
def test_csv_ids_round_trip_exactly(tmp_path_factory, ids, values, crlf):
    table = pd.DataFrame({"id": ids, "kind": ["factual"] * len(ids),
                          "rr_at_10": values[:len(ids)]})
    path = tmp_path_factory.mktemp("t") / "per_question.csv"
    table.to_csv(path, index=False, lineterminator="\r\n" if crlf else "\n")
    back = read_csv(path, compare.TEXT_COLUMNS)
    assert list(back["id"]) == ids
    assert back["rr_at_10"].dtype == float
    np.testing.assert_array_equal(back["rr_at_10"].to_numpy(),
                                  np.array([np.nan if v is None else v for v in values[:len(ids)]]))


@pytest.mark.parametrize("text,message", [
    ("kind,reciprocal_rank\nfactual,1\n", "t.csv:1: no 'id' column (columns: 'kind, recipro"),
    ("id,kind\nq1,factual\n,factual\n", "t.csv:3: empty id"),
])
def test_csv_without_usable_ids_is_refused(tmp_path, text, message):
    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(InputError) as err:
        read_csv(tmp_path / "t.csv", ("id", "kind"))
    assert str(err.value).startswith(str(tmp_path / message))
