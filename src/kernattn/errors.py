"""What a user sees when something is wrong: one line, a non-zero exit, no traceback.

This module imports nothing of the package, so every floor (attention, io, config, engine,
tracks, stages, report, CLI) can raise these without importing the CLI or the config loader.
`kernattn.cli.main` turns each of them into `kernattn <stage>: error: <message>` and exit 2.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A bad argument, file or combination of them: reported in one line, exit status 2."""


class ParamsError(ValueError):
    """A params.yaml that cannot be used; the message is one line naming file and key."""
