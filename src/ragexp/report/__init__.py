"""A sweep's HTML page and charts: the numbers it shows (pure), the charts (SVG written as text)
and the MLflow data it reads.

May import every package before it, through ``decide``.
"""
