"""Settings for a process that a ragexp command owns from start to exit: ``python -m ragexp``
(runs and sweeps) and the ``ragexp`` script. Library use (``import ragexp`` in a notebook, the
tests) never goes through here, so it keeps the interpreter's own settings.

Why the collector (measured with ``python -m tools.bench_wall``, one BM25 run on the handbook,
the same command side by side with and without): a command imports mlflow, SQLAlchemy, pandas
and Hydra, hundreds of thousands of objects that live until exit. With Python's default
thresholds (700, 10, 10) every few hundred allocations of that start-up trigger a collection,
and the full ones rescan all of it: about 0.85 s of a 5.3 s run. Then the interpreter's last
collection at exit walks the whole heap once more: about 1.1 s. Neither frees anything a
process that is about to end would keep.
"""

from __future__ import annotations

import atexit
import gc

# Young-generation threshold raised from 700 to 100,000 allocations: ~140 times fewer
# collections while the imports run; a full collection still comes after 10 x 10 young ones.
GC_THRESHOLD = (100_000, 10, 10)


def own() -> None:
    """Set the collector for a command's process (``GC_THRESHOLD``) and skip the interpreter's
    final collection at exit (``gc.freeze``, registered first so it runs after every other exit
    hook: runs are ended, files flushed and temporary folders removed before it). Memory that
    is garbage in reference cycles is still collected during the run, only less often; what is
    alive at exit the operating system frees."""
    gc.set_threshold(*GC_THRESHOLD)
    atexit.register(gc.freeze)
