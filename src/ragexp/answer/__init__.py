"""The answer step and its judge: the answerer interface and citation checker, the extractive and
LLM answerers, the OpenAI-compatible client, and the LLM judge with its agreement check.

After retrieval in the pipeline: may import ``text``, ``data``, ``index`` and ``stages``.
"""
