"""``ragexp init`` and the sweeps a starter runs (#19 kinds 7 and 11): a wrong folder argument
is one line and exit 2, the starter names its baseline so its first sweep tests the other
ablation against it, and a sweep that would launch no job (a glob matching no ablation) says
which pattern matched nothing and which ablations exist, and creates nothing."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml
from cli_runs import run_app, run_here
from test_p_format import P_CELL
from workspaces import migrated_store, search_runs, store_uri, tracking_store

from ragexp.cli import init as starter
from ragexp.cli import main as cli


def test_init_into_an_existing_file_is_one_line_and_exit_2(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert cli.main(["init", str(notes)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"error: ragexp init {notes}: {notes} is a file, not a folder; give a "
                           f"new or empty folder")
    assert notes.read_text() == "mine\n"


def test_init_below_a_file_names_the_file_and_writes_nothing(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert cli.main(["init", str(notes / "project")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{notes} is a file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_init_that_would_overwrite_exits_2_and_writes_nothing(tmp_path, capsys):
    starter.init(tmp_path / "proj")
    questions = tmp_path / "proj" / "questions.jsonl"
    questions.write_text("mine\n")
    assert cli.main(["init", str(tmp_path / "proj")]) == 2
    assert "would overwrite" in capsys.readouterr().err
    assert questions.read_text() == "mine\n"


def test_the_starter_names_its_baseline_ablation(tmp_path):
    starter.init(tmp_path / "My Docs")
    folder = tmp_path / "My Docs" / "conf" / "ablation"
    ablations = {p.stem: yaml.safe_load(p.read_text()) for p in folder.glob("*.yaml")}
    assert set(ablations) == {"my_docs_baseline", "my_docs_hybrid"}
    # every ablation of the starter's sweep names the same baseline, and it is one of them
    assert {a["baseline"] for a in ablations.values()} == {"my_docs_baseline"}
    assert ablations["my_docs_baseline"]["ablation"] == "my_docs_baseline"


def ragexp_in(folder, *args: str) -> subprocess.CompletedProcess:
    """``python -m ragexp --config-dir conf ARGS`` run from ``folder`` (a starter), on the store
    there, in this process (``cli_runs.run_app``)."""
    return run_app(folder, "--config-dir", "conf", *args, cwd=folder, migrated=False)


@pytest.mark.slow
def test_a_glob_matching_no_ablation_names_it_lists_the_ablations_and_creates_nothing(tmp_path):
    """The docs' literal command in a starter whose folder is not called my-docs."""
    starter.init(tmp_path / "notes")
    proc = ragexp_in(tmp_path / "notes", "-m", "+ablation=glob(my_docs_*)")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line, tail) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the sweep would launch no job: +ablation=glob(my_docs_*) "
                           "matches nothing (the ablation options are: ")
    listed = line.split("options are: ")[1].rstrip(")").split(", ")
    assert {"notes_baseline", "notes_hybrid", "default", "bm25"} <= set(listed)
    assert not [n for n in listed if n.endswith("_schema")]
    assert tail == "nothing was run" and "Traceback" not in proc.stderr
    assert not (tmp_path / "notes" / "mlflow.db").exists()  # no parent run, no store


@pytest.mark.slow
def test_an_empty_glob_on_any_group_stops_the_sweep(tmp_path):
    proc = run_app(tmp_path, "-m", "retriever=glob(nothing*)", "embedder=hash",
                   f"hydra.sweep.dir={tmp_path / 'multirun'}", migrated=False)
    assert proc.returncode == 2
    assert ("retriever=glob(nothing*) matches nothing (the retriever options are: bm25, dense, "
            "hybrid, trec_run)") in proc.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.slow
