"""`kernattn variants [--json] [--plugins P ...]`: every registered attention variant, built-in
or plugin, with its one-line summary, the tracks it is defined on, its options with their
defaults (and choices) and where it comes from. `--json` writes the same as one JSON list for
tools. Needs no params.yaml: one in the current folder (or --params) adds its `plugins:`. The
list itself is kernattn.config.variants' (the docs and the report show the same).

    kernattn variants
    kernattn variants --json --plugins examples/plugins/cosine_attention.py
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON list, for tools")
    parser.add_argument("--plugins", nargs="*", default=[], metavar="P",
                        help="plugin files or modules to load first (beside params.yaml's `plugins:`)")


def run(args: argparse.Namespace) -> int:
    from ..attention import available
    from ..config.variants import describe_variant
    from .cli import load_command_plugins

    load_command_plugins(args)
    rows = [describe_variant(name) for name in available()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        print(f"{row['name']} ({row['kind']}): {row['summary']}")
        print(f"    tracks: {', '.join(row['tracks'])}; from: {row['reference']}")
        opts = [f"{k}={v['default']!r}" + (f" ({'/'.join(map(str, v['choices']))})" if "choices" in v else "")
                for k, v in row["options"].items()]
        print(f"    options: {', '.join(opts) or '(none)'}")
    return 0
