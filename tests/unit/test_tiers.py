"""The tiers of tests by folder (``conftest``): every test module in one, everything in
``tests/e2e`` marked ``slow``, and a test not marked ``slow`` that starts a child process
failed, naming where it belongs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SLOW_TIER, TESTS, TIERS, pytest_collection_modifyitems


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
