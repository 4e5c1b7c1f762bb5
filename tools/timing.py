"""Timing side by side, for the benchmark tables."""

from __future__ import annotations

import time


def best_of(fns: dict, repeats: int, warmup: bool = True) -> dict[str, float]:
    """Best wall time of each callable, the callables interleaved round by round in alternating
    order (ABBA...) so that a burst of load on the machine hits all of them alike."""
    for fn in fns.values() if warmup else ():
        fn()
    best = {name: float("inf") for name in fns}
    for r in range(repeats):
        for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
            start = time.perf_counter()
            fns[name]()
            best[name] = min(best[name], time.perf_counter() - start)
    return best
