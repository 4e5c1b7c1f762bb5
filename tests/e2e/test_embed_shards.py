"""``ragexp embed --shard I/N``: shards split texts by a stable hash, two shards running at once
in two processes embed disjoint halves (no text twice), and the run that follows embeds
nothing (``cache.misses`` = 0)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from hydra import compose, initialize_config_dir

from ragexp.cli.main import main as cli
from ragexp.config import build, schema
from ragexp.data import shipped
from ragexp.errors import InvalidValue
from ragexp.evaluation import measures
from ragexp.index.cache import model_folder
from ragexp.index.embedders import HashEmbedder
from ragexp.index.packstore import PackedStore
from ragexp.run.embed import Shard
from ragexp.run.pipeline import run_experiment

schema.register()
LINE = re.compile(r"shard (\d+)/(\d+): (\d+) passages, (\d+) questions; embedded (\d+), "
                  r"already cached (\d+)")


def _cfg(*overrides):
    with initialize_config_dir(config_dir=shipped.conf_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("text,why", [("3/2", "0 <= I < N"), ("1/0", "N >= 1"),
                                      ("half", "must be I/N"), ("-1/2", "must be I/N")])
def test_a_bad_shard_is_refused_naming_the_key(text, why):
    with pytest.raises(InvalidValue, match=re.escape(f"--shard={text}")) as info:
        Shard.parse(text)
    assert why in str(info.value)


def test_the_cli_refuses_a_bad_shard_in_one_line(capsys):
    assert cli(["embed", "--shard", "3/2", "embedder=hash"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --shard=3/2") and "\n" not in err


def test_shards_partition_texts_by_their_hash():
    texts = [f"passage number {i}" for i in range(400)]
    shards = [Shard(i, 3) for i in range(3)]
    for t in texts:  # the documented rule, computed here on its own
        want = int(hashlib.sha256(t.encode()).hexdigest()[:16], 16) % 3
        assert [s.holds(t) for s in shards] == [i == want for i in range(3)]
    sizes = [sum(s.holds(t) for t in texts) for s in shards]
    assert sum(sizes) == 400 and min(sizes) > 100  # 133 each expected; binomial sd ~9


def test_two_shards_at_once_embed_disjoint_halves_then_a_run_embeds_nothing(tmp_path):
    overrides = ["embedder=hash", f"cache_dir={tmp_path}", "progress=false"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    procs = [subprocess.Popen([sys.executable, "-m", "ragexp.cli.main", "embed", "--shard",
                               f"{i}/2", *overrides], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(2)]
    lines = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        lines.append(LINE.search(out).groups())
    cfg = _cfg(*overrides)
    dataset = build.instantiate(cfg.dataset)
    chunks = build.build(cfg).chunker.chunk(dataset.documents())
    passages = {c.text for c in chunks}
    questions = {q.text for q in dataset.queries()}
    got = [tuple(map(int, g)) for g in lines]
    assert sum(g[2] for g in got) == len(passages)
    assert sum(g[3] for g in got) == len(questions)
    # no text embedded twice: each shard embedded exactly its own texts, none found cached ...
    assert [g[4] for g in got] == [g[2] + g[3] for g in got] and [g[5] for g in got] == [0, 0]
    # ... and the store holds each text's vector once
    store = PackedStore(model_folder(tmp_path / "embeddings", HashEmbedder().identity)
                        / "packed", 512)
    store.refresh()
    assert len(store) == len(passages) + len(questions)
    result = run_experiment(dataset, build.build(cfg), k=cfg.k,
                            measures=measures.resolve(cfg.measures, cfg.k), progress=False,
                            store=build.stage_store(cfg))
    assert result.metrics["cache.misses"] == 0
    assert result.metrics["cache.hits"] >= len(passages)


def test_a_shard_run_again_embeds_nothing(tmp_path, capsys):
    overrides = ["embedder=hash", f"cache_dir={tmp_path}", "progress=false"]
    assert cli(["embed", "--shard", "1/2", *overrides]) == 0
    first = LINE.search(capsys.readouterr().out).groups()
    assert cli(["embed", "--shard", "1/2", *overrides]) == 0
    again = LINE.search(capsys.readouterr().out).groups()
    assert again[4] == "0" and int(again[5]) == int(first[4]) > 0


def test_a_multirun_checks_every_shard_before_any_job_runs(tmp_path):
    """``+shard=0/2,5/2,1/2`` used to embed shard 0/2 and then stop at 5/2: now job #1 is
    refused, exit 2, and no job ran (nothing embedded, no job folder)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-m", "ragexp.run.embed", "-m", "+shard=0/2,5/2,1/2", "embedder=hash",
         f"cache_dir={tmp_path}", "progress=false", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert out.returncode == 2, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith("error: job #1: +shard=5/2 ") and "shard=5/2: need N >= 1" in first
    assert "nothing was run" in out.stderr and not LINE.search(out.stdout)
    assert not (tmp_path / "embeddings").exists()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                                      ["hydra/launcher=submitit_local"]],
                         ids=["joblib", "submitit_local"])
def test_a_multirun_over_shards_embeds_everything_once(tmp_path, launcher):
    """The Hydra form of ``ragexp embed``: joblib on one machine, and submitit's local executor
    (the launcher plugin SLURM runs through, without a cluster)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-m", "ragexp.run.embed", "-m", "+shard=0/2,1/2", *launcher,
         "embedder=hash", f"cache_dir={tmp_path}", "progress=false",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr
    logs = out.stdout + "".join(p.read_text() for p in (tmp_path / "multirun").rglob("*.out"))
    got = [tuple(map(int, g)) for g in LINE.findall(logs)]
    assert sorted(g[0] for g in got) == [0, 1]
    store = PackedStore(model_folder(tmp_path / "embeddings", HashEmbedder().identity)
                        / "packed", 512)
    store.refresh()
    assert len(store) == sum(g[4] for g in got) == sum(g[2] + g[3] for g in got)
    assert not (tmp_path / "mlruns").exists()  # embedding starts no MLflow sweep run


@pytest.mark.slow
def test_a_shard_killed_midway_leaves_whole_entries_and_its_rerun_finishes(tmp_path, minilm):
    overrides = ["embedder=minilm", f"cache_dir={tmp_path}", "progress=false"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen([sys.executable, "-m", "ragexp.cli.main", "embed", *overrides],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    store = PackedStore(model_folder(tmp_path / "embeddings", minilm.identity) / "packed", 384)
    try:  # kill it once the model is loaded and embedding (its claim file exists), or at 60 s
        claims = model_folder(tmp_path / "embeddings", minilm.identity) / "claims"
        for _ in range(600):
            if proc.poll() is not None or (claims.is_dir() and any(claims.iterdir())):
                break
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    store.refresh()
    before = len(store)
    cfg = _cfg(*overrides)
    dataset = build.instantiate(cfg.dataset)
    total = len({c.text for c in build.build(cfg).chunker.chunk(dataset.documents())}) + \
        len({q.text for q in dataset.queries()})
    assert before < total or proc.returncode == 0
    out = subprocess.run([sys.executable, "-m", "ragexp.cli.main", "embed", *overrides],
                         cwd=tmp_path, env=env, text=True, capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr
    g = tuple(map(int, LINE.search(out.stdout).groups()))
    assert g[4] == total - before and g[5] == before  # only what it lacked is embedded
    store.refresh()
    assert len(store) == total  # every text once, none torn or twice
