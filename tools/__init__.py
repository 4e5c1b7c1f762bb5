"""Tools that are not the product: benchmarks, synthetic data, README and docs writers, screenshots. Run from the repository root (`python -m tools.bench`, or the `make` targets)."""
