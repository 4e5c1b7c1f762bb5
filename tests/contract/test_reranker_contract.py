"""Every reranker meets the ``Reranker`` contract (``contracts``)."""

from pathlib import Path

import pytest
from contract.contracts import RerankerContract

from ragexp.stages.rerankers import CrossEncoderReranker, LexicalReranker, NoReranker

CROSS_ENCODER = Path("~/.cache/ragexp/models/cross-encoder").expanduser()


class TestNone(RerankerContract):
    def get_reranker(self):
        return NoReranker()


class TestLexical(RerankerContract):
    def get_reranker(self):
        return LexicalReranker(top_n=3)


@pytest.mark.skipif(not (CROSS_ENCODER / "model.onnx").is_file(),
                    reason=f"no cross-encoder weights at {CROSS_ENCODER} (none can be "
                           f"downloaded here)")
class TestCrossEncoder(RerankerContract):
    def get_reranker(self):
        return CrossEncoderReranker(str(CROSS_ENCODER), top_n=3)
