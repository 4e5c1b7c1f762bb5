"""The MLflow edge: where runs go, what each run records, who owns a run's life, and what is kept
on disk while the store is unreachable.

May import every package before it, through ``evaluation``.
"""
