"""The config language of a run: typed schemas registered in Hydra's ConfigStore with ranges and
choices, composition outside the Hydra app, the checks a composed config passes before any run
exists, and every stage built from a config, for the runner and for serving alike.

May import every package before it, through ``tracking``; the runner (``run``), the decision
(``decide``), the reports and serving import it, never the other way round.
"""
