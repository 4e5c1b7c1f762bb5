"""Running experiments: typed config schemas and range checks, every stage built from a config,
the pipeline of one run, the Hydra entry point, the sweep's parent run, and the held-out confirm.

May import every package before it, through ``report`` (a sweep ends in a decision and a page).
"""
