"""Every question generator meets the ``Generator`` contract (``contracts``): ``known_item``,
``structure``, and ``llm`` against the fake endpoint of ``fake_llm`` (``GenerationFake``)."""

import pytest
from contract.contracts import GeneratorContract
from fake_llm import KEY, GenerationFake

from ragexp.answer.llm import Endpoint
from ragexp.generate.known_item import KnownItemGenerator
from ragexp.generate.llm_questions import LLMGenerator
from ragexp.generate.structure import StructureGenerator
from ragexp.records import Document


class TestKnownItem(GeneratorContract):
    def get_generator(self):
        return KnownItemGenerator()


class TestKnownItemDiscriminative(GeneratorContract):
    def get_generator(self):
        return KnownItemGenerator(strategy="discriminative", lam=0.3)


class TestStructure(GeneratorContract):
    def get_generator(self):
        return StructureGenerator()


class TestStructureOnePerSection(GeneratorContract):
    def get_generator(self):
        return StructureGenerator(per_section=1)


class TestLLM(GeneratorContract):
    """The fake writes one question per passage of ``ok.md``, by the passage alone."""

    @pytest.fixture(autouse=True)
    def fake(self, monkeypatch):
        monkeypatch.setenv(KEY, "sk-test")
        server = GenerationFake(slow_s=1.5).start()
        self.url = server.url
        yield server
        server.stop()

    def docs(self):
        return [Document("ok.md", "Ok", "# Ok\n\nThe lease renewal of ok follows the rule "
                         "numbered 20 in the ok handbook. Operators change it with the ok_13 "
                         "key.\n\nA second passage of ok says where the ok handbook lives. "
                         "It lives in the docs folder.\n")]

    def get_generator(self):
        return LLMGenerator(Endpoint(self.url, "fake", api_key_env=KEY, timeout=5.0, max_retries=1))
