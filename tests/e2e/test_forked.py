"""``run.forked.Beside``: work in a forked child hands back what it would have given here, and
the two places that use it (a sweep's up-front composition, a served run's record) give what
they gave in this process."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

import pytest
from omegaconf import OmegaConf

from ragexp.errors import RagexpError
from ragexp.run import forked
from ragexp.run.forked import Beside, ChildLost
from ragexp.session import Session
from ragexp.tracking.store import RunNotFound

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")


@pytest.fixture(autouse=True)
def one_thread(request, monkeypatch):
    """Earlier tests of the suite can leave idle threads behind (MLflow's trace exporters),
    which would make ``Beside`` run the work here: these children take no lock, so the count
    is read as one, except by the test of that rule itself."""
    if "another_thread" not in request.node.name:
        monkeypatch.setattr(forked.threading, "active_count", lambda: 1)


class Odd(Exception):
    """Pickles, but does not load back: its ``__init__`` takes two arguments."""

    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def test_the_value_comes_back_from_a_child_process():
    with Beside(lambda: (os.getpid(), {"a": [1, 2.5, "x"]}), "returning") as work:
        assert work.forked
        pid, value = work.result()
    assert pid != os.getpid() and value == {"a": [1, 2.5, "x"]}


@pytest.mark.parametrize("exc", [RunNotFound("no run id starts with 'ff'"), ValueError("bad"),
                                 KeyError("k")])
def test_the_childs_exception_is_raised_here_with_its_type_and_text(exc):
    def fail():
        raise exc

    with Beside(fail, "failing") as work, pytest.raises(type(exc)) as raised:
        work.result()
    assert str(raised.value) == str(exc)
    if sys.version_info >= (3, 11):  # where it came from, for a reader of the traceback
        assert "in fail\n" in raised.value.__notes__[-1]


def test_an_exception_that_does_not_load_back_is_a_ragexp_error_naming_it():
    with pytest.raises(TypeError):  # the reason: pickle cannot rebuild it
        pickle.loads(pickle.dumps(Odd(1, 2)))

    def fail():
        raise Odd(1, 2)

    with Beside(fail, "failing") as work, pytest.raises(RagexpError, match="^Odd: 1-2$"):
        work.result()


def test_a_child_that_dies_without_a_result_is_said_to():
    with Beside(lambda: os._exit(3), "leaving") as work, pytest.raises(
            ChildLost, match=r"^the child process leaving \(pid \d+\) ended without a result "
                             r"\(exit code 3\)"):
        work.result()
    with Beside(lambda: os.kill(os.getpid(), 9), "killed") as work, pytest.raises(
            ChildLost, match=r"\(killed by SIGKILL\)"):
        work.result()


def test_leaving_the_block_before_the_result_ends_the_child():
    start = time.perf_counter()
    with pytest.raises(RuntimeError):
        with Beside(lambda: time.sleep(60), "sleeping") as work:
            pid = work._pid
            raise RuntimeError("this process's own work failed")
    assert time.perf_counter() - start < 10
    with pytest.raises(ChildProcessError):  # reaped: no such child any more
        os.waitpid(pid, os.WNOHANG)


def test_told_not_to_fork_the_work_runs_here_when_asked():
    with Beside(os.getpid, "here", fork=False) as work:
        assert not work.forked
        assert work.result() == os.getpid()


def test_with_another_thread_running_the_work_runs_here_when_asked():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        calls = []
        with Beside(lambda: calls.append(os.getpid()) or "done", "here") as work:
            assert not work.forked and calls == []  # nothing ran yet
            assert work.result() == "done"
        assert calls == [os.getpid()]
    finally:
        stop.set()
        other.join()


def test_meanwhile_fills_the_wait_and_stops_once_the_child_is_done():
    """Steps run here while the child works; none starts after it has written its result."""
    ran = []

    def step(i):
        return lambda: (ran.append((i, time.monotonic())), time.sleep(0.05))

    with Beside(lambda: (time.sleep(0.6), time.monotonic())[1], "sleeping") as work:
        count = work.meanwhile(step(i) for i in range(100))
        done_at = work.result()
    assert count == len(ran) and 2 <= count < 100
    # each step takes 0.05 s and starts only while the child's result is not in the pipe: at
    # most the child's 0.6 s of them, and the hand-over of its result (pickled and written
    # after the time it returned, which a loaded machine delays) is not a step's bound
    assert count * 0.05 <= 0.6 + 0.5 and ran[0][1] < done_at
    assert [i for i, _ in ran] == list(range(count))  # in order, none skipped
    assert work.meanwhile([lambda: ran.append("late")]) == 0 and ran[-1] != "late"


def test_meanwhile_runs_nothing_once_the_child_has_finished_or_where_nothing_forked():
    ran = []
    with Beside(lambda: "quick", "returning") as work:
        deadline = time.monotonic() + 10
        while not forked.select.select([work._read], [], [], 0.05)[0]:
            assert time.monotonic() < deadline
        assert work.meanwhile([lambda: ran.append(1)]) == 0
        assert work.result() == "quick"
    with Beside(lambda: "here", "here", fork=False) as work:
        assert work.meanwhile([lambda: ran.append(2)]) == 0
        assert work.result() == "here"
    assert ran == []


def test_a_step_that_fails_raises_and_the_child_is_still_reaped():
    with pytest.raises(ZeroDivisionError):
        with Beside(lambda: time.sleep(30), "sleeping") as work:
            pid = work._pid
            work.meanwhile([lambda: 1 / 0])
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


ABLATIONS = ("abstain_dense", "bm25", "chunks_large", "hybrid", "no_reranker")


def _master(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from ragexp.run.app import CONF_DIR

    initialize = initialize_config_dir(config_dir=CONF_DIR, version_base="1.3")
    initialize.__enter__()
    master = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(master):
        master.hydra.sweeper.params = {"+ablation": ",".join(ABLATIONS)}
    return initialize, master


def _flags(cfg) -> list:
    """Every node's path with its readonly and struct flags, in order."""
    out = []

    def walk(node, path):
        out.append((path, node._get_flag("readonly"), node._get_flag("struct")))
        if OmegaConf.is_dict(node):
            for key in node.keys():
                child = node._get_node(key)
                if OmegaConf.is_config(child):
                    walk(child, f"{path}.{key}")

    walk(cfg, "")
    return out


def test_a_sweeps_jobs_composed_in_the_child_are_the_jobs_composed_here(monkeypatch):
    """``sweep.check_jobs`` forked and not: the same overrides, the same configs (every value,
    interpolations unresolved, and every node's flags), each validated, and Hydra's loader
    answering the launcher with them."""
    from hydra.core.global_hydra import GlobalHydra

    from ragexp.run import sweep

    composed = {}
    for fork in (True, False):  # each in a fresh Hydra, whose loader has composed nothing
        monkeypatch.setattr(forked, "can_fork", lambda fork=fork: fork)
        initialize, master = _master(["embedder=hash"])
        try:
            jobs = sweep.check_jobs(master)
            loader = GlobalHydra.instance().config_loader()
            assert [loader.load_sweep_config(master, ov) for ov, _ in jobs] == \
                [cfg for _, cfg in jobs]
            assert all(loader.load_sweep_config(master, ov) is cfg for ov, cfg in jobs)
        finally:
            initialize.__exit__(None, None, None)
        composed[fork] = jobs
    jobs, here = composed[True], composed[False]
    assert [ov for ov, _ in jobs] == [ov for ov, _ in here] == \
        [[f"+ablation={a}", "embedder=hash"] for a in ABLATIONS]
    for (_, a), (_, b) in zip(jobs, here):
        assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
        assert _flags(a) == _flags(b)
    assert all(sweep.validated(ov) for ov, _ in here)


def test_a_refusal_composed_in_the_child_is_printed_as_before(monkeypatch, capsys):
    from ragexp.run import sweep

    initialize, master = _master(["embedder=hash", "k=0"])
    try:
        errs = []
        for fork in (True, False):
            monkeypatch.setattr(forked, "can_fork", lambda fork=fork: fork)
            with pytest.raises(SystemExit) as stopped:
                sweep.check_jobs(master)
            assert stopped.value.code == 2
            errs.append(capsys.readouterr().err)
    finally:
        initialize.__exit__(None, None, None)
    assert errs[0] == errs[1]
    assert errs[0].startswith("error: invalid config (job #0: +ablation=abstain_dense")
    assert "k=0" in errs[0] and errs[0].rstrip().endswith("nothing was run")


def test_a_child_whose_parent_is_killed_dies_with_it(tmp_path):
    """A parent ended by SIGKILL (or a lone SIGTERM) takes its composing child with it: the
    child would otherwise compose on, re-parented, for as long as its work takes."""
    import signal
    import subprocess

    script = ("import os, time\n"
              "from ragexp.run.forked import Beside\n"
              "work = Beside(lambda: time.sleep(120), 'sleeping')\n"
              "print(work._pid, flush=True)\n"
              "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        os.kill(child, 0)  # alive
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the child outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_sweep_whose_composing_child_dies_stops_before_any_job(monkeypatch, capsys):
    """The child killed (out of memory, a signal to it alone): ``SystemExit`` naming it, exit
    1, before any run; Hydra would only have warned of an ``Exception`` and launched the jobs
    without a parent run."""
    from ragexp.run import sweep

    monkeypatch.setattr(sweep, "composed_and_checked", lambda config, overrides, noun: os._exit(9))
    initialize, master = _master(["embedder=hash"])
    try:
        with pytest.raises(SystemExit) as stopped:
            sweep.check_jobs(master)
    finally:
        initialize.__exit__(None, None, None)
    assert str(stopped.value.code).startswith(
        "error: the sweep could not start, nothing was run: ChildLost: the child process "
        "composing the sweep's jobs (pid ")
    assert "(exit code 9)" in str(stopped.value.code) and not Session.current().validated


def test_a_sweep_the_basic_sweeper_cannot_expand_forks_nothing(monkeypatch):
    """An optimiser's interval is no list of jobs: nothing to compose up front, no child."""
    from omegaconf import open_dict

    from ragexp.run import sweep

    def no_fork():
        raise AssertionError("forked")

    monkeypatch.setattr(forked.os, "fork", no_fork)
    initialize, master = _master(["embedder=hash"])
    try:
        with open_dict(master):
            master.hydra.sweeper.params = {"fusion.k": "interval(10, 100)"}
        assert sweep.check_jobs(master) is None
    finally:
        initialize.__exit__(None, None, None)


@pytest.mark.parametrize("overrides, params, imports", [
    ([], {"+ablation": "bm25,hybrid"}, ["fastembed", "scipy.stats", "ragexp.report.html"]),
    (["embedder=hash"], {"+ablation": "bm25,hybrid"}, ["scipy.stats", "ragexp.report.html"]),
    (["embedder=hash", "sweep_report=false"], {"k": "5,10"}, ["scipy.stats"]),
    ([], {"k": "5"}, ["fastembed"]),  # one job: no end-of-sweep tests, no page of several
])
def test_a_sweep_imports_what_it_uses_later_while_its_jobs_compose(monkeypatch, overrides,
                                                                    params, imports):
    """``check_jobs`` imports, after MLflow's, the modules ``later_imports`` names for the
    sweep's base config and number of jobs, while the child composes; a module not installed
    is left to the job that uses it to report."""
    from omegaconf import open_dict

    from ragexp.run import sweep

    asked = []
    monkeypatch.setattr(sweep.tracking, "preload", lambda: None)
    monkeypatch.setattr(sweep, "import_step", lambda m: lambda: asked.append(m))
    monkeypatch.setattr(sweep, "composed_and_checked",
                        lambda config, overrides, noun: (time.sleep(3), ([], None))[1])
    initialize, master = _master(overrides)
    try:
        with open_dict(master):
            master.hydra.sweeper.params = params
        jobs = sweep.sweep_jobs(master)
        assert sweep.later_imports(master, len(jobs)) == imports
        sweep.check_jobs(master)
    finally:
        initialize.__exit__(None, None, None)
    assert asked == imports


def test_an_import_step_imports_its_module_and_leaves_a_missing_one_to_its_user():
    from ragexp.run import sweep

    sys.modules.pop("colorsys", None)
    sweep.import_step("colorsys")()
    assert "colorsys" in sys.modules
    sweep.import_step("ragexp_no_such_module")()  # no error here: the job reports it
    assert "ragexp_no_such_module" not in sys.modules
