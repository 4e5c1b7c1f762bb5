"""The tiers of tests by folder (``conftest``): every test module in one, everything in
``tests/e2e`` marked ``slow``, a test not marked ``slow`` that starts a child process
failed, naming where it belongs, and a child running ragexp's Hydra app refused unless its
output folders are the test's own."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_runs import ROOT, own_dirs
from conftest import (
    SLOW_TIER,
    TESTS,
    TIERS,
    _shared_outputs,
    pytest_collection_modifyitems,
)


def test_every_test_module_lives_in_a_tier():
    modules = [p.relative_to(TESTS) for p in TESTS.rglob("test_*.py")
               if "fixtures" not in p.parts]
    assert modules and all(len(m.parts) == 2 and m.parts[0] in TIERS for m in modules), [
        str(m) for m in modules if len(m.parts) != 2 or m.parts[0] not in TIERS]


class Item:
    """What ``pytest_collection_modifyitems`` reads of a collected test, and the marks added."""

    def __init__(self, path):
        self.path, self.marks = path, []

    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_every_test_under_e2e_is_slow():
    items = [Item(TESTS / tier / "test_x.py") for tier in TIERS]
    pytest_collection_modifyitems(None, items)
    assert {tier: i.marks for tier, i in zip(TIERS, items)} == {
        "unit": [], "contract": [], SLOW_TIER: ["slow"]}


def test_a_child_process_fails_a_test_not_marked_slow():
    with pytest.raises(pytest.fail.Exception, match=r"test_tiers\.py::test_a_child_process_fails"
                       r"_a_test_not_marked_slow starts a child process \(python[\d.]*\) and is "
                       r"not marked slow: move it to tests/e2e/ or mark it @pytest.mark.slow"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert "git version" in subprocess.run(["git", "--version"], capture_output=True,
                                           text=True).stdout  # a cheap tool is no such child
    with pytest.raises(pytest.fail.Exception, match=r"starts a child process \(sh\)"):
        subprocess.run("git --version", shell=True, capture_output=True)


def test_a_hydra_app_child_needs_output_folders_of_its_own(tmp_path):
    """``python -m ragexp`` from the repository root writes Hydra's dated folder there unless
    told where: refused; in the test's folders (given, ``own_dirs``, or the launch folder)
    it is not; a ``ragexp`` command or another program is none of this guard's business."""
    py = sys.executable
    shared = [([py, "-m", "ragexp", "k=0"], ROOT),
              ([py, "-m", "ragexp", "-m", "k=1,2", f"hydra.run.dir={tmp_path}"], ROOT),
              ([py, "-X", "importtime", "-m", "ragexp.run.embed", "embedder=hash"], None),
              ([py, "-c", "from ragexp.run import app; app.entry()", "k=1"], ROOT),
              ([py, "-m", "ragexp", "hydra.run.dir=outputs/${now:%H}"], ROOT),
              ([py, "-m", "ragexp", "k=0"], Path(tempfile.gettempdir()))]
    for args, cwd in shared:
        problem = _shared_outputs(args, cwd)
        assert problem is not None and "not a folder of its own" in problem, args
    assert "hydra.sweep.dir in " in _shared_outputs(shared[1][0], ROOT)
    own = [([py, "-m", "ragexp", "k=0", *own_dirs(tmp_path, ["k=0"])], ROOT),
           ([py, "-m", "ragexp", "-m", "k=1,2", f"hydra.sweep.dir={tmp_path / 's'}"], ROOT),
           ([py, "-m", "ragexp", "k=0"], tmp_path),
           ([py, "-m", "ragexp", "k=0"], Path(tempfile.mkdtemp(dir=tmp_path))),
           ([py, "-m", "ragexp", "hydra.run.dir=${nosuch}"], ROOT),
           ([py, "-m", "ragexp", "compare"], ROOT),
           ([py, "-m", "ragexp", "--cfg", "job"], ROOT),
           ([py, "-m", "ragexp", "--version"], ROOT),
           ([py, "-m", "ragexp.cli.main", "embed"], ROOT),
           ([py, "-c", "pass"], ROOT)]
    for args, cwd in own:
        assert _shared_outputs(args, cwd) is None, args


def test_own_dirs_are_new_to_each_launch_and_leave_what_the_command_sets(tmp_path):
    first = own_dirs(tmp_path, ["k=0"])
    assert first == [f"hydra.run.dir={tmp_path / 'outputs' / '0'}",
                     f"hydra.sweep.dir={tmp_path / 'multirun' / '0'}"]
    (tmp_path / "outputs" / "0").mkdir(parents=True)
    assert own_dirs(tmp_path, ["-m", f"hydra.sweep.dir={tmp_path}"]) == [
        f"hydra.run.dir={tmp_path / 'outputs' / '1'}"]


def test_a_hydra_job_in_this_process_needs_an_output_folder_of_its_own(tmp_path):
    """The same rule for a job ``cli_runs.run_app`` runs here, as Hydra starts it."""
    import hydra._internal.hydra as single
    from omegaconf import OmegaConf

    config = OmegaConf.create({"hydra": {"run": {"dir": str(ROOT / "outputs" / "x")}}})
    with pytest.raises(pytest.fail.Exception, match=r"with hydra.run.dir in .*outputs/x, not a "
                       r"folder of its own"):
        single.run_job(task_function=None, config=config, job_dir_key="hydra.run.dir",
                       job_subdir_key=None, hydra_context=None)


def test_a_handler_left_on_a_closed_stream_by_an_earlier_run_writes_to_this_ones():
    """A library's default handler bound to the stderr an earlier in-process run captured
    (Optuna's) logs to the current stderr in the next run, not '--- Logging error ---'."""
    import io
    import logging
    import sys

    import cli_runs

    gone = io.StringIO()
    handler = logging.StreamHandler(gone)
    logger = logging.getLogger("ragexp-test-closed-stream")
    logger.addHandler(handler)
    gone.close()
    try:
        cli_runs._reopened_handlers()
        assert handler.stream is sys.stderr
    finally:
        logger.removeHandler(handler)
