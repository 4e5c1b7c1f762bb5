"""ragexp: measure which retrieval configuration of a RAG system actually works, and by how much."""

__version__ = "0.1.0"
