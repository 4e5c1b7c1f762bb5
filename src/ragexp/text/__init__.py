"""Text analysis: the one analyser (words, stems, sentences), compact token matrices, and a
markdown document's blocks (as CommonMark reads them) and outline.

Owns what "a term" and "a section" mean to every later stage. May import only the shared
records and errors (``ragexp.records``, ``ragexp.errors``): it sits first in the pipeline.
"""
