"""A setting is declared once, beside its code: the schemas Hydra composes are generated from the
stage classes (``ragexp.settings``), and they compose exactly what the hand-written schemas
composed. ``tests/fixtures/composed_configs.json.gz`` holds every shipped option and ablation as
composed at commit 14eb929, before any schema was generated (``python -m tools.composed_configs``
wrote it); each is composed again here and compared: resolved values and their types, the run
identity (``config_hash``), the node types OmegaConf gives each key, and each field's ranges,
choices, paths and hints."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tools import composed_configs

RECORDED = json.loads(gzip.decompress(
    (Path(__file__).parent / "fixtures" / "composed_configs.json.gz").read_bytes()))


def typed(value):
    """``value`` with each leaf paired with its type's name, so ``60`` and ``60.0`` differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


@pytest.fixture(scope="module")
def composed() -> dict:
    """Every case of ``composed_configs.cases`` composed with today's schemas, by label."""
    from ragexp.data import shipped

    return {label: composed_configs.record(name, overrides) for name, label, overrides in
            composed_configs.cases(Path(shipped.conf_dir()))}


def test_every_shipped_option_and_ablation_was_recorded(composed):
    assert sorted(composed) == sorted(RECORDED)


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_an_option_composes_as_it_did_before_schemas_were_generated(label, composed):
    now, before = composed[label], RECORDED[label]
    assert typed(now["resolved"]) == typed(before["resolved"])
    assert json.dumps(now["resolved"]) == json.dumps(before["resolved"])  # key order too
    assert now["hash"] == before["hash"]
    assert now["nodes"] == before["nodes"]
