"""Pages of the docs site generated from the code (docs/hooks.py calls them while MkDocs
builds): the params reference from the typed config, the CLI reference from the parser, the
variants from the registry (`kernattn variants`), and
tables rendered from the CSVs under results/. Generated at build time, they cannot drift."""

from __future__ import annotations

import shlex

from ..errors import UsageError


def render_marker(spec: str, page: str) -> str:
    """The markdown a page's `<!-- generated: SPEC -->` line stands for."""
    kind, *args = shlex.split(spec)
    if kind == "config-reference":
        from .config_reference import config_reference

        return config_reference()
    if kind == "cli-reference":
        from .cli_reference import cli_reference

        return cli_reference()
    if kind == "variants":
        from .variants_reference import variants_reference

        return variants_reference()
    if kind == "csv" and args:
        from .csv_table import csv_table

        return csv_table(args[0], args[1].split(",") if len(args) > 1 else None)
    raise UsageError(f"{page}: unknown generated part {spec!r} (config-reference, cli-reference, variants, csv PATH [COLS])")
