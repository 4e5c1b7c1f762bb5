"""The cheaper paths of issue #21 give what the paths they replace gave."""

from __future__ import annotations

from importlib import metadata

from ragexp.tracking import provenance


def test_distributions_match_packages_distributions():
    """Top-level module -> distributions, read from RECORD text, equals the stdlib's walk that
    stats every file; a stale ``__pycache__`` entry is the one name it may add."""
    ours = dict(provenance._distributions())
    ours.pop("__pycache__", None)
    reference = metadata.packages_distributions()
    reference.pop("__pycache__", None)
    assert ours == reference
    assert provenance.module_version("ragexp.stages.retrievers") == \
        f"ragexp=={metadata.version('ragexp')}"
