"""The ``Index`` protocol: what every kind of index over a run's chunks says about itself, so
``Resources`` keeps built indexes in one registry by stage key, whatever their kind (the dense
options of ``index/ann/``, BM25 in ``bm25.py``)."""

from __future__ import annotations

from typing import Any, Protocol


class Index(Protocol):
    """One kind of index over a run's chunks, as data: ``build(data)`` makes it from its
    ``source`` (``"vectors"``: the (n, d) float32 passage vectors; ``"terms"``: the chunks'
    ``TokenMatrix``), ``key(source_key)`` is the built index's stage key (the source's stage key
    and every setting the build depends on, never a query-time one), and ``searcher(built)``
    is what a stage searches: the built index with the query-time settings applied."""

    source: str

    def key(self, source_key: str) -> str: ...

    def build(self, data: Any) -> Any: ...

    def searcher(self, built: Any) -> Any: ...
