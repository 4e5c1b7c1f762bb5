"""The pluggable retrieval stages a config group chooses by ``_target_``: chunkers, retrievers,
fusion, external TREC runs, rerankers and abstain signals. Each has one small batch-first
interface (a ``Protocol``). ``ranking`` chains them for a batch of questions, the one ranking
path of the runner and of serving.

May import ``text``, ``data`` and ``index``.
"""
