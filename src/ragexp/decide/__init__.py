"""Deciding between runs: comparison tables, the sweep's objective, baseline tests and the runs tied
with the best, and the quality gate.

May import every package before it, through ``config``.
"""
