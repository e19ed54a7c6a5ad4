"""The CLI reference: `kernattn --help` and each command's own `--help`, as the parser prints
them (kernattn.cli builds the parser; each command's module adds its options)."""

from __future__ import annotations

import os

from .. import cli


def help_text(parser) -> str:
    """The parser's help at a fixed width, so the page does not change with the terminal."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def cli_reference() -> str:
    """Markdown: the top-level help, then one section per command with its help."""
    out = ["```text", help_text(cli.build_parser()), "```", ""]
    for name in cli.STAGES:
        out += [f"### `kernattn {name}`", "", "```text", help_text(cli.build_parser(name).stages[name]), "```", ""]
    return "\n".join(out)
