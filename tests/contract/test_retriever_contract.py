"""Every retriever meets the ``Retriever`` contract (``contracts``): dense search over each
option of the ``index`` group, BM25 variants, hybrid fusion and a replayed TREC run."""

from pathlib import Path

from contract.contracts import CHUNKS, QUERIES, RetrieverContract

from ragexp.index import ann
from ragexp.stages.external import TrecRunRetriever
from ragexp.stages.fusion.rank import RRF
from ragexp.stages.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Part


def dense_on(index, resources):
    resources.index_spec = index
    return DenseRetriever(resources)


class TestDenseFlat(RetrieverContract):
    def get_retriever(self, resources):
        return DenseRetriever(resources)


class TestDenseHNSW(RetrieverContract):
    exact = False

    def get_retriever(self, resources):
        return dense_on(ann.HNSWSpec(M=4, ef_construction=16, ef_search=16), resources)


class TestDenseIVF(RetrieverContract):
    exact = False

    def get_retriever(self, resources):
        return dense_on(ann.IVFSpec(nlist=2, nprobe=2), resources)


class TestDenseIVFPQ(RetrieverContract):
    exact = False

    def get_retriever(self, resources):
        return dense_on(ann.IVFPQSpec(nlist=1, nprobe=1, m=4, nbits=2), resources)


class TestBM25(RetrieverContract):
    def get_retriever(self, resources):
        return BM25Retriever(resources)


class TestBM25L(RetrieverContract):
    def get_retriever(self, resources):
        return BM25Retriever(resources, method="bm25l", k1=1.2)


class TestBM25Plus(RetrieverContract):
    def get_retriever(self, resources):
        return BM25Retriever(resources, method="bm25+", delta=1.0)


class TestHybrid(RetrieverContract):
    def get_retriever(self, resources):
        return HybridRetriever(resources, {"dense": Part(DenseRetriever, depth=4),
                                           "bm25": Part(BM25Retriever, depth=4)}, RRF())


class TestTrecRun(RetrieverContract):
    """A run file ranking every chunk for every query, c5 and c6 tied."""

    def get_retriever(self, resources):
        path = Path(resources.cache.root).with_suffix(".run")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for q in QUERIES:
                for rank, c in enumerate(CHUNKS, start=1):
                    score = 1.0 if c.chunk_id in ("c5", "c6") else 1.0 / rank
                    f.write(f"{q} Q0 {c.chunk_id} {rank} {score} run\n")
        return TrecRunRetriever(resources, str(path))
