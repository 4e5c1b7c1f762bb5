"""The wheel, installed in a fresh virtual environment, works from any folder: configs ship in
the package, ``ragexp init`` writes a starter, and a two-option sweep runs on it with the store
and caches in that folder. Dependencies come from the development environment (a ``.pth`` file
points the fresh venv at its site-packages), so the test needs no network and checks what the
wheel itself holds: a wheel missing ``conf/`` or the example data fails here."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from workspaces import search_runs, store_uri

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def sh(args, cwd, env=None, timeout=900):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"),
        str(ROOT)], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("ragexp-*.whl")
    sh([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], cwd=tmp)
    py = tmp / "venv" / "bin" / "python"
    site = Path(sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=tmp).stdout.strip())
    sh([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
        str(wheel)], cwd=tmp, env=env_for(tmp))  # no PYTHONPATH: pip would see a ragexp there
    # Then the dev environment's packages, after the fresh site-packages. A path line in a .pth
    # adds only that folder: the dev venv's own .pth files (its editable ragexp) are not read.
    (site / "zz_dev_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return tmp, py


def env_for(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    return {**env, "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"}


def test_the_wheel_holds_the_product_and_its_shipped_data_not_the_tools(venv):
    """One copy of conf/, corpus/ and golden/ at the repository root, carried into the wheel
    under ragexp/shipped/, every config file of them; no benchmark, README or screenshot
    module."""
    tmp, _ = venv
    (wheel,) = (tmp / "dist").glob("ragexp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ragexp/shipped/conf/config.yaml" in names and "ragexp/serving/static/page.html" in names
    assert {n for n in names if n.startswith("ragexp/shipped/conf/")} == {
        f"ragexp/shipped/conf/{p.relative_to(ROOT / 'conf').as_posix()}"
        for p in (ROOT / "conf").rglob("*.yaml")}
    corpus = sorted(n for n in names if n.startswith("ragexp/shipped/corpus/") and n.endswith(".md"))
    assert len(corpus) == len(list((ROOT / "corpus").rglob("*.md"))) == 22
    golden = {n for n in names if n.startswith("ragexp/shipped/golden/")}
    assert golden == {f"ragexp/shipped/golden/{p.relative_to(ROOT / 'golden').as_posix()}"
                      for p in (ROOT / "golden").rglob("*.jsonl")}
    tools = {p.stem for p in (ROOT / "tools").glob("*.py")} - {"__init__"}
    shipped = {Path(n).stem for n in names if n.endswith(".py")}
    assert not [n for n in names if n.startswith("tools/")] and not tools & shipped
    assert not (ROOT / "src" / "ragexp" / "conf").exists()  # no second copy in the repository


def test_installed_ragexp_is_the_wheel_not_the_checkout(venv):
    tmp, py = venv
    out = sh([str(py), "-c", "import ragexp, ragexp.run.app as a; print(ragexp.__file__); "
                             "print(a.CONF_DIR)"], cwd=tmp, env=env_for(tmp)).stdout.split()
    assert all(str(tmp / "venv") in line for line in out), out
    assert (Path(out[1]) / "config.yaml").is_file()


def test_the_serving_page_ships_in_the_wheel(venv):
    tmp, py = venv
    out = sh([str(py), "-c", "import ragexp.serving.page as p; print(p.__file__); print(len(p.html())); "
                             "print(p.content_security_policy())"], cwd=tmp, env=env_for(tmp))
    where, size, csp = out.stdout.splitlines()
    assert str(tmp / "venv") in where and int(size) > 1000 and "'sha256-" in csp


def test_init_and_a_two_option_sweep_outside_the_repository(venv):
    tmp, py = venv
    work = tmp / "my-docs"
    env = env_for(tmp)
    ragexp = str(py.parent / "ragexp")
    out = sh([ragexp, "init", str(work), "--example"], cwd=tmp, env=env).stdout
    assert "dataset=my_docs" in out
    assert len(list((work / "docs").rglob("*.md"))) == 22
    sh([str(py), "-m", "ragexp", "--config-dir", "conf", "-m", "+ablation=glob(my_docs_*)",
        "embedder=hash", "progress=false"], cwd=work, env=env)
    assert (work / "mlruns" / "mlflow.db").is_file() and (work / ".cache").is_dir()
    runs = search_runs(store_uri(work / "mlruns"), experiment_names=["ragexp-my_docs"])
    # The sweep's parent lives beside its children, though the ablations set the dataset.
    assert (runs["tags.ragexp.role"] == "sweep").sum() == 1
    children = runs[runs["tags.ragexp.role"] != "sweep"]
    assert sorted(children["tags.ragexp.ablation"]) == ["my_docs_baseline", "my_docs_hybrid"]
    assert (children["status"] == "FINISHED").all()
    assert sorted(children["params.retriever.name"]) == ["dense", "hybrid"]
    assert (children["metrics.ndcg_at_10"] > 0.2).all()


def test_shipped_default_dataset_runs_from_any_folder(venv):
    tmp, py = venv
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    sh([str(py), "-m", "ragexp", "embedder=hash", "retriever=bm25", "reranker=none",
        "progress=false"], cwd=elsewhere, env=env_for(tmp))
    df = search_runs(store_uri(elsewhere / "mlruns"), experiment_names=["ragexp-handbook"])
    assert list(df["status"]) == ["FINISHED"]


def test_init_refuses_to_overwrite(venv):
    tmp, py = venv
    target = tmp / "existing"
    (target / "conf" / "dataset").mkdir(parents=True)
    (target / "conf" / "dataset" / "existing.yaml").write_text("mine\n")
    proc = subprocess.run([str(py.parent / "ragexp"), "init", str(target)], cwd=tmp,
                          env=env_for(tmp), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2  # a refused argument, as every ragexp command's
    assert "would overwrite" in proc.stderr and "existing.yaml" in proc.stderr
    assert (target / "conf" / "dataset" / "existing.yaml").read_text() == "mine\n"
    assert not (target / "questions.jsonl").exists()


def test_system_packages_not_root_names_the_command(tmp_path):
    """``make install`` as a user without the system programs stops naming the exact command
    (as root it installs them with apt-get instead)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "ls"):
        real = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                              text=True).stdout.strip()
        (bin_ / tool).symlink_to(real)
    (bin_ / "id").write_text("#!/bin/sh\necho 1000\n")  # not root
    (bin_ / "id").chmod(0o755)
    proc = subprocess.run([str(bin_ / "bash"), str(ROOT / "tools" / "system_packages.sh")],
                          env={"PATH": str(bin_)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "apt-get install -y chromium chromium-driver" in proc.stderr
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        assert "postgresql" in proc.stderr