def test_the_starter_s_first_sweep_logs_vs_baseline_metrics(tmp_path):
    """``ragexp init --example`` then its printed sweep, end to end (the hash embedder for
    speed): the hybrid job is tested against the baseline job."""
    assert cli.main(["init", "--example", str(tmp_path / "handbook_docs")]) == 0
    migrated_store(tmp_path / "handbook_docs")  # the store the sweep records into
    proc = ragexp_in(tmp_path / "handbook_docs", "-m", "+ablation=glob(handbook_docs_*)",
                     "embedder=hash")
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = search_runs(store_uri(tmp_path / "handbook_docs"),
                     experiment_names=["ragexp-handbook_docs"])
    children = df.dropna(subset=["tags.ragexp.config_hash"]).set_index("tags.ragexp.ablation")
    assert sorted(children.index) == ["handbook_docs_baseline", "handbook_docs_hybrid"]
    compared = [c for c in df.columns if c.startswith("metrics.vs_baseline.")]
    assert "metrics.vs_baseline.ndcg_at_10.delta" in compared
    hybrid, baseline = children.loc["handbook_docs_hybrid"], children.loc["handbook_docs_baseline"]
    # the delta is the hybrid's nDCG@10 minus the baseline's, on the same questions
    assert hybrid["metrics.vs_baseline.ndcg_at_10.delta"] == pytest.approx(
        hybrid["metrics.ndcg_at_10"] - baseline["metrics.ndcg_at_10"], abs=1e-9)

    # `ragexp report` in the project: its experiment and its own ablations, without flags
    def report(*args):
        with tracking_store(tmp_path / "handbook_docs"):
            return run_here(cli.main, ["report", *args], cwd=tmp_path / "handbook_docs")

    shown = report("--overrides", "embedder=hash")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Experiment `ragexp-handbook_docs`, 2 ablations" in shown.stdout
    row = next(ln for ln in shown.stdout.splitlines() if ln.startswith("| handbook_docs_hybrid"))
    assert f"| {hybrid['metrics.ndcg_at_10']:.3f} |" in row  # the run's own nDCG@10
    assert "**Against `handbook_docs_baseline`**" in shown.stdout  # the config key baseline
    assert "Not shown" not in shown.stdout  # the 21 shipped ablations are not this project's
    for block in shown.stdout.split("\n\n"):  # every p printed alike (significance.format_p)
        table = [[c.strip() for c in ln.split("|")[1:-1]] for ln in block.splitlines()
                 if ln.startswith("| ")]
        p_cols = [i for i, h in enumerate(table[0] if table else [])
                  if h in ("p", "p_adj") or h.startswith(("p(", "p_adj("))]
        assert all(P_CELL.fullmatch(r[i]) for r in table[2:] for i in p_cols
                   if r[i] not in ("-", "baseline")), block
    unmatched = report()  # without the sweep's embedder=hash: no exact config; one line
    assert unmatched.returncode == 2 and "Traceback" not in unmatched.stderr
    (line,) = [ln for ln in unmatched.stderr.splitlines() if " mlflow." not in ln]
    assert "in experiment 'ragexp-handbook_docs'" in line
    recorded = line.split("the runs were launched with ")[1]
    assert "+ablation=handbook_docs_baseline" in recorded and "embedder=hash" in recorded, line


@pytest.mark.slow
def test_a_fresh_starter_with_no_documents_is_refused_before_any_run(tmp_path):
    """``ragexp init`` leaves docs/ empty: the first run says so at composition, exit 2, and
    creates no store (it used to create a run, then fail with MissingInput)."""
    starter.init(tmp_path / "notes")
    proc = ragexp_in(tmp_path / "notes", "dataset=notes", "embedder=hash")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "dataset.corpus_dir=docs holds no markdown documents (*.md, *.markdown)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "notes" / "mlruns").exists()


