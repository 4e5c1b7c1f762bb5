"""Embed a dataset's passages and questions into the shared embedding cache ahead of runs, one
shard of N at a time: ``ragexp embed --shard I/N [overrides]``, or as a Hydra multirun over
shards (``python -m ragexp.run.embed -m +shard=0/2,1/2``, joblib on one machine or
hydra-submitit-launcher on SLURM: docs/embedding.md).

A text belongs to shard ``int(sha256(text)[:8]) mod N``: stable across processes, machines and
runs, whatever the order of the corpus. Shards running at once on one cache also share its
batch claims (``index.cache``), so no text is embedded twice even when shards overlap in time;
a shard whose process dies leaves no half-written entry (the cache appends whole batches
atomically), and running it again embeds only what it lacks.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ragexp.config import build, schema, validation
from ragexp.data import shipped
from ragexp.errors import InvalidValue, RagexpError, counted
from ragexp.index.resources import Resources
from ragexp.run import run_folder, sweep
from ragexp.run.pipeline import read_corpus

schema.register()
SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based: ``0/2`` and ``1/2`` make the whole)."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str, key: str = "--shard") -> Shard:
        """``"I/N"`` -> ``Shard(I, N)``. Raises ``InvalidValue`` naming ``key`` unless
        ``0 <= I < N``."""
        m = SHARD.fullmatch(str(text))
        if not m:
            raise InvalidValue(f"{key}={text}: must be I/N, shard I (from 0) of N, e.g. 0/2")
        i, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 0 <= i < n:
            raise InvalidValue(f"{key}={text}: need N >= 1 and 0 <= I < N (shards 0/{max(n, 1)}"
                               f" to {max(n, 1) - 1}/{max(n, 1)})")
        return cls(i, n)

    def holds(self, text: str) -> bool:
        """Whether ``text`` falls in this shard (stable hash of its UTF-8 bytes)."""
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


@dataclass(frozen=True)
class Embedded:
    """What one shard did: texts of the shard (``passages``, ``questions``, distinct), how
    many of them it embedded (``embedded``: cache misses) and found already cached
    (``cached``)."""

    shard: Shard
    passages: int
    questions: int
    embedded: int
    cached: int

    def line(self) -> str:
        return (f"shard {self.shard.index}/{self.shard.count}: {counted(self.passages, 'passage')}, "
                f"{counted(self.questions, 'question')}; embedded {self.embedded}, already cached "
                f"{self.cached}")


def embed_shard(cfg: DictConfig, shard: Shard) -> Embedded:
    """Embed this shard's distinct passage texts (the chunks ``cfg.chunking`` makes of
    ``cfg.dataset``, as a run makes them) and question texts into the embedding cache under
    ``cfg.cache_dir``, with ``cfg.embedder``. Raises ``ConfigRangeError`` for an invalid
    config and whatever the dataset or embedder raise."""
    validation.validate(cfg)
    dataset = hydra.utils.instantiate(cfg.dataset)
    stages = build.build(cfg)
    corpus = read_corpus(dataset, stages.chunker, build.stage_store(cfg))
    res = Resources(corpus.chunks, stages.make_embedder, stages.cache, progress=cfg.progress,
                    questions=corpus.texts)
    passages = [t for t in dict.fromkeys(c.text for c in corpus.chunks) if shard.holds(t)]
    questions = [t for t in dict.fromkeys(corpus.texts.values()) if shard.holds(t)]
    cache = stages.cache
    cache.embed(res.embedder, passages, "passage", progress=cfg.progress)
    cache.embed(res.embedder, questions, "query", progress=cfg.progress)
    return Embedded(shard, len(passages), len(questions), cache.misses, cache.hits)


class ShardCheck(Callback):
    """Before a multirun over shards runs any job: composes and validates every job
    (``sweep.check_jobs``) and parses each one's ``shard``, so ``+shard=0/2,5/2`` stops with
    exit 2 naming job #1 before shard 0/2 embeds anything. Starts no MLflow run."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        for i, (overrides, cfg) in enumerate(sweep.check_jobs(config) or []):
            try:
                Shard.parse(OmegaConf.select(cfg, "shard", default="0/1"), key="shard")
            except InvalidValue as exc:
                sweep.refuse(f"job #{i}: {' '.join(overrides)}: {exc}\nnothing was run")


@hydra.main(version_base="1.3", config_path=shipped.conf_dir(), config_name="embed")
def main(cfg: DictConfig) -> None:
    """One shard per Hydra job: ``+shard=I/N`` (default the whole, ``0/1``)."""
    try:
        shard = Shard.parse(OmegaConf.select(cfg, "shard", default="0/1"), key="shard")
        print(embed_shard(cfg, shard).line())
    except RagexpError as exc:
        run_folder.remove_if_refused()
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
