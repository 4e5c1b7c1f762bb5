"""Every file ragexp writes whole-or-nothing (``data.files``) gets the mode a plain ``open``
would give it: ``0666 & ~umask`` when new, its own mode when it existed. A trial: ``ragexp
report --html r.html`` and ``--chart c.svg`` wrote ``-rw-------`` under umask 022 (through
``tempfile.mkstemp``) and turned an existing 0644 page into 0600, so a published report became
unreadable to everyone else."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ragexp.data import files, trec
from ragexp.index import embedders
from ragexp.index.stagestore import StageStore
from ragexp.report import html as report_html
from ragexp.serving import mining
from ragexp.tracking.outbox import Outbox


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    """The process's umask set to the parameter for the test, then restored."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_report(folder: Path, monkeypatch) -> list[Path]:
    """``report.html.write`` of a fixed page and chart (no MLflow), as ``ragexp report
    --html r.html --chart c.svg`` writes them."""
    monkeypatch.setattr(report_html.sweep_data, "load",
                        lambda parent: SimpleNamespace(runs=pd.DataFrame({"r": [1]})))
    monkeypatch.setattr(report_html, "build", lambda data: ("<html>page</html>", "<svg/>"))
    report_html.write("p" * 32, folder / "r.html", folder / "c.svg", upload=False)
    return [folder / "r.html", folder / "c.svg"]


def write_stage(folder: Path, monkeypatch) -> list[Path]:
    StageStore(str(folder), memory={}).get("vectors", "k1", lambda: np.zeros((2, 3)))
    StageStore(str(folder), memory={}).get("bm25", "k2", lambda: {"a": 1})
    return [folder / "vectors" / "k1.npy", folder / "bm25" / "k2.pkl"]


def write_outbox(folder: Path, monkeypatch) -> list[Path]:
    box = Outbox.create(folder)
    box.update(status="running")
    return [box.root / "record.json"]


def write_model_folder(folder: Path, monkeypatch) -> list[Path]:
    (folder / "m.onnx").write_bytes(b"x")
    (folder / "tok.json").write_text("{}")
    embedders._link_packaged_files(folder / "model", folder / "m.onnx", folder / "tok.json")
    return [folder / "model" / "tokenizer_config.json"]


WRITERS = {
    "write_atomic": lambda d, mp: [files.write_atomic(d / "a.txt", "text")],
    "write_all": lambda d, mp: files.write_all({d / "a.txt": b"a", d / "b.txt": "b"}),
    "report --html/--chart": write_report,
    "trec.write_run": lambda d, mp: [trec.write_run({"q1": {"c1": 1.0}}, d / "run.trec")],
    "trec.write_qrels": lambda d, mp: [trec.write_qrels({"q1": {"c1": 1}}, d / "qrels.trec")],
    "traces mine --out": lambda d, mp: [mining.write_candidates(d / "c.jsonl", [{"id": "x"}])
                                        or d / "c.jsonl"],
    "outbox record": write_outbox,
    "stage store": write_stage,
    "model folder": write_model_folder,
}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_new_file_gets_the_mode_open_would_give(tmp_path, monkeypatch, umask, writer):
    written = WRITERS[writer](tmp_path, monkeypatch)
    assert written
    for path in written:
        assert mode(path) == 0o666 & ~umask, (path, oct(mode(path)))
    assert not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize("writer", ["write_atomic", "report --html/--chart", "trec.write_run",
                                    "traces mine --out"])
