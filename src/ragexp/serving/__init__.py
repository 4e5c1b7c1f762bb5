"""Serving a run: the engine rebuilt from a run's config, the champion as an MLflow pyfunc model,
promotion, the HTTP API and its page, access control, tracing, and mining traces back into
questions.

May import every package before it except ``run``: serving ranks with ``stages.ranking`` and
builds a run's stages with ``config.build``, never with the experiment runner (its pipeline,
sweeps and pandas; ``tests/unit/test_architecture.py`` holds this).
"""
