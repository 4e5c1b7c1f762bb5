"""Tools that are not the product: benchmarks, synthetic data, the writers of the docs pages'
regenerated blocks, screenshots. Run from the repository root (`python -m tools.bench`, or the
`make` targets)."""
