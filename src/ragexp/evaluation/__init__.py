"""Measures and statistics, pure: ir_measures-named measures, per-query scoring and averaging,
paired tests and their corrections, failed-question analysis.

May import the packages before it (``text`` .. ``answer``); nothing here touches disk or MLflow.
"""
