"""Every chunker meets the ``Chunker`` contract (``contracts``)."""

from contract.contracts import ChunkerContract

from ragexp.stages.chunking import MarkdownChunker, WholeDocumentChunker
from ragexp.stages.parent_child import ParentChildChunker
from ragexp.stages.semantic_chunking import SemanticChunker
from ragexp.stages.sentence_chunking import SentenceChunker


class TestMarkdown(ChunkerContract):
    def get_chunker(self, tmp_path):
        return MarkdownChunker(max_words=12, overlap_words=3)


class TestSentences(ChunkerContract):
    def get_chunker(self, tmp_path):
        return SentenceChunker(sentences=2, max_words=12)


class TestSemantic(ChunkerContract):
    def get_chunker(self, tmp_path):
        return SemanticChunker({"_target_": "ragexp.index.embedders.HashEmbedder", "dim": 64},
                               min_words=5, max_words=20, cache_dir=str(tmp_path / "cache"))


class TestParentChild(ChunkerContract):
    def get_chunker(self, tmp_path):
        return ParentChildChunker(MarkdownChunker(max_words=12, overlap_words=3))


class TestWholeDocument(ChunkerContract):
    def get_chunker(self, tmp_path):
        return WholeDocumentChunker()
