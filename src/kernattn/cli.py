"""Command line of the kernattn pipeline: `kernattn <stage> [options]`.

Each stage is a subcommand whose module provides
    HELP: str                       one-line summary for `kernattn --help`
    add_arguments(parser) -> None   the stage's options
    run(args) -> int                the stage itself; returns the exit status
and is listed in STAGES below. Bad arguments end with one line on stderr
("kernattn <stage>: error: ...") and exit status 2; a stage reports a bad combination of
arguments it can only detect itself by raising `UsageError` (or the attention registry's
`AttentionConfigError`), which is turned into the same one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand -> module; the module is imported when the parser is built.
STAGES: dict[str, str] = {
    "bench-attention": "kernattn.bench.attention",
}


class UsageError(ValueError):
    """A bad argument or combination of arguments: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) and exit status 2."""

    def error(self, message: str):  # noqa: D401 (argparse's signature)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `kernattn` parser; `parser.stages` maps each subcommand to its own parser."""
    parser = _Parser(prog="kernattn", description="The kernel view of attention: pipeline stages.")
    parser.stages = {}
    sub = parser.add_subparsers(dest="command", metavar="STAGE", required=True, parser_class=_Parser)
    for name, module_name in STAGES.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().split("\n\n")[0]
        stage = sub.add_parser(name, help=module.HELP, description=doc,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(stage)
        stage.set_defaults(_run=module.run)
        parser.stages[name] = stage
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one stage; returns the exit status (0 on success, 2 on a usage error)."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the stage's parser, so the message names the stage
            parser.stages[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help (0) or a bad argument (2, message already printed)
        return exc.code if isinstance(exc.code, int) else 1
    from .attention import AttentionConfigError

    try:
        return int(args._run(args) or 0)
    except (UsageError, AttentionConfigError) as exc:
        print(f"kernattn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    # `python -m kernattn.cli`: run the imported module's main, so that stages raising
    # kernattn.cli.UsageError are caught by the same class (not a copy in __main__).
    from kernattn.cli import main as _main

    sys.exit(_main())
