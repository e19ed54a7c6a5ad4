"""One rank of `kernattn <command> --nproc N` (engine/launch.py): torchrun starts this module,
an entry point beside the cli, which runs the command's argv, handed over in the environment
(torchrun's own parser would read the command's options, `--run` among them, as its own)."""

from __future__ import annotations

import json
import os
import sys

from kernattn.engine.launch import ARGV_ENV


def main() -> int:
    from kernattn.cli import main as cli_main

    return cli_main(json.loads(os.environ[ARGV_ENV]))


if __name__ == "__main__":
    sys.exit(main())
