"""Question generation: golden-format questions written from the corpus itself, so a dataset
without hand-written questions can still be measured, and one with them can be checked against a
second, larger source (``ragexp questions generate``; ``docs/questions.md``).

Passages sampled stratified over documents and sections (``passages``); generators that write a
question from a passage: simulated known-item queries, offline (``known_item``), the questions a
markdown corpus's headings, definitions, tables, steps and FAQ ask, offline (``structure``), and
an OpenAI-compatible model (``llm_questions``); the filters every question passes before it is
written (``filters``); the resumable output file (``outfile``); the loop (``run``); the warning
when the model that wrote the questions is also in the system they score (``circularity``).

After the answer step in the layering: may import ``text``, ``data``, ``index``, ``stages`` and
``answer`` (the LLM client).
"""
