"""ragexp: measure which retrieval configuration of a RAG system actually works, and by how much.

Packages by role, in the order data flows (``LAYERS``, bottom first). A module may import the
shared records and errors here and any package before its own, never one after it
(``tests/test_architecture.py`` holds this): ``text`` -> ``data`` -> ``index`` -> ``stages`` ->
``answer`` -> ``generate`` -> ``evaluation`` -> ``tracking`` -> ``decide`` -> ``report`` -> ``run``
-> ``serving`` -> ``cli``. Module paths of ragexp before that layout (``ragexp.retrievers``, ...) stay loadable
through ``ragexp.legacy``, so recorded runs and champions keep working.
"""

from ragexp import legacy

__version__ = "0.1.0"
LAYERS = ("text", "data", "index", "stages", "answer", "generate", "evaluation", "tracking",
          "decide", "report", "run", "serving", "cli")

legacy.install()
