"""Fusion: several first-stage rankings of the same queries made into one (``retriever=hybrid``,
config group ``fusion``), one family per module.

- ``rank``: rank-based fusion, which reads only each item's position: ``rrf`` (Cormack, Clarke
  & Buettcher 2009) and ``weighted_rrf`` (a weight per part).
- ``score``: score-based fusion of normalised scores: ``combsum`` and ``combmnz`` (Fox & Shaw
  1994) and ``convex`` (a convex combination of two parts, weight alpha).
- ``norm``: the per-query score normalisations the score-based ones take (``fusion.norm``:
  ``minmax``, ``zscore``, ``sum``, ``dbsf``).

Every method takes ``{part name: Ranking}`` (each ranking already cut to its part's depth by
``HybridRetriever``) and returns one ``Ranking``; an item a part did not return contributes 0
from that part. The definitions follow ranx (AmenRa/ranx 0.3.21, ``ranx.fuse``), which the
tests check them against; each docstring says where ranx and the paper differ.
"""
