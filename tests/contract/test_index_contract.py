"""Every option of the ``index`` group and BM25 meet the ``Index`` contract (``contracts``)."""

from contract.contracts import IndexContract, TermIndexContract

from ragexp.index import ann
from ragexp.index.bm25 import BM25Params


class TestFlat(IndexContract):
    def get_index(self):
        return ann.FlatSpec()


class TestFlatInBlocks(IndexContract):
    def get_index(self):
        return ann.FlatSpec(block_size=4)


class TestHNSW(IndexContract):
    exact = False

    def get_index(self):
        return ann.HNSWSpec(M=4, ef_construction=16, ef_search=16)


class TestIVF(IndexContract):
    exact = False

    def get_index(self):
        return ann.IVFSpec(nlist=2, nprobe=2)


class TestIVFPQ(IndexContract):
    exact = False

    def get_index(self):
        return ann.IVFPQSpec(nlist=1, nprobe=1, m=4, nbits=2)


class TestBM25(TermIndexContract):
    def get_index(self):
        return BM25Params()


class TestBM25L(TermIndexContract):
    def get_index(self):
        return BM25Params(method="bm25l", k1=1.2)


class TestBM25Plus(TermIndexContract):
    def get_index(self):
        return BM25Params(method="bm25+")
