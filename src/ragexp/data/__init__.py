"""Data in: the user's input files and the datasets built from them.

Readers for markdown, BEIR and TREC files; the golden set and its span-based relevance rule (so
labels survive re-chunking); scoring units and MaxP unit rankings (``docrank``); the dev/test
split; the shipped handbook and config groups (``shipped``); files written whole or not at
all, with a plain write's mode (``files``). May import ``text``.
"""
