"""Indexes and what feeds them: embedders, the on-disk embedding cache, FAISS flat search, BM25,
and the stage store that lets a sweep's jobs share chunks, tokens, BM25 and vectors.

May import ``text`` and ``data``.
"""