def refusal(tmp_path, capsys, name: str) -> str:
    """``ragexp init TMP/NAME`` through the CLI's main: exit 2, one line, nothing written;
    returns the line."""
    assert cli.main(["init", str(tmp_path / name)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert not (tmp_path / name).exists()
    return line


@pytest.mark.parametrize(("name", "clash"), [
    ("handbook", "ragexp ships the dataset option handbook"),
    ("markdown", "ragexp ships the dataset option markdown"),
    ("beir", "ragexp ships the dataset option beir"),
    ("markdown_schema", "dataset/markdown_schema is the structured schema"),
    ("hash", "ragexp ships the ablation option hash_hybrid"),
    ("hybrid", "+ablation=glob(hybrid_*) would also run the shipped ablations hybrid_combmnz"),
])
def test_init_refuses_a_name_that_meets_a_shipped_option(tmp_path, capsys, name, clash):
    """A starter named as a shipped option was never used: Hydra reads the shipped folder
    first, and `init handbook`'s runs measured the shipped handbook (22 documents), exit 0."""
    line = refusal(tmp_path, capsys, name)
    assert line.startswith(f"error: ragexp init {tmp_path / name}: cannot name the project "
                           f"{name!r}")
    assert clash in line
    assert line.endswith(f"try ragexp init {tmp_path / (name + '_docs')}")


@pytest.mark.parametrize(("folder", "read_as"), [
    ("123", "the int 123 in a command-line override"),
    ("true", "the bool True in a command-line override"),
    ("1e3", "the float 1000.0 in a command-line override"),
    ("null", "null in a command-line override"),
    (".inf", "the float inf in a command-line override"),  # the name is inf
    ("1_000", "the int 1000 in a command-line override"),
    ("0x1f", "the int 31 in a YAML config file"),
    ("On", "the bool True in a YAML config file"),  # the name is on
])
def test_init_refuses_a_name_hydra_or_yaml_reads_as_no_string(tmp_path, capsys, folder, read_as):
    """``dataset=123`` crashed Hydra ("Config group override must be a string or a list. Got
    int") and the starter's defaults list (``override /dataset: 123``) its sweep."""
    line = refusal(tmp_path, capsys, folder)
    assert f"reads as {read_as}, not as a name" in line
    assert "lowercase letters, digits and _" in line  # what names are accepted


@pytest.mark.slow
def test_a_name_init_suggests_is_accepted_and_its_printed_commands_compose(tmp_path, capsys):
    from ragexp.config import schema
    from ragexp.config.compose import compose

    schema.register()
    suggested = refusal(tmp_path, capsys, "1e3").rsplit("try ragexp init ", 1)[1]
    assert cli.main(["init", suggested]) == 0
    printed = capsys.readouterr().out
    assert "dataset=1e3_docs " in printed and "glob(1e3_docs_*)" in printed
    conf = tmp_path / "1e3_docs" / "conf"
    assert compose("config", ["dataset=1e3_docs"], conf).dataset.name == "1e3_docs"
    for ablation in ("1e3_docs_baseline", "1e3_docs_hybrid"):
        cfg = compose("config", [f"+ablation={ablation}"], conf)
        assert (cfg.dataset.name, cfg.ablation, cfg.baseline) == (
            "1e3_docs", ablation, "1e3_docs_baseline")
    # and the runner itself composes the printed one-run command
    proc = ragexp_in(tmp_path / "1e3_docs", "--cfg", "job", "dataset=1e3_docs")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "name: 1e3_docs" in proc.stdout and "corpus_dir: docs" in proc.stdout


def test_shipped_options_are_read_from_the_shipped_config_folder():
    assert {"handbook", "markdown", "beir", "markdown_schema"} <= starter.shipped_options(
        "dataset")
    assert {"bm25", "hybrid", "hash_hybrid"} <= starter.shipped_options("ablation")


@pytest.mark.parametrize(("folder", "name"), [
    ("café", "cafe"), ("Über Docs", "uber_docs"), ("Straße", "strasse"),
    ("naïve notes (v2)", "naive_notes_v2")])
def test_init_folds_accents_to_ascii_and_says_the_name_it_made(tmp_path, capsys, folder, name):
    """``init café`` named the project ``caf``: every non-ASCII letter became ``_`` and was
    stripped. Accents fold to their letter (NFKD without combining marks; ß case-folds to
    ss), and the output says the name differs from the folder's."""
    assert cli.main(["init", str(tmp_path / folder)]) == 0
    out = capsys.readouterr().out
    dataset = tmp_path / folder / "conf" / "dataset" / f"{name}.yaml"
    assert yaml.safe_load(dataset.read_text())["name"] == name
    assert f"project name: {name} (from the folder's name {folder!r}:" in out
    assert f"dataset={name} " in out and f"glob({name}_*)" in out


def test_init_says_nothing_of_the_documented_lowercase_and_underscore_rule(tmp_path, capsys):
    assert cli.main(["init", str(tmp_path / "My Docs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the folder is quoted as a shell reads it: `cd My Docs` went to a folder "My"
    assert lines[1] == f"Next, in {shlex.quote(str(tmp_path / 'My Docs'))}:"
    assert not any(line.startswith("project name:") for line in lines)


@pytest.mark.parametrize("folder", ["文档", "★★", "---", "ドキュメント", "文档 笔记"])
def test_init_refuses_a_folder_name_with_nothing_ascii_and_asks_for_name(tmp_path, capsys,
                                                                         folder):
    """It wrote a project named ``mydocs`` (or, for ``---``, nothing better) whatever the
    folder: now one line, exit 2, nothing written, asking for --name."""
    line = refusal(tmp_path, capsys, folder)
    assert line == (f"error: ragexp init {tmp_path / folder}: the folder's name {folder!r} has no "
                    f"letter or digit that folds to ASCII, so it cannot name the project's "
                    f"config options (dataset=NAME, +ablation=NAME_baseline); give a name made "
                    f"of {starter.ACCEPTED} with --name, e.g. ragexp init "
                    f"{shlex.quote(str(tmp_path / folder))} --name my_docs")


def test_name_names_the_project_in_a_folder_of_any_name(tmp_path, capsys):
    folder = tmp_path / "文档"
    assert cli.main(["init", str(folder), "--name", "my_docs"]) == 0
    out = capsys.readouterr().out
    assert "project name:" not in out and "dataset=my_docs " in out
    assert sorted(p.name for p in (folder / "conf" / "ablation").iterdir()) == [
        "my_docs_baseline.yaml", "my_docs_hybrid.yaml"]
    # --name is folded and checked as a folder's name is
    assert cli.main(["init", str(tmp_path / "b"), "--name", "Café"]) == 0
    assert "project name: cafe (from --name 'Café':" in capsys.readouterr().out
    assert cli.main(["init", str(tmp_path / "c"), "--name", "★"]) == 2
    assert "--name '★' has no letter or digit" in capsys.readouterr().err
    assert cli.main(["init", str(tmp_path / "d"), "--name", "hybrid"]) == 2
    err = capsys.readouterr().err.strip()
    assert "(from --name)" in err and err.endswith(f"try ragexp init {tmp_path / 'd'} --name "
                                                   f"hybrid_docs")
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