@pytest.mark.parametrize("before", [0o644, 0o600, 0o664])
def test_an_existing_file_keeps_its_mode(tmp_path, monkeypatch, umask, writer, before):
    names = {"write_atomic": ["a.txt"], "report --html/--chart": ["r.html", "c.svg"],
             "trec.write_run": ["run.trec"], "traces mine --out": ["c.jsonl"]}[writer]
    for name in names:
        (tmp_path / name).write_text("old")
        (tmp_path / name).chmod(before)
    written = WRITERS[writer](tmp_path, monkeypatch)
    for path in written:
        assert path.read_text() != "old"
        assert mode(path) == before, (path, oct(mode(path)))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def broken(fh):
        fh.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.write_atomic(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


# The paths each writer writes (``test_an_existing_file_keeps_its_mode``'s), for the links below.
NAMES = {"write_atomic": ["a.txt"], "report --html/--chart": ["r.html", "c.svg"],
         "trec.write_run": ["run.trec"], "traces mine --out": ["c.jsonl"]}


@pytest.mark.parametrize("writer", NAMES)
def test_a_symlink_is_written_through_and_stays_a_link(tmp_path, monkeypatch, umask, writer):
    """As ``open(path, "w")`` writes: the link's target gets the content and keeps its mode,
    the link stays a link (before, the temporary file replaced the link with a copy and the
    target kept its old content). The temporary file is made beside the target, in another
    folder, through a chain of two links, one of them relative."""
    out, store = tmp_path / "out", tmp_path / "store"
    out.mkdir()
    store.mkdir()
    for name in NAMES[writer]:
        (store / name).write_text("old")
        (store / name).chmod(0o640)
        (store / f"via-{name}").symlink_to(name)  # relative, inside store
        (out / name).symlink_to(store / f"via-{name}")
    written = WRITERS[writer](out, monkeypatch)
    for path in written:
        assert path.is_symlink() and (store / path.name).is_file()
        assert (store / path.name).read_text() not in ("", "old")
        assert mode(store / path.name) == 0o640
    assert sorted(p.name for p in out.iterdir()) == sorted(NAMES[writer])
    assert not list(tmp_path.rglob("*.part"))


def test_a_dangling_symlink_gets_its_target_created_as_open_would(tmp_path, umask):
    (tmp_path / "store").mkdir()
    link = tmp_path / "latest.txt"
    link.symlink_to(tmp_path / "store" / "7.txt")
    files.write_atomic(link, "seven")
    assert link.is_symlink() and (tmp_path / "store" / "7.txt").read_text() == "seven"
    assert mode(tmp_path / "store" / "7.txt") == 0o666 & ~umask
    nowhere = tmp_path / "nowhere.txt"
    nowhere.symlink_to(tmp_path / "missing" / "x.txt")  # open() refuses it too
    with pytest.raises(FileNotFoundError):
        files.write_atomic(nowhere, "x")
    assert nowhere.is_symlink() and not (tmp_path / "missing").exists()


def test_a_failed_write_all_removes_the_target_it_created_through_a_link(tmp_path):
    """A dangling link's target that ``write_all`` created is removed when a later file cannot
    be moved into place (here a folder stands at its path), and the link is left as it was,
    dangling: the link is never what gets removed."""
    link = tmp_path / "a.txt"
    link.symlink_to(tmp_path / "target.txt")
    (tmp_path / "b.txt").mkdir()
    with pytest.raises(IsADirectoryError):
        files.write_all({link: "a", tmp_path / "b.txt": "b"})
    assert link.is_symlink() and not (tmp_path / "target.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_a_run_record_outside_hydra_gets_a_plain_folder_mode(tmp_path, monkeypatch, umask):
    """``Outbox.create(None)`` (a run with no Hydra job folder) made its folder with
    ``tempfile.mkdtemp``: 0700 whatever the umask, where every other folder ragexp makes,
    the record's own ``mlflow_record/`` in it too, gets ``0777 & ~umask``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    box = Outbox.create(None)
    made = box.root.parent
    assert made.parent == tmp_path and made.name.startswith("ragexp-run-")
    for folder in (made, box.root, box.artifacts):
        assert mode(folder) == 0o777 & ~umask, (folder, oct(mode(folder)))
    assert Outbox.create(None).root.parent != made  # each run its own
