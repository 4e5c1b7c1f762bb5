"""A project's own config folder (``--config-dir DIR``) reaches every command that composes a
run's config outside the runner, in the runner's (Hydra's) order: the project's files after the
shipped ones, so a shipped file wins on a name both have. A trial: ``ragexp embed`` and
``ragexp questions generate`` had no ``--config-dir``, so a project's dataset could neither be
embedded ahead of its sweep nor have questions drawn from it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_runs import cli_env, run_app
from hydra.errors import HydraException
from omegaconf import OmegaConf

from ragexp.cli.main import main as cli
from ragexp.config import compose, schema
from ragexp.errors import InvalidValue, MissingInput

schema.register()
HANDBOOK_COPY = """defaults:
  - markdown_schema
  - _self_

name: mine
corpus_dir: ${ragexp.example:handbook/corpus}
questions: ${ragexp.example:handbook/golden}
"""
# the shipped ablation/bm25.yaml is BM25 alone; the project's own of that name adds k=7, which
# Hydra's --config-dir does not let win: the shipped file comes first, so selecting it is refused
OWN_BM25 = """# @package _global_
defaults:
  - override /retriever: bm25
ablation: bm25
k: 7
"""
DOCS = {"kettles.md": "# Kettles\n\nThe copper kettle in the east kitchen is descaled every "
        "Thursday with citric acid, and the descaling log hangs beside the sink.\n\n"
        "## Spares\n\nTwo spare kettle lids sit in the blue crate under the bench.\n",
        "ladders.md": "# Ladders\n\nThe aluminium stepladder is inspected each quarter by the "
        "facilities team, who sign the tag fixed to its left rail.\n\n## Storage\n\nLadders "
        "are stored flat in the basement corridor, never leaning on the boiler.\n"}


def _project(tmp_path):
    conf = tmp_path / "conf"
    (conf / "dataset").mkdir(parents=True)
    (conf / "ablation").mkdir()
    (conf / "dataset" / "mine.yaml").write_text(HANDBOOK_COPY)
    (conf / "ablation" / "bm25.yaml").write_text(OWN_BM25)
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    (conf / "dataset" / "own.yaml").write_text(
        HANDBOOK_COPY.replace("name: mine", "name: own").replace(
            "${ragexp.example:handbook/corpus}", str(docs)))
    return conf


def test_the_project_adds_options_and_the_shipped_ones_win_on_a_name(tmp_path):
    conf = _project(tmp_path)
    assert compose.compose("config", ["dataset=mine"], conf).dataset.name == "mine"
    with pytest.raises(HydraException, match="mine"):
        compose.compose("config", ["dataset=mine"])
    bm25 = compose.compose("config", ["+ablation=bm25"])
    assert bm25.k == 100 and bm25.retriever.name == "bm25"
    with pytest.raises(InvalidValue) as hidden:  # the project's own would never be read
        compose.compose("config", ["+ablation=bm25"], conf)
    assert str(hidden.value) == (
        f"invalid config:\n  ablation=bm25: {conf / 'ablation' / 'bm25.yaml'} is never read: "
        f"ragexp ships an option 'bm25' in its ablation group and Hydra reads the shipped "
        f"config folder first, so this run would measure the shipped one; rename yours (e.g. "
        f"ablation/my_bm25.yaml) and select it (ablation=my_bm25)")
    from ragexp.cli import tables

    assert tables.ablation_files(conf)["bm25"] == tables.ABLATIONS / "bm25.yaml"
    with pytest.raises(MissingInput, match="--config-dir .*nowhere: no such folder"):
        compose.compose("config", [], tmp_path / "nowhere")
    with pytest.raises(MissingInput, match="--config-dir .*mine.yaml: a file, not a folder"):
        compose.compose("config", [], conf / "dataset" / "mine.yaml")


@pytest.mark.slow
def test_it_composes_what_the_runner_composes_with_config_dir(tmp_path):
    """``python -m ragexp --config-dir conf ... --cfg job`` prints the config the runner would
    run: the same as ``config.compose`` gives."""
    conf = _project(tmp_path)
    overrides = ["retriever=bm25", "dataset=mine", "embedder=hash"]
    proc = subprocess.run([sys.executable, "-m", "ragexp", "--config-dir", str(conf), *overrides,
                           "--cfg", "job"], cwd=tmp_path, env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    runner = OmegaConf.to_container(OmegaConf.create(proc.stdout))
    ours = OmegaConf.to_container(compose.compose("config", overrides, conf))
    assert runner == ours and runner["k"] == 100 and runner["dataset"]["name"] == "mine"


def test_embed_finds_the_project_s_dataset(tmp_path, capsys):
    conf = _project(tmp_path)
    overrides = ["dataset=mine", "embedder=hash", f"cache_dir={tmp_path / 'cache'}",
                 "progress=false"]
    assert cli(["embed", "--config-dir", str(conf), *overrides]) == 0
    line = capsys.readouterr().out
    passages = int(re.search(r"(\d+) passages, (\d+) questions; embedded (\d+)", line)[1])
    assert passages > 0, line
    assert cli(["embed", *overrides]) == 2  # without the folder: no dataset option "mine"
    assert capsys.readouterr().err == ("error: In 'config': Could not find 'dataset/mine'; "
                                       "options in 'dataset': beir, handbook, markdown\n")
    assert cli(["embed", "--config-dir", str(tmp_path / "nowhere"), *overrides]) == 2
    assert "--config-dir" in capsys.readouterr().err


def test_questions_are_drawn_from_the_project_s_own_documents(tmp_path, capsys):
    conf = _project(tmp_path)
    out = tmp_path / "q.jsonl"
    assert cli(["questions", "generate", "--config-dir", str(conf), "--n", "3", "--out",
                str(out), "dataset=own", "progress=false"]) == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3
    text = json.dumps(records)
    assert ("kettles.md" in text or "ladders.md" in text) and "brindle" not in text.lower()


def test_an_option_of_the_project_without_its_folder_names_the_folder(tmp_path, capsys,
                                                                       monkeypatch):
    """A trial ran ``ragexp questions generate dataset=mine`` in its ``ragexp init`` project
    and read Hydra's search path in one long line; the runner and ``embed`` said nothing of
    the project's ``conf/dataset/mine.yaml`` either."""
    from ragexp.config import validation

    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    expected = ("Could not find 'dataset/mine'; options in 'dataset': beir, handbook, markdown "
                "(conf/dataset/mine.yaml is here: pass --config-dir conf)")
    assert cli(["questions", "generate", "--n", "3", "--out", "q.jsonl", "dataset=mine"]) == 2
    assert capsys.readouterr().err == f"error: In 'questions': {expected}\n"
    assert cli(["embed", "dataset=mine"]) == 2
    assert capsys.readouterr().err == f"error: In 'config': {expected}\n"
    with pytest.raises(HydraException) as refused:  # the runner's one line is this function's
        compose.compose("config", ["dataset=mine"])
    assert validation.composition_error(refused.value) == f"In 'config': {expected}"
    assert not (tmp_path / "q.jsonl").exists()


