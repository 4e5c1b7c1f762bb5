"""Running experiments: the pipeline of one run, the Hydra entry point, the sweep's parent run,
and the held-out confirm. The config they run (schemas, checks, stages built) is ``config``'s.

May import every package before it, through ``report`` (a sweep ends in a decision and a page).
"""
