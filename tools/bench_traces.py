"""``make bench`` rows for MLflow Tracing of served requests (``tracing.py``), side by side.

One serving engine on the default configuration (MiniLM, lexical reranker and abstain signal,
extractive answers) over the handbook, answering every golden question with tracing off and on
(an MLflow sqlite store in a temporary folder), in interleaved rounds:

1. **light load** (the target): each request is sent once the previous one's trace is written,
   as a server between users' questions sees it; median request latency on vs off, target
   at most 1.05 (tracing adds under 5% to a request); the two modes alternate question by
   question, and the in-memory query vectors are cleared before each request, so every
   request embeds its question as a new one would;
2. **back to back** (information): the next request follows at once, so writing traces competes
   with answering for the CPU and Python's GIL; throughput off vs on. MLflow's sqlite trace
   store spends tens of milliseconds of CPU per trace, so a saturated server answers fewer
   questions with tracing on: this row says how many.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path


def _engine(tmp: Path):
    from hydra import compose, initialize_config_dir

    from ragexp.config import schema
    from ragexp.run.app import CONF_DIR
    from ragexp.serving.engine import Engine

    schema.register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"cache_dir={tmp / 'cache'}", "progress=false"])
    return Engine(cfg, threshold=0.3, run_id="bench")


def trace_rows(questions: list[str], Row, rounds: int = 3):
    """``(rows, notes)`` for ``bench.render`` (``Row``: its row type): see the module
    docstring. Uses its own temporary MLflow store (``MLFLOW_TRACKING_URI`` is restored)."""
    from ragexp.serving import tracing

    old = os.environ.get("MLFLOW_TRACKING_URI")
    with tempfile.TemporaryDirectory(prefix="ragexp-bench-traces-") as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        try:
            engine = _engine(Path(tmp))
            on = tracing.Tracer(True, "bench-traces", engine.run_id)
            modes = {"off": tracing.OFF, "on": on}
            for q in questions[:5]:  # warm both paths
                for tracer in modes.values():
                    engine.tracer = tracer
                    engine.answer(q)
            on.flush()
            light = {m: [] for m in modes}
            burst = {m: [] for m in modes}
            cpu = {m: 0.0 for m in modes}
            recent = engine.resources.query_vectors.recent  # every question new

            for r in range(rounds):
                for i, q in enumerate(questions):  # light load, modes alternating first
                    for mode in sorted(modes, reverse=(i + r) % 2 == 1):
                        engine.tracer = modes[mode]
                        recent.clear()
                        t0 = time.perf_counter()
                        engine.answer(q)
                        light[mode].append(time.perf_counter() - t0)
                        modes[mode].flush()  # the trace is written before the next request
                for mode in sorted(modes, reverse=r % 2 == 1):  # back to back
                    engine.tracer = modes[mode]
                    c0, t0 = time.process_time(), time.perf_counter()
                    for q in questions:
                        recent.clear()
                        engine.answer(q)
                    modes[mode].flush()
                    burst[mode].append(len(questions) / (time.perf_counter() - t0))
                    cpu[mode] += time.process_time() - c0
        finally:
            if old is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = old
    med = {m: statistics.median(v) * 1000 for m, v in light.items()}
    ratio = med["on"] / med["off"]
    qps = {m: statistics.median(v) for m, v in burst.items()}
    n = rounds * len(questions)
    rows = [
        Row(f"tracing, light load, {len(questions)} questions x {rounds} rounds: median "
            f"/answer latency, traces on vs off", f"{med['on']:.1f} ms", f"{med['off']:.1f} ms",
            f"{ratio:.3f}", "<= 1.05", ratio <= 1.05),
        Row("tracing, back-to-back requests: answers/s, traces off vs on (information: trace "
            "writing competes for the CPU)", f"{qps['off']:.1f} q/s", f"{qps['on']:.1f} q/s",
            f"{qps['off'] / qps['on']:.2f}", "-", None),
    ]
    notes = [f"tracing: CPU per request {1000 * cpu['off'] / n:.1f} ms untraced, "
             f"{1000 * cpu['on'] / n:.1f} ms traced (MLflow writing the trace to its sqlite "
             f"store, mostly off the request path)"]
    return rows, notes
