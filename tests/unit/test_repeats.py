"""Repeated log lines of a run said once with a count (#19 kind 10), and the per-query line of
the latency sample gone: a run on the handbook scored per document (22 documents, k=100, so
every query ranks fewer than k) says so in one line, not once more per latency query."""

from __future__ import annotations

import io
import logging

import pytest
from workspaces import compose_config

from ragexp.run import repeats
from ragexp.run.app import build_and_run
from ragexp.run.app import resolve as resolve_job


@pytest.fixture
def two_handlers():
    """A logger with two handlers, as Hydra gives the root one (console and app.log)."""
    logger = logging.getLogger("test_repeats.root")
    logger.propagate, logger.level = False, logging.INFO
    streams = [io.StringIO(), io.StringIO()]
    handlers = [logging.StreamHandler(s) for s in streams]
    for h in handlers:
        logger.addHandler(h)
    yield logger, streams
    for h in handlers:
        logger.removeHandler(h)


def test_identical_lines_are_said_once_then_counted_on_every_handler(two_handlers):
    logger, streams = two_handlers
    with repeats.collapsed(logger) as seen:
        for _ in range(296):
            logger.warning("1 of 1 queries rank fewer than k=%d documents", 100)
        logger.warning("stage %s built", "chunks")
        logger.warning("stage %s built", "tokens")  # same template, other text: both shown
        logger.info("1 of 1 queries rank fewer than k=100 documents")  # other level: its own
    expected = ["1 of 1 queries rank fewer than k=100 documents", "stage chunks built",
                "stage tokens built", "1 of 1 queries rank fewer than k=100 documents",
                "1 of 1 queries rank fewer than k=100 documents (logged 296 times in this run)"]
    for stream in streams:  # each handler wrote each line once: the verdict is per record
        assert stream.getvalue().splitlines() == expected
    assert seen.repeated() == [("test_repeats.root", logging.WARNING,
                                "1 of 1 queries rank fewer than k=100 documents", 296)]
    assert not any(isinstance(f, repeats.RepeatFilter) for h in logger.handlers
                   for f in h.filters)  # removed on exit


def test_after_the_run_repeats_are_shown_again(two_handlers):
    logger, streams = two_handlers
    with repeats.collapsed(logger):
        logger.warning("same")
    logger.warning("same")
    assert streams[0].getvalue().splitlines() == ["same", "same"]


def test_a_document_scored_run_says_short_rankings_once(caplog, tmp_path, mlflow_store):
    cfg = compose_config("embedder=hash", "retriever=bm25", "reranker=none",
                         "dataset.unit=document", f"cache_dir={tmp_path}", "progress=false")
    job = resolve_job(cfg)
    with caplog.at_level(logging.INFO):
        result = build_and_run(cfg, job.dataset)
    said = [r.getMessage() for r in caplog.records if "rank fewer than" in r.getMessage()]
    n = len(job.dataset.queries())
    # the handbook has 22 documents: every query ranks fewer than k=100 of them
    assert said == [f"{n} of {n} queries rank fewer than k=100 documents: the retriever "
                    f"returned every chunk it scores (e.g. {job.dataset.queries()[0].qid})"]
    assert result.metrics["time.query_p50_ms"] > 0  # the latency sample ran, silently
