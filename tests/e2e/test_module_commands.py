"""``python -m ragexp COMMAND ...`` runs ``ragexp COMMAND ...`` (a trial: ``python -m ragexp
embed ...`` was read as a Hydra override, "Error parsing override 'embed' missing EQUAL");
anything else is still Hydra's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_runs import cli_env

from ragexp.cli import main as cli


def test_only_ragexp_s_command_names_are_commands():
    assert all(cli.is_command(w) for w in ("embed", "compare", "report", "ask", "questions"))
    for word in ("embedder=hash", "-m", "--multirun", "+ablation=bm25", "bogus", "Embed",
                 "embed.shard=1"):
        assert not cli.is_command(word), word


def module(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=tmp_path,
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)


def test_python_m_ragexp_embed_is_the_embed_command(tmp_path):
    shown = module(tmp_path, "embed", "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: ragexp embed")
    refused = module(tmp_path, "embed", "--shard", "3/2")  # the command's own check, exit 2
    assert refused.returncode == 2 and "override" not in refused.stderr
    assert refused.stderr.startswith("error: ") and "--shard" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_bare_word_that_is_no_command_is_still_hydra_s(tmp_path):
    proc = module(tmp_path, "bogus")
    assert proc.returncode == 2 and "Error parsing override 'bogus'" in proc.stderr


def test_version_is_ragexps_from_the_script_and_the_module(tmp_path, capsys):
    """A trial: ``ragexp --version`` was a usage error and ``python -m ragexp --version``
    printed Hydra's version."""
    from ragexp import __version__

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"ragexp {__version__}\n"
    proc = module(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stdout == f"ragexp {__version__}\n", proc.stderr


def test_a_misspelt_command_says_which_was_meant(tmp_path):
    assert cli.near_command("compar") == "compare" and cli.near_command("promte") == "promote"
    assert cli.near_command("compare") is None and cli.near_command("embedder=hash") is None
    for option in ("--config-dir", "-cd", "--multirun", "--cfg"):  # Hydra's options
        assert cli.near_command(option) is None, option
    proc = module(tmp_path, "compar", "--runs", "x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("error: no command 'compar' (did you mean 'compare'? "
                                   "`ragexp --help` lists them); an override is key=value")


def test_help_is_ragexp_s_around_hydra_s_lists(tmp_path):
    """A trial: ``python -m ragexp --help`` printed Hydra's generic words ("Powered by Hydra",
    "Use --hydra-help to view Hydra specific help") and nothing on what ragexp runs or where its
    other commands are. The groups and the composed config Hydra lists stay."""
    proc = module(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("ragexp: one retrieval configuration evaluated on labelled questions")
    assert "Powered by Hydra" not in out
    assert "ragexp --help lists them" in out and "python -m ragexp --hydra-help" in out
    groups = out[out.index("== Configuration groups =="):out.index("== Config ==")]
    for line in ("embedder: ", "retriever: ", "chunking: ", "index: "):
        assert f"\n{line}" in groups, line
    assert "\nembedder:\n" in out[out.index("== Config =="):]  # the composed config follows
    assert "ragexp init DIR" in out
    script = subprocess.run([sys.executable, "-m", "ragexp.cli.main", "--help"], cwd=tmp_path,
                            env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert script.returncode == 0 and "python -m ragexp" in script.stdout
    assert "``" not in script.stdout  # docstring markup, not help text


@pytest.mark.parametrize("args", [("--config-dir", "nosuch"), ("-cd", "nosuch"),
                                  ("--config-dir=nosuch",)])
def test_a_config_dir_that_is_no_folder_is_one_line(tmp_path, args):
    """A trial: Hydra's own check printed a 19-line traceback, exit 1."""
    proc = module(tmp_path, *args, "embedder=hash")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: --config-dir nosuch: no such folder\n"


def test_a_config_dir_that_is_a_file_says_so(tmp_path):
    """A trial passed a yaml file as --config-dir and was told "no such folder"."""
    (tmp_path / "mine.yaml").write_text("k: 1\n")
    proc = module(tmp_path, "--config-dir", "mine.yaml", "embedder=hash")
    assert (proc.returncode, proc.stderr) == (2, "error: --config-dir mine.yaml: a file, not a "
                                                 "folder\n")


def test_ragexp_runs_points_to_the_commands_that_list_runs(capsys):
    """A trial looked for a run listing under ``ragexp runs``: its help names ``compare``."""
    with pytest.raises(SystemExit) as done:
        cli.main(["runs", "--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "To list runs with their measures: ragexp compare (--parent SWEEP_RUN" in shown


def test_help_shows_defaults_only_where_an_option_has_one(capsys):
    """A trial read ``--kinds ... (default: every kind the generator writes) (default: None)``."""
    with pytest.raises(SystemExit):
        cli.main(["questions", "generate", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in shown and "(default: False)" not in shown
    assert "questions the file should hold (default: 100)" in shown
    assert "kinds to ask for, in turn (default: every kind the generator writes) --out" in shown


def test_a_reader_that_leaves_the_pipe_ends_the_command_without_a_traceback(tmp_path):
    # `ragexp compare --format csv | head -1` ended in BrokenPipeError's traceback
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    done = subprocess.run([sys.executable, "-m", "ragexp.cli.main", "runs", "sync",
                           str(tmp_path)], stdout=write, stderr=subprocess.PIPE, text=True,
                          cwd=tmp_path, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
                          timeout=300)
    os.close(write)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr


def test_runs_sync_names_a_folder_that_is_not_there(tmp_path, capsys):
    # it printed "0 record(s) synced" for a mistyped folder
    assert cli.main(["runs", "sync", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
