"""Indexes and what feeds them: embedders, the on-disk embedding cache, FAISS flat search, BM25,
the stage store that lets a sweep's jobs share chunks, tokens, BM25 and vectors, and the count
of what the embedder's token window cut.

May import ``text`` and ``data``.
"""
