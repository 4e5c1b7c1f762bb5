"""``python -m ragexp [overrides]``: one experiment, or a sweep with ``-m`` (``run.app``); a stop by
SIGTERM or Ctrl-C exits 128 + the signal with the runs it started ended KILLED."""

import signal
import sys

from ragexp.cli import process

process.own()  # before the heavy imports below: they are what the collector's settings are for

from ragexp.run.app import entry  # noqa: E402
from ragexp.tracking.lifecycle import signal_received  # noqa: E402

try:
    entry()
except BaseException:
    sig = signal_received()
    if sig is None:
        raise
    print(f"ragexp: stopped by {signal.Signals(sig).name}; the runs it started are ended KILLED",
          file=sys.stderr)
    sys.exit(128 + sig)  # open runs are ended by lifecycle's exit hook on the way out
