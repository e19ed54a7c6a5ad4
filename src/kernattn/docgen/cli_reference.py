"""The CLI reference: `kernattn --help` and each command's own `--help`, as the parser prints
them (kernattn.cli builds the parser; each command's module adds its options)."""

from __future__ import annotations

import os
from unittest import mock

from .. import cli


def help_text(parser) -> str:
    """The parser's help at a fixed width, so the page does not change with the terminal."""
    with mock.patch.dict(os.environ, COLUMNS="100"):  # argparse reads the width from COLUMNS
        return parser.format_help().rstrip()


def cli_reference() -> str:
    """Markdown: the top-level help, then one section per command with its help."""
    out = ["```text", help_text(cli.build_parser()), "```", ""]
    for name in cli.STAGES:
        out += [f"### `kernattn {name}`", "", "```text", help_text(cli.build_parser(name).stages[name]), "```", ""]
    return "\n".join(out)
