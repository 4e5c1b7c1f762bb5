"""How the sub-commands' ``--help`` shows defaults: argparse's ``ArgumentDefaultsHelpFormatter``
without the ``(default: None)`` it appends to an option that has no default (``--kinds``,
whose help already says what leaving it out means, read "... every kind the generator writes)
(default: None)")."""

from __future__ import annotations

import argparse


class Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` after an option's help only where X is a value (not None or False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)
