"""Every shipped config option composed, as data to compare a change of the schemas against.

For each option of each config group (``chunking=semantic``, ``generator=llm``, ...) and each
shipped ablation (``+ablation=hybrid``), the config ``python -m ragexp`` (or ``ragexp questions
generate``) would compose, recorded three ways: ``resolved`` (interpolations resolved, values as
OmegaConf types them: ``60.0`` not ``60``), ``hash`` (``tracking.store.config_hash`` of it, with
fixed data and code identities) and ``nodes`` (per key, the node class OmegaConf gives it, whether
it may be null, and the field metadata of its schema: ranges, choices, paths, hints). Paths that
depend on the checkout (the shipped examples, the current folder) read ``<shipped>`` and
``<cwd>``, so the record compares across machines.

``python -m tools.composed_configs --out tests/fixtures/composed_configs.json.gz`` writes it;
``tests/unit/test_settings.py`` composes again and compares.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Values for the keys an option leaves ``MISSING``: fixed absolute paths (never read: nothing is
# validated or built), so that every option resolves.
REQUIRED = {
    ("dataset", "markdown"): ["dataset.corpus_dir=/data/corpus", "dataset.questions=/data/q"],
    ("dataset", "beir"): ["dataset.path=/data/beir"],
    ("embedder", "fastembed"): ["embedder.model=some/model"],
    ("embedder", "precomputed"): ["embedder.path=/data/vectors"],
    ("retriever", "trec_run"): ["retriever.path=/data/run.trec"],
    ("reranker", "cross_encoder"): ["reranker.model_path=/data/ce"],
}
QUESTIONS_GROUPS = ("generator",)


def cases(conf: Path) -> list[tuple[str, str, list[str]]]:
    """``(config name, label, overrides)`` for the default config, every option of every group
    and every ablation, sorted."""
    out = [("config", "default", [])]
    for group_dir in sorted(p for p in conf.iterdir() if p.is_dir() and p.name != "hydra"):
        group = group_dir.name
        for f in sorted(group_dir.glob("*.yaml")):
            name = "questions" if group in QUESTIONS_GROUPS else "config"
            override = f"+ablation={f.stem}" if group == "ablation" else f"{group}={f.stem}"
            out.append((name, f"{group}={f.stem}", [override, *REQUIRED.get((group, f.stem), [])]))
    return out


def portable(value: Any, places: dict[str, str]) -> Any:
    """``value`` with every string's checkout-dependent prefixes (``places``: path -> mark)
    replaced by their marks."""
    if isinstance(value, dict):
        return {k: portable(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, places) for v in value]
    if isinstance(value, str):
        for path, mark in places.items():
            value = value.replace(path, mark)
    return value


def metadata(meta: Any) -> dict[str, Any]:
    """A field's metadata as JSON (tuples of choices as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(meta.items())}


def nodes(cfg: DictConfig, prefix: str = "") -> dict[str, dict[str, Any]]:
    """``{key: {"node": class, "optional": bool, "meta": field metadata}}`` for every key under
    ``cfg`` (``hydra`` left out), recursively."""
    out: dict[str, dict[str, Any]] = {}
    kind = OmegaConf.get_type(cfg)
    meta = ({f.name: f.metadata for f in dataclasses.fields(kind)}
            if kind is not None and dataclasses.is_dataclass(kind) else {})
    for key in cfg:
        if key == "hydra":
            continue
        node = cfg._get_node(key)
        full = f"{prefix}{key}"
        out[full] = {"node": type(node).__name__, "optional": node._is_optional(),
                     "meta": metadata(meta.get(key, {}))}
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing() \
                and not node._is_interpolation():
            out.update(nodes(node, f"{full}."))
    return out


def record(name: str, overrides: list[str]) -> dict[str, Any]:
    """The config ``name`` composed with ``overrides``: ``resolved``, ``hash`` and ``nodes``
    (module docstring)."""
    # defer heavy import
    from ragexp.config import schema
    from ragexp.config.compose import compose
    from ragexp.data import shipped
    from ragexp.tracking.store import config_hash

    schema.register()

    cfg = compose(name, overrides)
    places = {str(Path(shipped.conf_dir()).parent): "<shipped>", str(Path.cwd()): "<cwd>"}
    resolved = portable(OmegaConf.to_container(cfg, resolve=True), places)
    return {"overrides": overrides, "resolved": resolved,
            "hash": config_hash(resolved, {}, code="fixed"), "nodes": nodes(cfg)}


def main(argv: list[str] | None = None) -> None:
    """Write the record of every case (``cases``) as gzipped JSON to ``--out``."""
    # defer heavy import
    from ragexp.data import shipped

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    out = {label: record(name, overrides) for name, label, overrides in
           cases(Path(shipped.conf_dir()))}
    args.out.write_bytes(gzip.compress((json.dumps(out, indent=1) + "\n").encode(), mtime=0))
    print(f"{args.out}: {len(out)} configs")


if __name__ == "__main__":
    main()
