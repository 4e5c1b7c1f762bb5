import signal
import sys

from ragexp.run.app import main
from ragexp.tracking.lifecycle import signal_received

try:
    main()
except BaseException:
    sig = signal_received()
    if sig is None:
        raise
    print(f"ragexp: stopped by {signal.Signals(sig).name}; the runs it started are ended KILLED",
          file=sys.stderr)
    sys.exit(128 + sig)  # open runs are ended by lifecycle's exit hook on the way out