def test_the_commands_name_a_project_file_the_shipped_one_hides(tmp_path, caplog):
    """``embed``, ``questions generate`` and the tables compose with ``--config-dir`` outside
    the runner: they warned of no hidden file (the runner does: the test below)."""
    conf = _project(tmp_path)
    with caplog.at_level("WARNING", logger="ragexp"):
        compose.compose("config", [], conf)
        compose.compose("config", ["dataset=mine"], conf)  # the same folder: said once
    assert [r.getMessage() for r in caplog.records] == [
        f"{conf / 'ablation' / 'bm25.yaml'} is not used: the shipped ablation/bm25.yaml has "
        f"that name and Hydra reads the shipped config folder first; give yours a name of its "
        f"own"]


def test_embed_refuses_a_stage_s_bad_input_in_one_line(tmp_path, capsys):
    """A trial: a question whose quote is not in its document, and a precomputed folder with a
    NaN row, ended ``ragexp embed`` in Hydra's InstantiationException traceback, exit 1."""
    import numpy as np

    quiet = [f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "question": "where?", "kind": "factual", "answer": "x", '
                   '"evidence": [{"doc": "kettles.md", "quote": "this text is not there"}]}\n')
    _project(tmp_path)
    assert cli(["embed", "embedder=hash", "dataset=markdown",
                f"dataset.corpus_dir={tmp_path / 'docs'}", f"dataset.questions={bad}",
                *quiet]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "quote not found" in err and "Traceback" not in err
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    rows = np.eye(2, 8, dtype=np.float32)
    rows[1, 0] = np.nan
    np.save(vectors / "passages.npy", rows)
    (vectors / "passages.txt").write_text("kettles.md\nladders.md\n")
    np.save(vectors / "queries.npy", np.eye(1, 8, dtype=np.float32))
    (vectors / "queries.txt").write_text("q1\n")
    good = tmp_path / "good.jsonl"
    good.write_text(bad.read_text().replace("this text is not there", "descaled every Thursday"))
    assert cli(["embed", "embedder=precomputed", f"embedder.path={vectors}", "chunking=none",
                "dataset=markdown", f"dataset.corpus_dir={tmp_path / 'docs'}",
                f"dataset.questions={good}", *quiet]) == 2
    err = capsys.readouterr().err
    assert "NaN or inf in row 1 (id 'ladders.md')" in err and "Traceback" not in err


def test_a_project_file_the_shipped_one_hides_is_named_once(tmp_path, caplog):
    """A trial: a project's ablation/bm25.yaml ran as the shipped BM25, without a word."""
    from ragexp.run import app

    conf = _project(tmp_path)
    sources = (("hydra", "pkg", "hydra.conf"), ("main", "file", app.CONF_DIR),
               ("command-line", "file", str(conf)), ("schema", "structured", ""))
    with caplog.at_level("WARNING", logger="ragexp"):
        lines = compose.warn_shadowed(sources)
        compose.warn_shadowed(sources)  # the next job of the sweep: no second warning
    assert lines == [f"{conf / 'ablation' / 'bm25.yaml'} is not used: the shipped ablation/"
                     f"bm25.yaml has that name and Hydra reads the shipped config folder first; "
                     f"give yours a name of its own"]
    assert [r.getMessage() for r in caplog.records] == lines


@pytest.mark.slow
def test_a_run_or_sweep_selecting_a_project_option_the_shipped_one_hides_runs_nothing(tmp_path):
    """``ragexp init handbook``'s project ran ``dataset=handbook`` on the shipped handbook (22
    documents, 53 questions), exit 0, with one warning among the log lines."""
    conf = _project(tmp_path)
    (conf / "dataset" / "handbook.yaml").write_text(
        (conf / "dataset" / "own.yaml").read_text().replace("name: own", "name: handbook"))
    hidden = f"dataset=handbook: {conf / 'dataset' / 'handbook.yaml'} is never read"
    for args in (["dataset=handbook"], ["-m", "dataset=handbook", "k=100,200"]):
        proc = run_app(tmp_path, "--config-dir", str(conf), *args, "embedder=hash",
                       f"hydra.sweep.dir={tmp_path / 'm'}", f"hydra.run.dir={tmp_path / 'r'}",
                       cwd=tmp_path, migrated=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert hidden in proc.stderr and "rename yours (e.g. dataset/my_handbook.yaml)" in \
            proc.stderr and proc.stderr.rstrip().endswith("nothing was run")
        assert not list(tmp_path.glob("**/mlflow.db"))
    assert "job #1: dataset=handbook k=200 embedder=hash" in proc.stderr  # every job said


def test_a_hidden_project_file_the_run_does_not_select_or_that_copies_the_shipped_one_runs():
    """Only a hidden file the config selects and whose YAML differs from the shipped one's is
    refused: a copy (byte for byte, or with CRLF line ends and a comment) changes nothing, an
    unselected one is the warning's."""
    from ragexp.data import shipped

    shipped_conf = shipped.conf_dir()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp)
        (conf / "dataset").mkdir()
        same = Path(shipped_conf) / "dataset" / "handbook.yaml"
        (conf / "dataset" / "handbook.yaml").write_bytes(same.read_bytes())
        (conf / "dataset" / "beir.yaml").write_text((  # one value of its own
            Path(shipped_conf) / "dataset" / "beir.yaml").read_text() + "path: my_beir\n")
        sources = [("command-line", "file", str(conf))]
        assert compose.shadowed_choices(sources, {"dataset": "handbook"}) == []
        (conf / "dataset" / "handbook.yaml").write_bytes(  # CRLF and a comment: the same YAML
            b"# my copy\r\n" + same.read_bytes().replace(b"\n", b"\r\n"))
        assert compose.shadowed_choices(sources, {"dataset": "handbook"}) == []
        assert compose.shadowed_choices(sources, {"dataset": "markdown"}) == []
        assert [p.split(":")[0] for p in compose.shadowed_choices(
            sources, {"dataset": "beir"})] == ["dataset=beir"]
        assert compose.compose("config", ["embedder=hash"], conf).dataset.name
