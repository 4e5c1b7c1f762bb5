"""The ``ragexp`` command: argument parsing and one module per verb family (init, runs, ui, traces,
the result tables of ``docs/results.md``).

The top of the house: may import any package.
"""
